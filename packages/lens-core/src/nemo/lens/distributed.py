"""Trace context across `torch.distributed` ranks and pipeline-parallel stages.

- `broadcast_trace_context(rank, src_rank)`: a collective. The source rank's current
  context travels to every rank as a W3C carrier (a small dict of strings).
- `create_linked_span(tracer, name, ...)`: a span under the local current context that
  links to a remote span (from a context or a carrier), for work that follows a remote
  step without being part of it.

For pipeline parallelism, stage code stores a carrier with
`nemo.lens.state.set_pp_trace_carrier`, and the next stage reads it back with
`get_pp_trace_carrier` and passes it to `create_linked_span`.

torch is never imported here. A process that has not imported torch itself cannot have a
process group, so `broadcast_trace_context` returns None at once there, and importing
this module stays cheap.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol, cast, overload

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanContext, Tracer

from nemo.lens._span_lifecycle import encodable_span_name
from nemo.lens._warn_once import WarnOnce
from nemo.lens.helpers import safe_set_span_attributes
from nemo.lens.propagation import (
    _carrier_from_bytes,
    _carrier_to_bytes,
    extract_context,
    inject_context,
)

__all__ = ["broadcast_trace_context", "create_linked_span"]

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "nemo.lens.distributed")
# What a failure warning says happens next.
_CARRY_ON: Final = "lens carries on without it"

#: The tracer scope `create_linked_span` uses when it is given no tracer.
_SCOPE: Final = "nemo.lens.distributed"
#: The largest carrier broadcast, in UTF-8 bytes. A W3C traceparent is 55 bytes, a
#: tracestate at most 512 and baggage at most 8192; anything bigger is not a trace context.
_MAX_CARRIER_BYTES: Final = 64 * 1024


def broadcast_trace_context(rank: int, src_rank: int = 0) -> dict[str, str] | None:
    """Send `src_rank`'s current trace context to every rank; every rank must call it.

    The source injects its current context through the global propagator and broadcasts
    it as UTF-8 JSON: first its length, then its bytes as a uint8 tensor, on the current
    CUDA device when the backend is NCCL and CUDA is available, else on the CPU.

    The process group decides which rank is the source: a `rank` that differs from
    `torch.distributed.get_rank()` is warned about once and otherwise not used, so the
    ranks never disagree about who sends.

    Never raises. A failing collective is logged once and gives None on that rank; a
    payload a rank cannot decode gives None there.

    Args:
        rank: This process's global rank.
        src_rank: The global rank whose context is sent.

    Returns:
        The source's carrier on every rank; `{}` when the source had no active span.
        None without torch, without an initialised process group, when the source's
        carrier could not be encoded (on every rank) or when the broadcast failed.
    """
    dist = _initialised_distributed()
    if dist is None:
        return None
    try:
        torch = sys.modules["torch"]
        own_rank = dist.get_rank()
        if rank != own_rank:
            # A key of plain constants: nothing before the first broadcast may fail on one
            # rank only, or the others would wait in it until the process group's timeout.
            _warnings.warn(
                ("rank mismatch",),
                "broadcast_trace_context: rank=%r but the process group says this is rank "
                "%d; lens follows the process group.",
                rank,
                own_rank,
            )
        is_source = own_rank == src_rank
        device = _tensor_device(torch, dist)
        payload = _encode_current_context() if is_source else b""
        length = torch.tensor([len(payload)], dtype=torch.int64, device=device)
        dist.broadcast(length, src=src_rank)
        size = int(length.item())
        # Every rank decides from the same broadcast length, so all of them either join the
        # second broadcast or none does.
        if not 0 < size <= _MAX_CARRIER_BYTES:
            return None
        if is_source:
            data = torch.tensor(list(payload), dtype=torch.uint8, device=device)
        else:
            data = torch.empty(size, dtype=torch.uint8, device=device)
        dist.broadcast(data, src=src_rank)
        received = payload if is_source else bytes(data.cpu().tolist())
    except Exception as exc:
        _warnings.failure("broadcast_trace_context: the broadcast", exc, _CARRY_ON)
        return None
    return _decode_carrier(received)


class _CreateLinkedSpanSignature(Protocol):
    @overload
    def __call__(
        self,
        tracer: Tracer | None,
        name: str,
        remote_context: Context | SpanContext | None = None,
        remote_carrier: Mapping[str, str] | None = None,
        **attributes: object,
    ) -> Span: ...

    @overload
    def __call__(self, tracer: Tracer | None, name: str, **attributes: object) -> Span: ...


def _typed_as_create_linked_span(fn: Callable[..., Span]) -> _CreateLinkedSpanSignature:
    """What a type checker sees: two overloads, so `**{"pp.stage": 1}` type-checks.

    As for `nemo.lens.helpers.managed_span` (see "what a type checker sees" there): mypy
    checks a `**dict[str, V]` against every keyword parameter it could fill, and an
    identity decorator, unlike `@overload`, leaves the name re-importable in a fallback.
    """
    return cast(_CreateLinkedSpanSignature, fn)


@_typed_as_create_linked_span
def create_linked_span(
    tracer: Tracer | None,
    name: str,
    remote_context: Context | SpanContext | None = None,
    remote_carrier: Mapping[str, str] | None = None,
    **attributes: object,
) -> Span:
    """Start a span under the current context that links to a remote span.

    The remote span is `remote_context`'s (a `Context`, such as `extract_context` returns,
    or a `SpanContext`), or, when no context is given, the one `remote_carrier` describes.
    An invalid or malformed remote gives a span without a link. The span is not made
    current; the caller ends it. Attributes are set as `safe_set_span_attributes` sets
    them. Never raises: should the tracer fail, a non-recording span is returned.

    Args:
        tracer: The tracer to start the span on; None means the global tracer provider's
            `"nemo.lens.distributed"` tracer at the time of the call.
        name: The span's name.
        remote_context: The remote span's context.
        remote_carrier: A carrier written by `inject_context` or `broadcast_trace_context`,
            used when `remote_context` is None.
        **attributes: Span attributes; dotted keys go through `**{...}`.

    Returns:
        The started span.
    """
    try:
        chosen = tracer if tracer is not None else trace.get_tracer(_SCOPE)
        remote = _remote_span_context(remote_context, remote_carrier)
        links = None if remote is None else [Link(remote)]
        span = chosen.start_span(encodable_span_name(name), links=links)
    except Exception as exc:
        _warnings.failure("create_linked_span: starting the span", exc, _CARRY_ON)
        return trace.INVALID_SPAN
    safe_set_span_attributes(span, attributes)
    return span


def _initialised_distributed() -> Any | None:
    """`torch.distributed` when the process has imported torch and initialised a group."""
    if sys.modules.get("torch") is None:  # never imported, or blocked (None)
        return None
    try:
        dist = importlib.import_module("torch.distributed")
        if not dist.is_available() or not dist.is_initialized():
            return None
    except Exception as exc:
        _warnings.failure("broadcast_trace_context: reading torch.distributed", exc, _CARRY_ON)
        return None
    return dist


def _tensor_device(torch: Any, dist: Any) -> Any:
    """The device the broadcast's tensors live on: NCCL moves CUDA tensors only."""
    if "nccl" in str(dist.get_backend()).lower() and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _encode_current_context() -> bytes:
    """The current context's carrier as UTF-8 JSON; b"" when it cannot be sent."""
    carrier: dict[str, str] = {}
    inject_context(carrier)
    payload = _carrier_to_bytes(carrier)
    if payload is None:  # a custom propagator wrote something JSON cannot carry
        _warnings.warn(
            ("carrier not JSON",),
            "broadcast_trace_context: the carrier cannot be encoded as JSON; every rank "
            "gets None instead.",
        )
        return b""
    if len(payload) > _MAX_CARRIER_BYTES:
        _warnings.warn(
            ("carrier too large",),
            "broadcast_trace_context: the carrier is %d bytes, over the %d-byte limit; "
            "every rank gets None instead.",
            len(payload),
            _MAX_CARRIER_BYTES,
        )
        return b""
    return payload


def _decode_carrier(payload: bytes) -> dict[str, str] | None:
    """The carrier `payload` holds, or None when it is not a JSON object of strings."""
    carrier = _carrier_from_bytes(payload)
    if carrier is None:
        _warnings.warn(
            ("carrier unreadable",),
            "broadcast_trace_context: the received carrier is not UTF-8 JSON of an object "
            "of strings; this rank gets None.",
        )
    return carrier


def _remote_span_context(remote_context: object, remote_carrier: object) -> SpanContext | None:
    """The valid span context to link to, or None."""
    if remote_context is None:
        if remote_carrier is None:
            return None
        if not isinstance(remote_carrier, Mapping):
            _warnings.warn(
                ("carrier type", type(remote_carrier).__name__),
                "create_linked_span: remote_carrier must be a dict of strings, got %s; "
                "the span has no link.",
                type(remote_carrier).__name__,
            )
            return None
        remote_context = extract_context(dict(remote_carrier))
    if isinstance(remote_context, SpanContext):
        span_context = remote_context
    elif isinstance(remote_context, Context):
        span_context = trace.get_current_span(remote_context).get_span_context()
    else:
        _warnings.warn(
            ("context type", type(remote_context).__name__),
            "create_linked_span: remote_context must be a Context or a SpanContext, got %s; "
            "the span has no link.",
            type(remote_context).__name__,
        )
        return None
    return span_context if span_context.is_valid else None
