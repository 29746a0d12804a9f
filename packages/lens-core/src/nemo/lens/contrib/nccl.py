"""The trace context as bytes, for NCCL collectives and any other byte channel.

A collective moves tensors, not dicts: the sending rank turns its current context into
UTF-8 JSON bytes (`serialize_context`), puts them in a uint8 tensor, and each receiver
turns the bytes back into a carrier (`deserialize_context`) or straight into a context
(`extract_nccl_context`). This module imports neither torch nor anything else beyond the
OpenTelemetry API; the propagation itself is `nemo.lens.propagation`'s. None of these
functions raises.
"""

from __future__ import annotations

import logging

from opentelemetry import context as otel_context
from opentelemetry.context import Context

from nemo.lens._warn_once import WarnOnce
from nemo.lens.propagation import (
    _carrier_from_bytes,
    _carrier_to_bytes,
    extract_context,
    inject_context,
)

__all__ = ["deserialize_context", "extract_nccl_context", "serialize_context"]

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "nemo.lens.contrib.nccl")

_EMPTY_CARRIER = b"{}"


def serialize_context() -> bytes:
    """The current context's carrier as compact UTF-8 JSON; `b"{}"` with no active span.

    The JSON is ASCII (non-ASCII baggage is escaped), so the bytes always decode again.
    """
    carrier: dict[str, str] = {}
    inject_context(carrier)
    payload = _carrier_to_bytes(carrier)
    if payload is None:  # a custom propagator wrote a value JSON cannot hold
        _warnings.warn(
            "serialize_context",
            "serialize_context could not encode the carrier as JSON; sending an empty "
            "carrier instead. Further such carriers are not logged.",
        )
        return _EMPTY_CARRIER
    return payload


def deserialize_context(data: bytes | bytearray | memoryview) -> dict[str, str] | None:
    """The carrier in `data`, or None if it is not UTF-8 JSON of an object of str to str.

    Args:
        data: What `serialize_context` produced on the sender. Any bytes-like object
            (bytes, bytearray, memoryview, a uint8 NumPy array) is read; anything else,
            a str included, gives None.
    """
    return _carrier_from_bytes(data)


def extract_nccl_context(data: bytes | bytearray | memoryview) -> Context:
    """The context `data` carries; the current context when `data` cannot be read.

    A readable carrier without a valid span (the sender had none active) gives a context
    without one, so a span started under it becomes a new root, as with
    `nemo.lens.propagation.extract_context`. Unreadable data that is not empty is logged
    once.
    """
    carrier = deserialize_context(data)
    if carrier is None:
        if not _is_empty(data):
            _warnings.warn(
                "extract_nccl_context: unreadable",
                "extract_nccl_context got data that is not a JSON carrier; the current "
                "context is used instead. Further unreadable data is not logged.",
            )
        return otel_context.get_current()
    return extract_context(carrier)


def _is_empty(data: bytes | bytearray | memoryview) -> bool:
    try:
        return memoryview(data).nbytes == 0
    except Exception:
        return False
