"""nemo.lens.distributed without a second process: the no-torch and no-group paths, the
carrier's encoding, and create_linked_span's links, parent, attributes and hostile input.

The real two-rank broadcast is in test_distributed_torch.py (integration marker).
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lens_children import python_stdout
from lens_ids import stable_id
from lens_integrations import require
from lens_spans import one
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import (
    CarrierT,
    TextMapPropagator,
    default_getter,
    default_setter,
)
from opentelemetry.trace import SpanContext, TraceFlags

import nemo.lens
from nemo.lens import distributed
from nemo.lens.distributed import broadcast_trace_context, create_linked_span
from nemo.lens.propagation import extract_context, inject_context
from nemo.lens.testing import InMemorySpans, in_memory_spans, isolated_telemetry

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0xB7AD6B7169203331
TRACEPARENT = f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01"
# What os.fsdecode gives for a file name that is not valid UTF-8.
UNDECODABLE = os.fsdecode(b"stage-\xff")


@pytest.fixture(autouse=True)
def _isolated() -> Iterator[None]:
    with isolated_telemetry(clear_span_registry=True):
        yield


def links_of(span: Any) -> list[tuple[int, int]]:
    """(trace id, span id) of each link of a finished span."""
    return [(link.context.trace_id, link.context.span_id) for link in span.links]


# --- the root ---------------------------------------------------------------------------------


def test_root_re_exports_are_the_same_objects() -> None:
    """`nemo.lens` exports both functions as the objects nemo.lens.distributed defines."""
    assert nemo.lens.broadcast_trace_context is broadcast_trace_context
    assert nemo.lens.create_linked_span is create_linked_span
    assert {"broadcast_trace_context", "create_linked_span"} <= set(nemo.lens.__all__)


def test_root_loads_distributed_on_first_access_only() -> None:
    """`import nemo.lens` leaves nemo.lens.distributed unloaded until a name of it is read."""
    code = (
        "import sys, nemo.lens\n"
        "before = 'nemo.lens.distributed' in sys.modules\n"
        "nemo.lens.create_linked_span\n"
        "print(before, 'nemo.lens.distributed' in sys.modules)\n"
    )
    assert python_stdout("-c", code).split() == ["False", "True"]


# --- broadcast_trace_context without a process group ------------------------------------------


def test_broadcast_without_torch_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """With torch missing (a None entry in sys.modules), every rank gets None."""
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    assert broadcast_trace_context(0) is None
    assert broadcast_trace_context(3, src_rank=1) is None


def test_broadcast_never_imports_torch() -> None:
    """A process that never imported torch gets None and still has not imported it."""
    code = (
        "import sys\n"
        "from nemo.lens.distributed import broadcast_trace_context\n"
        "print(broadcast_trace_context(0), 'torch' in sys.modules)\n"
    )
    assert python_stdout("-c", code).split() == ["None", "False"]


@pytest.mark.integration
def test_broadcast_without_a_process_group_is_none(
    spans: InMemorySpans, caplog: pytest.LogCaptureFixture
) -> None:
    """torch imported but no process group initialised: None, even inside a span, no warning."""
    torch = require("torch")
    assert not torch.distributed.is_initialized()
    with caplog.at_level(logging.WARNING), spans.tracer.start_as_current_span("step"):
        assert broadcast_trace_context(0) is None
    assert caplog.records == []


# --- the carrier's encoding -------------------------------------------------------------------


class OversizedPropagator(TextMapPropagator):
    """A real propagator (the API's base class) that writes a carrier past the size limit."""

    def extract(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        getter: Any = default_getter,
    ) -> Context:
        return Context()

    def inject(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        setter: Any = default_setter,
    ) -> None:
        setter.set(carrier, "x-huge", "a" * (distributed._MAX_CARRIER_BYTES + 1))

    @property
    def fields(self) -> set[str]:
        return {"x-huge"}


def test_source_encodes_its_current_context_as_json(spans: InMemorySpans) -> None:
    """The source sends the current span's traceparent as a UTF-8 JSON object."""
    with spans.tracer.start_as_current_span("step") as step:
        payload = distributed._encode_current_context()
    expected: dict[str, str] = {}
    with trace.use_span(step):
        inject_context(expected)
    assert json.loads(payload.decode("utf-8")) == expected
    assert distributed._decode_carrier(payload) == expected


def test_no_active_span_encodes_an_empty_object() -> None:
    """Without an active span the source sends `{}`, which every rank decodes as `{}`."""
    payload = distributed._encode_current_context()
    assert payload == b"{}"
    assert distributed._decode_carrier(payload) == {}


def test_an_oversized_carrier_is_sent_as_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """A carrier over the limit becomes empty data (None on every rank), warned about once."""
    propagate.set_global_textmap(OversizedPropagator())
    with caplog.at_level(logging.WARNING, logger="nemo.lens.distributed"):
        assert distributed._encode_current_context() == b""
        assert distributed._encode_current_context() == b""
    assert len(caplog.records) == 1
    assert "over the" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    "payload",
    [
        b"\xff\xfe",  # not UTF-8
        b"{not json",
        b"[]",
        b'"traceparent"',
        b"null",
        b'{"traceparent": 5}',
        b'{"traceparent": ["a"]}',
        b"[" * 100_000,  # nesting deep enough to exhaust the recursion limit
    ],
)
def test_a_payload_that_does_not_decode_gives_none(payload: bytes) -> None:
    """A receiver that cannot read the payload as a JSON object of strings gets None."""
    assert distributed._decode_carrier(payload) is None


@given(st.binary(max_size=64))
def test_decoding_arbitrary_bytes_never_raises(payload: bytes) -> None:
    """Any payload decodes to a dict of strings or to None; nothing raises."""
    decoded = distributed._decode_carrier(payload)
    assert decoded is None or all(
        isinstance(key, str) and isinstance(value, str) for key, value in decoded.items()
    )


# Text that encodes as UTF-8: no lone surrogates.
encodable_text = st.text(alphabet=st.characters(codec="utf-8"))


@given(st.dictionaries(encodable_text, encodable_text, max_size=4))
def test_every_carrier_of_strings_survives_the_round_trip(carrier: dict[str, str]) -> None:
    """A dict of strings decodes to itself after the source's JSON encoding."""
    payload = json.dumps(carrier, ensure_ascii=False, separators=(",", ":")).encode()
    assert distributed._decode_carrier(payload) == carrier


# --- create_linked_span -----------------------------------------------------------------------


def test_links_the_span_a_carrier_describes(spans: InMemorySpans) -> None:
    """A carrier from another process gives a link to its span (ids and remote flag)."""
    span = create_linked_span(spans.tracer, "recv", remote_carrier={"traceparent": TRACEPARENT})
    span.end()
    (link,) = one(spans, "recv").links
    assert (link.context.trace_id, link.context.span_id) == (TRACE_ID, SPAN_ID)
    assert link.context.is_remote


def test_links_an_extracted_context(spans: InMemorySpans) -> None:
    """A Context (as extract_context returns it) links to the span it holds."""
    carrier: dict[str, str] = {}
    with spans.tracer.start_as_current_span("send") as send:
        inject_context(carrier)
    span = create_linked_span(spans.tracer, "recv", remote_context=extract_context(carrier))
    span.end()
    sent = send.get_span_context()
    assert links_of(one(spans, "recv")) == [(sent.trace_id, sent.span_id)]


def test_links_a_span_context_or_a_local_context(spans: InMemorySpans) -> None:
    """A SpanContext links as it is; a Context holding a local span links to that span."""
    remote = SpanContext(TRACE_ID, SPAN_ID, is_remote=True, trace_flags=TraceFlags(1))
    other = spans.tracer.start_span("other")
    first = create_linked_span(spans.tracer, "first", remote_context=remote)
    second = create_linked_span(
        spans.tracer, "second", remote_context=trace.set_span_in_context(other)
    )
    for span in (first, second, other):
        span.end()
    assert links_of(one(spans, "first")) == [(TRACE_ID, SPAN_ID)]
    ctx = other.get_span_context()
    assert links_of(one(spans, "second")) == [(ctx.trace_id, ctx.span_id)]


def test_a_given_context_wins_over_the_carrier(spans: InMemorySpans) -> None:
    """The carrier is read only when no context is given."""
    remote = SpanContext(TRACE_ID, SPAN_ID, is_remote=True)
    other = f"00-{1:032x}-{2:016x}-01"
    span = create_linked_span(
        spans.tracer, "recv", remote_context=remote, remote_carrier={"traceparent": other}
    )
    span.end()
    assert links_of(one(spans, "recv")) == [(TRACE_ID, SPAN_ID)]


@pytest.mark.parametrize(
    "carrier",
    [
        {},
        {"traceparent": "garbage"},
        {"traceparent": f"00-{0:032x}-{0:016x}-01"},  # all-zero ids: an invalid span
        {"traceparent": f"ff-{TRACE_ID:032x}-{SPAN_ID:016x}-01"},  # the forbidden version
        {"traceparent": 7},
        {"traceparent": None},
        {"traceparent": b"bytes"},
        {7: TRACEPARENT},
        TRACEPARENT,
        [TRACEPARENT],
        42,
        object(),
    ],
    ids=stable_id,
)
def test_a_malformed_carrier_gives_no_link_and_no_error(spans: InMemorySpans, carrier: Any) -> None:
    """An invalid or malformed carrier starts a span without a link, under the current span."""
    with spans.tracer.start_as_current_span("step") as step:
        span = create_linked_span(spans.tracer, "recv", remote_carrier=carrier)
    span.end()
    finished = one(spans, "recv")
    assert finished.links == ()
    assert finished.parent.span_id == step.get_span_context().span_id


@pytest.mark.parametrize(
    "context",
    [
        object(),
        42,
        {"traceparent": TRACEPARENT},  # a carrier passed as the context
        Context(),
        SpanContext(0, 0, is_remote=True),
        trace.INVALID_SPAN_CONTEXT,
    ],
    ids=stable_id,
)
def test_a_malformed_context_gives_no_link_and_no_error(spans: InMemorySpans, context: Any) -> None:
    """A context that holds no valid span, or is no context at all, gives no link."""
    span = create_linked_span(spans.tracer, "recv", remote_context=context)
    span.end()
    assert one(spans, "recv").links == ()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    carrier=st.dictionaries(
        st.one_of(st.sampled_from(["traceparent", "tracestate", "baggage"]), st.text()),
        st.one_of(
            st.text(),
            st.from_regex(r"\A[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}\Z"),
            st.integers(),
            st.none(),
            st.binary(),
        ),
        max_size=3,
    )
)
def test_create_linked_span_never_raises_for_any_carrier(carrier: dict[Any, Any]) -> None:
    """Whatever a carrier holds, a span comes back with at most one valid link."""
    pytest.importorskip("opentelemetry.sdk.trace")
    pipeline = in_memory_spans()
    try:
        span = create_linked_span(pipeline.tracer, "recv", remote_carrier=carrier)
        span.end()
        (finished,) = pipeline.finished()
        assert len(finished.links) <= 1
        assert all(link.context.is_valid for link in finished.links)
    finally:
        pipeline.shutdown()


def test_parent_is_the_current_span_and_nothing_is_attached(spans: InMemorySpans) -> None:
    """The span is a child of the current span, in its trace; it is not made current."""
    with spans.tracer.start_as_current_span("step") as step:
        span = create_linked_span(spans.tracer, "recv", remote_carrier={"traceparent": TRACEPARENT})
        assert trace.get_current_span() is step
    assert trace.get_current_span() is trace.INVALID_SPAN
    span.end()
    finished = one(spans, "recv")
    assert finished.parent.span_id == step.get_span_context().span_id
    assert finished.context.trace_id == step.get_span_context().trace_id != TRACE_ID


def test_without_a_current_span_it_is_a_root(spans: InMemorySpans) -> None:
    """With no current span the linked span starts a trace of its own."""
    span = create_linked_span(spans.tracer, "recv", remote_carrier={"traceparent": TRACEPARENT})
    span.end()
    finished = one(spans, "recv")
    assert finished.parent is None
    assert finished.context.trace_id != TRACE_ID


def test_the_caller_ends_the_span(spans: InMemorySpans) -> None:
    """The span comes back recording and is exported only when the caller ends it."""
    span = create_linked_span(spans.tracer, "recv")
    assert span.is_recording()
    assert spans.finished() == []
    span.end()
    assert spans.names() == ["recv"]


def test_attributes_are_set_safely(spans: InMemorySpans) -> None:
    """Carried values are set, None and uncarriable values dropped, secrets redacted."""
    # Typed as Any: mypy would match a dict[str, int] against remote_context's type too.
    dotted: dict[str, Any] = {"pp.stage": 2}
    span = create_linked_span(
        spans.tracer,
        "recv",
        stage=1,
        ratio=0.5,
        ok=True,
        ranks=[0, 1],
        skipped=None,
        opaque=object(),
        mixed=[1, "a"],
        nested={"a": 1},
        token="hunter2",
        **dotted,
    )
    span.end()
    assert dict(one(spans, "recv").attributes) == {
        "stage": 1,
        "ratio": 0.5,
        "ok": True,
        "ranks": (0, 1),
        "token": "[REDACTED]",
        "pp.stage": 2,
    }


def test_the_span_name_is_made_encodable(spans: InMemorySpans) -> None:
    """A name with a lone surrogate is handed to the SDK with U+FFFD in its place."""
    span = create_linked_span(spans.tracer, UNDECODABLE)
    span.end()
    assert spans.names() == ["stage-\ufffd"]


def test_no_tracer_means_the_global_provider(spans: InMemorySpans) -> None:
    """tracer=None starts the span on the global tracer provider current at the call."""
    trace.set_tracer_provider(spans.provider)
    span = create_linked_span(None, "recv", remote_carrier={"traceparent": TRACEPARENT})
    span.end()
    finished = one(spans, "recv")
    assert finished.instrumentation_scope.name == "nemo.lens.distributed"
    assert links_of(finished) == [(TRACE_ID, SPAN_ID)]


class RaisingTracer(trace.NoOpTracer):
    """A tracer whose start_span fails (no real tracer can be made to)."""

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        raise RuntimeError("tracer broke")


def test_a_failing_tracer_gives_a_non_recording_span(caplog: pytest.LogCaptureFixture) -> None:
    """Should the tracer raise, the caller gets a non-recording span and one warning."""
    with caplog.at_level(logging.WARNING, logger="nemo.lens.distributed"):
        first = create_linked_span(RaisingTracer(), "recv", stage=1)
        second = create_linked_span(RaisingTracer(), "recv")
    assert first is second is trace.INVALID_SPAN
    assert not first.is_recording()
    first.end()  # ending it, as callers do, is harmless
    assert len(caplog.records) == 1
    assert "tracer broke" in caplog.records[0].getMessage()


def test_create_linked_span_runtime_signature_is_unchanged_by_its_typing() -> None:
    """The static-signature decorator hands back the function itself, signature and all."""
    function: Any = create_linked_span
    assert str(inspect.signature(function)) == (
        "(tracer: 'Tracer | None', name: 'str', "
        "remote_context: 'Context | SpanContext | None' = None, "
        "remote_carrier: 'Mapping[str, str] | None' = None, **attributes: 'object') -> 'Span'"
    )
    assert function.__qualname__ == "create_linked_span"
    assert not hasattr(function, "__wrapped__")
