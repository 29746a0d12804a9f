"""The span helpers under hostile input: what they hand the SDK encodes, contexts stay sound.

- Span names that are bytes, other objects or strs with lone surrogates (what
  `os.fsdecode` gives for an undecodable file name) are coerced, so a real OTLP encoder
  still encodes the whole batch (issue 10, item 3).
- A span held across a generator's `yield` and left in another contextvars Context costs
  one lens warning, not an OpenTelemetry ERROR with a traceback per step (item 10).
- A group name whose `__hash__`/`__eq__` raises, or a tracer whose `start_span` returns
  None, degrades that span only; nothing raises and no context stays attached (item 11).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import threading
from collections.abc import AsyncIterator, Generator, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import PurePosixPath
from typing import Any

import pytest
from lens_env import clear_settings
from lens_spans import one

from nemo.lens import (
    NemoLensConfig,
    managed_span,
    set_enabled_span_groups,
    setup_telemetry,
    span_cm,
    trace_fn,
)
from nemo.lens.testing import InMemorySpans, isolated_telemetry

pytest.importorskip("opentelemetry.sdk.trace")
pytest.importorskip("opentelemetry.exporter.otlp.proto.common.trace_encoder")

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

# What os.fsdecode gives for a file name that is not valid UTF-8: 'shard-\udcff.bin'.
UNDECODABLE = os.fsdecode(b"shard-\xff.bin")
REPLACED = "shard-\ufffd.bin"


@pytest.fixture(autouse=True)
def _isolated() -> Iterator[None]:
    with isolated_telemetry(clear_span_registry=True):
        set_enabled_span_groups(frozenset({"step"}))
        yield


def encode(finished: Sequence[ReadableSpan]) -> bytes:
    """The OTLP protobuf request the real exporters send for `finished`, serialised."""
    return bytes(encode_spans(finished).SerializeToString())


def lens_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "nemo.lens.helpers"]


def otel_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("opentelemetry")]


def open_with_every_helper(tracer: Any, name: Any) -> None:
    """One span named `name` from each of managed_span, span_cm and trace_fn."""
    with managed_span("step", name, tracer=tracer):
        pass
    with span_cm(name, tracer=tracer):
        pass
    trace_fn("step", name, tracer=tracer)(lambda: None)()


# --- item 3: names and texts the SDK is handed always encode --------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (b"ckpt-\xff.pt", "ckpt-\ufffd.pt"),
        (bytearray(b"step"), "step"),
        (UNDECODABLE, REPLACED),
        (42, "42"),
        (PurePosixPath("/data/run.bin"), "/data/run.bin"),
    ],
)
def test_odd_span_names_become_encodable_strs(
    spans: InMemorySpans, caplog: pytest.LogCaptureFixture, name: Any, expected: str
) -> None:
    """Bytes, objects and lone surrogates as names: each helper's span gets an encodable str."""
    with caplog.at_level(logging.WARNING, logger="nemo.lens.helpers"):
        for _ in range(3):
            open_with_every_helper(spans.tracer, name)
    finished = spans.finished()
    assert [span.name for span in finished] == [expected] * 9
    assert all(type(span.name) is str for span in finished)
    assert encode(finished)
    assert len(lens_warnings(caplog)) == 1  # once, however many spans and helpers


def test_one_bad_name_no_longer_poisons_the_batch(spans: InMemorySpans) -> None:
    """A batch holding a span named by an undecodable file name still encodes, good spans too."""
    with span_cm("job", tracer=spans.tracer):
        with managed_span("step", UNDECODABLE, tracer=spans.tracer, file=UNDECODABLE):
            pass
        with managed_span("step", "good", tracer=spans.tracer):
            pass
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(encode(spans.finished()))
    (scope_spans,) = request.resource_spans[0].scope_spans
    assert [span.name for span in scope_spans.spans] == [REPLACED, "good", "job"]
    assert scope_spans.spans[0].attributes[0].value.string_value == REPLACED


def test_a_name_whose_str_fails_still_gets_a_span(
    spans: InMemorySpans, caplog: pytest.LogCaptureFixture
) -> None:
    """An object whose __str__ raises names its span after its type, with one warning."""

    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no text")

    with caplog.at_level(logging.WARNING, logger="nemo.lens.helpers"):
        open_with_every_helper(spans.tracer, Unprintable())
    assert spans.names() == ["<Unprintable>"] * 3
    assert len(lens_warnings(caplog)) == 1
    assert encode(spans.finished())


@pytest.mark.parametrize("helper", ["managed_span", "span_cm", "trace_fn"])
def test_exception_texts_with_lone_surrogates_encode(spans: InMemorySpans, helper: str) -> None:
    """An exception quoting an undecodable file name is recorded (event and status) encodably."""

    def fail() -> None:
        raise FileExistsError(f"cannot overwrite {UNDECODABLE}")

    def run() -> None:
        if helper == "managed_span":
            with managed_span("step", "save", tracer=spans.tracer):
                fail()
        elif helper == "span_cm":
            with span_cm("save", tracer=spans.tracer):
                fail()
        else:
            trace_fn("step", "save", tracer=spans.tracer)(fail)()

    with pytest.raises(FileExistsError):
        run()
    finished = one(spans, "save")
    assert finished.status.status_code is StatusCode.ERROR
    assert REPLACED in (finished.status.description or "")
    (event,) = finished.events
    assert event.attributes["exception.message"] == f"cannot overwrite {REPLACED}"
    assert REPLACED in event.attributes["exception.stacktrace"]
    assert encode(spans.finished())


class Receiver:
    """A real OTLP/HTTP traces receiver on 127.0.0.1 that decodes every request."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.failures = 0
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                    received.names += [
                        span.name
                        for resource in request.resource_spans
                        for scope in resource.scope_spans
                        for span in scope.spans
                    ]
                    status = 200
                except Exception:
                    received.failures += 1
                    status = 400
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.mark.e2e
def test_a_real_otlp_export_delivers_odd_names(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Through setup_telemetry and the real OTLP/HTTP exporter, odd-named spans reach a receiver."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    receiver = Receiver()
    try:
        clear_settings(monkeypatch)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        handle = setup_telemetry(
            NemoLensConfig(enabled=True, metrics_enabled=False, span_groups="all"),
            _allow_reinit=True,
        )
        set_enabled_span_groups(frozenset({"step"}))
        with caplog.at_level(logging.ERROR):
            open_with_every_helper(None, UNDECODABLE)
            open_with_every_helper(None, b"\xfe\xff")
            with managed_span("step", "plain"):
                pass
            handle.shutdown(timeout_ms=10_000)
    finally:
        receiver.close()
    assert receiver.failures == 0
    assert sorted(receiver.names) == sorted([REPLACED] * 3 + ["\ufffd\ufffd"] * 3 + ["plain"])
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


# --- item 10: leaving a span in another context -----------------------------------------------


def test_managed_span_across_yield_resumed_in_other_contexts_logs_once(
    spans: InMemorySpans, caplog: pytest.LogCaptureFixture
) -> None:
    """A generator stepped from fresh contexts: one lens warning, no OpenTelemetry ERROR."""

    def batches() -> Iterator[int]:
        for index in range(6):
            with managed_span("step", "batch", tracer=spans.tracer, index=index):
                yield index

    batches_iter = batches()
    with caplog.at_level(logging.WARNING):
        got = [contextvars.copy_context().run(next, batches_iter) for _ in range(6)]
        assert contextvars.copy_context().run(next, batches_iter, None) is None
    assert got == list(range(6))
    assert otel_records(caplog) == []
    (warning,) = lens_warnings(caplog)
    assert "another context" in warning
    assert [dict(span.attributes or {})["index"] for span in spans.finished()] == list(range(6))
    assert all(span.end_time is not None for span in spans.finished())


def test_span_cm_in_an_async_generator_consumed_by_several_tasks(
    spans: InMemorySpans, caplog: pytest.LogCaptureFixture
) -> None:
    """An async generator holding span_cm, advanced by a new asyncio task each step, logs once."""

    async def stream() -> AsyncIterator[int]:
        for index in range(5):
            with span_cm("chunk", tracer=spans.tracer, index=index):
                yield index

    async def consume() -> list[int | None]:
        chunks = stream()

        async def advance() -> int | None:
            return await anext(chunks, None)

        # Each task runs in its own copy of the context: no step ends where it started.
        return [await asyncio.create_task(advance()) for _ in range(6)]

    with caplog.at_level(logging.WARNING):
        assert asyncio.run(consume()) == [0, 1, 2, 3, 4, None]
    assert otel_records(caplog) == []
    assert len(lens_warnings(caplog)) == 1
    assert spans.names() == ["chunk"] * 5


def test_trace_fn_coroutine_stepped_from_other_contexts_logs_once(
    spans: InMemorySpans, caplog: pytest.LogCaptureFixture
) -> None:
    """A traced coroutine resumed by a scheduler in other contexts: one warning, spans ended."""

    class Step:
        def __await__(self) -> Generator[None, None, None]:
            yield None

    @trace_fn("step", "rollout", tracer=spans.tracer)
    async def rollout() -> str:
        await Step()
        return "done"

    with caplog.at_level(logging.WARNING):
        for _ in range(4):
            coroutine = rollout()
            contextvars.copy_context().run(coroutine.send, None)
            with pytest.raises(StopIteration) as stopped:
                contextvars.copy_context().run(coroutine.send, None)
            assert stopped.value.value == "done"
    assert otel_records(caplog) == []
    assert len(lens_warnings(caplog)) == 1
    assert spans.names() == ["rollout"] * 4


def test_the_parent_is_current_again_in_a_copied_context(spans: InMemorySpans) -> None:
    """Left in a copy of its context, the span stops being current there: its parent is again."""

    def inner() -> Iterator[None]:
        with managed_span("step", "inner", tracer=spans.tracer):
            yield

    with span_cm("outer", tracer=spans.tracer) as outer:
        steps = inner()
        next(steps)
        copied = contextvars.copy_context()
        assert copied.run(trace.get_current_span).name == "inner"  # type: ignore[attr-defined]
        copied.run(next, steps, None)
        assert copied.run(trace.get_current_span) is outer
    assert trace.get_current_span() is trace.INVALID_SPAN
    assert spans.names() == ["inner", "outer"]


def test_same_context_exits_still_detach(spans: InMemorySpans) -> None:
    """The ordinary case is unchanged: after each helper the previous context is current."""
    before = otel_context.get_current()
    open_with_every_helper(spans.tracer, "s")
    with managed_span("step", "a", tracer=spans.tracer), span_cm("b", tracer=spans.tracer):
        pass
    assert otel_context.get_current() is before
    assert spans.names() == ["s", "s", "s", "b", "a"]


# --- item 11: odd groups and tracers ----------------------------------------------------------


def add(a: int, b: int) -> int:
    return a + b


class HashFails:
    def __hash__(self) -> int:
        raise RuntimeError("no hash")


class EqualityFails:
    """Hashes like "step", so a set look-up must compare it, and comparing raises."""

    def __hash__(self) -> int:
        return hash("step")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no equality")


@pytest.mark.parametrize("group", [HashFails(), EqualityFails()], ids=["hash", "eq"])
def test_a_group_whose_lookup_raises_is_off_and_never_raises(
    spans: InMemorySpans, caplog: pytest.LogCaptureFixture, group: Any
) -> None:
    """managed_span and trace_fn treat such a group as disabled; the body and call still run."""
    ran = []
    with caplog.at_level(logging.WARNING, logger="nemo.lens.helpers"):
        for _ in range(2):
            with managed_span(group, "x", tracer=spans.tracer) as span:
                ran.append(span)
            traced = trace_fn(group, "f", tracer=spans.tracer)(add)
            assert traced(1, 2) == 3
    assert ran == [None, None]
    assert spans.finished() == []
    assert len(lens_warnings(caplog)) == 2  # once per helper, not per call
    assert all("RuntimeError" in message for message in lens_warnings(caplog))


def test_a_hashable_non_str_group_that_is_enabled_still_traces(spans: InMemorySpans) -> None:
    """A non-str group object put in the enabled set keeps working through trace_fn."""
    marker = ("rl", "rollout")
    set_enabled_span_groups(frozenset({"step", marker}))  # type: ignore[arg-type]
    assert trace_fn(marker, "f", tracer=spans.tracer)(lambda: 5)() == 5  # type: ignore[arg-type]
    assert spans.names() == ["f"]


class NoneTracer:
    """A tracer whose start_span returns None (no real tracer does; a broken plug-in might)."""

    def start_span(self, *args: Any, **kwargs: Any) -> None:
        return None

    @contextlib.contextmanager
    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Iterator[None]:
        yield None


@pytest.mark.parametrize("helper", ["managed_span", "span_cm", "trace_fn"])
def test_a_tracer_returning_none_leaves_no_context_attached(
    caplog: pytest.LogCaptureFixture, helper: str
) -> None:
    """start_span returning None: the body runs, nothing stays attached, one warning."""
    tracer: Any = NoneTracer()
    before = otel_context.get_current()
    seen: list[Any] = []
    with caplog.at_level(logging.WARNING, logger="nemo.lens.helpers"):
        for _ in range(2):
            if helper == "managed_span":
                with managed_span("step", "s", tracer=tracer) as span:
                    seen.append(span)
            elif helper == "span_cm":
                with span_cm("s", tracer=tracer) as span:
                    span.set_attribute("still", "works")
                    seen.append(span.is_recording())
            else:
                assert trace_fn("step", "s", tracer=tracer)(lambda: 7)() == 7
            assert otel_context.get_current() is before
    if helper == "managed_span":
        assert seen == [None, None]
    elif helper == "span_cm":
        assert seen == [False, False]
    assert len(lens_warnings(caplog)) == 1
    assert "returned NoneType" in lens_warnings(caplog)[0]
