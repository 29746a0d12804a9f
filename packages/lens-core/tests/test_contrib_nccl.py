"""nemo.lens.contrib.nccl: the trace context as UTF-8 JSON bytes, and back; never raises."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context
from opentelemetry.propagators.textmap import TextMapPropagator

from nemo.lens.contrib.nccl import deserialize_context, extract_nccl_context, serialize_context
from nemo.lens.testing import InMemorySpans

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_no_active_span_serializes_an_empty_object() -> None:
    """Nothing to carry: the bytes are `{}`, which read back as an empty carrier."""
    data = serialize_context()
    assert data == b"{}"
    assert deserialize_context(data) == {}


def test_serialize_is_the_carrier_as_utf8_json(spans: InMemorySpans) -> None:
    """The bytes are a JSON object holding the current span's traceparent."""
    with spans.tracer.start_as_current_span("send") as span:
        data = serialize_context()
    ids = span.get_span_context()
    carrier = json.loads(data.decode("utf-8"))
    assert carrier == {
        "traceparent": f"00-{ids.trace_id:032x}-{ids.span_id:016x}-{ids.trace_flags:02x}"
    }


def test_round_trip_parents_the_receiver(spans: InMemorySpans) -> None:
    """A span started under the extracted context is the sender's child, in its trace."""
    with spans.tracer.start_as_current_span("send") as sender:
        data = serialize_context()
    received = spans.tracer.start_span("receive", context=extract_nccl_context(data))
    received.end()
    (finished,) = [s for s in spans.finished() if s.name == "receive"]
    assert finished.context.trace_id == sender.get_span_context().trace_id
    assert finished.parent is not None
    assert finished.parent.span_id == sender.get_span_context().span_id
    assert finished.parent.is_remote


def test_round_trip_carries_baggage(spans: InMemorySpans) -> None:
    """Baggage travels with the span context, through bytes like any other carrier."""
    token = otel_context.attach(baggage.set_baggage("run", "r 1/ü"))
    try:
        with spans.tracer.start_as_current_span("send"):
            data = serialize_context()
    finally:
        otel_context.detach(token)
    data.decode("ascii")  # escaped: any byte channel can carry it
    assert baggage.get_baggage("run", extract_nccl_context(data)) == "r 1/ü"


def test_deserialize_reads_any_bytes_like_object() -> None:
    """bytes, bytearray and memoryview all read back."""
    data = json.dumps({"traceparent": TRACEPARENT}).encode()
    for form in (data, bytearray(data), memoryview(data)):
        assert deserialize_context(form) == {"traceparent": TRACEPARENT}


def test_deserialize_reads_a_uint8_array() -> None:
    """A NumPy uint8 array (a tensor's `.cpu().numpy()`) reads back without copying first."""
    numpy = pytest.importorskip("numpy")
    data = numpy.frombuffer(json.dumps({"traceparent": TRACEPARENT}).encode(), dtype=numpy.uint8)
    assert deserialize_context(data) == {"traceparent": TRACEPARENT}


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xfe\x00",  # not UTF-8
        b'{"traceparent": "\xc3\x28"}',  # invalid UTF-8 inside a string
        b"",  # nothing
        b"{not json",
        b'"a string"',
        b"[1, 2]",
        b"42",
        b"null",
        b'{"traceparent": 7}',  # a value that is not a str
        b'{"a": {"b": "c"}}',  # nested
        b"[" * 100_000,  # nested deeper than the parser goes
    ],
)
def test_bad_data_deserializes_to_none(data: bytes) -> None:
    """Bad UTF-8, bad JSON or JSON that is not an object of str to str gives None."""
    assert deserialize_context(data) is None


@pytest.mark.parametrize("data", ["{}", None, 42, ["{}"]])
def test_what_is_not_bytes_deserializes_to_none(data: Any) -> None:
    """A str or any other non-bytes object gives None rather than an error."""
    assert deserialize_context(data) is None


def test_bad_data_extracts_the_current_context(
    spans: InMemorySpans, caplog: pytest.LogCaptureFixture
) -> None:
    """Unreadable data gives the current context, logged once; empty data is quiet."""
    with (
        caplog.at_level(logging.WARNING, logger="nemo.lens.contrib.nccl"),
        spans.tracer.start_as_current_span("local"),
    ):
        current = otel_context.get_current()
        assert extract_nccl_context(b"") is current
        assert extract_nccl_context(b"\xff") is current
        assert extract_nccl_context(b"[]") is current
        assert extract_nccl_context(None) is current  # type: ignore[arg-type]
    assert len(caplog.records) == 1
    assert "not a JSON carrier" in caplog.records[0].getMessage()


def test_a_carrier_without_a_span_extracts_no_span() -> None:
    """`{}` (the sender had no span) and an invalid traceparent give no valid span."""
    for data in (b"{}", b'{"traceparent": "garbage"}'):
        span = trace.get_current_span(extract_nccl_context(data))
        assert not span.get_span_context().is_valid


def test_extract_works_without_setup() -> None:
    """The API's default propagator reads the bytes in a process that never ran setup."""
    data = json.dumps({"traceparent": TRACEPARENT}).encode()
    ids = trace.get_current_span(extract_nccl_context(data)).get_span_context()
    assert ids.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert ids.span_id == 0xB7AD6B7169203331


@given(st.binary(max_size=256))
def test_deserialize_never_raises_on_any_bytes(data: bytes) -> None:
    """Arbitrary bytes give None or a dict of str to str; extracting gives a Context."""
    carrier = deserialize_context(data)
    assert carrier is None or all(
        isinstance(k, str) and isinstance(v, str) for k, v in carrier.items()
    )
    assert isinstance(extract_nccl_context(data), otel_context.Context)


@given(st.dictionaries(st.text(), st.text(), max_size=5))
def test_any_str_carrier_survives_the_bytes(carrier: dict[str, str]) -> None:
    """Every object of str to str reads back equal after JSON encoding (lone surrogates too)."""
    assert deserialize_context(json.dumps(carrier).encode("ascii")) == carrier


class _OddPropagator(TextMapPropagator):
    """A real propagator that writes a value JSON cannot encode (a custom one might)."""

    def inject(self, carrier: Any, context: Any = None, setter: Any = None) -> None:
        carrier["odd"] = object()

    def extract(self, carrier: Any, context: Any = None, getter: Any = None) -> Any:
        return otel_context.Context()

    @property
    def fields(self) -> set[str]:
        return {"odd"}


def test_serialize_falls_back_to_empty_when_json_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A carrier JSON cannot hold gives `{}` and one warning instead of an error."""
    saved = propagate.get_global_textmap()
    propagate.set_global_textmap(_OddPropagator())
    try:
        with caplog.at_level(logging.WARNING, logger="nemo.lens.contrib.nccl"):
            assert serialize_context() == b"{}"
            assert serialize_context() == b"{}"
    finally:
        propagate.set_global_textmap(saved)
    assert len(caplog.records) == 1
    assert "could not encode the carrier as JSON" in caplog.records[0].getMessage()
