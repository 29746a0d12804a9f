"""nemo.lens.contrib.ray without Ray: carriers, the traced wrapper of each kind, dispatch."""

from __future__ import annotations

import asyncio
import inspect
import logging
import subprocess
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator
from typing import Any, ParamSpec, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lens_spans import one
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.trace import NonRecordingSpan, Span, StatusCode

from nemo.lens.contrib.ray import (
    extract_ray_context,
    inject_ray_context,
    ray_dispatch_with_context,
    traced_remote_call,
)
from nemo.lens.testing import InMemorySpans, in_memory_spans, isolated_telemetry

P = ParamSpec("P")
T = TypeVar("T")


def carried(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` typed to accept `_otel_carrier` (a ParamSpec cannot show the added keyword)."""
    return fn


@pytest.fixture
def bare_process() -> Iterator[None]:
    """No provider installed: OpenTelemetry's API default applies, as in a fresh Ray worker."""
    with isolated_telemetry():
        yield


def driver_carrier(spans: InMemorySpans) -> tuple[dict[str, str], Span]:
    """A carrier written inside a finished driver span, and that span."""
    with spans.tracer.start_as_current_span("driver") as driver:
        carrier = inject_ray_context()
    return carrier, driver


def assert_child_of(child: Any, parent: Span) -> None:
    expected = parent.get_span_context()
    assert child.context.trace_id == expected.trace_id
    assert child.parent is not None
    assert child.parent.span_id == expected.span_id


_AS_WRITTEN: dict[str, Callable[..., Any]] = {}


def traced(method: Callable[P, T]) -> Callable[P, T]:
    """`traced_remote_call`, remembering the method as written for tests that wrap it anew."""
    _AS_WRITTEN[method.__name__] = method
    return traced_remote_call(method)


class Worker:
    """Methods of every kind, as an actor would define them."""

    def __init__(self) -> None:
        self.seen: list[Span] = []

    @traced
    def add(self, x: int, y: int = 1) -> int:
        """Add two numbers."""
        self.seen.append(trace.get_current_span())
        return x + y

    @traced
    async def add_later(self, x: int) -> int:
        await asyncio.sleep(0)
        self.seen.append(trace.get_current_span())
        return x + 1

    @traced
    async def count(self, n: int) -> AsyncIterator[int]:
        for i in range(n):
            await asyncio.sleep(0)
            self.seen.append(trace.get_current_span())
            yield i

    @traced
    def count_sync(self, n: int) -> Iterator[int]:
        for i in range(n):
            self.seen.append(trace.get_current_span())
            yield i


def plain(name: str) -> Callable[..., Any]:
    """Worker's method `name` as written, before `traced_remote_call` wrapped it."""
    return _AS_WRITTEN[name]


# --- inject / extract -------------------------------------------------------------------------


def test_inject_without_a_span_gives_an_empty_carrier() -> None:
    """No active span: a new, empty dict each call."""
    first = inject_ray_context()
    assert first == {}
    assert inject_ray_context() is not first


def test_inject_writes_the_current_span(spans: InMemorySpans) -> None:
    """The carrier's traceparent names the current span."""
    with spans.tracer.start_as_current_span("driver") as driver:
        carrier = inject_ray_context()
    ids = driver.get_span_context()
    expected = f"00-{ids.trace_id:032x}-{ids.span_id:016x}-{ids.trace_flags:02x}"
    assert carrier["traceparent"] == expected


def test_extract_of_none_is_the_current_context(spans: InMemorySpans) -> None:
    """extract_ray_context() and extract_ray_context(None) give the current context."""
    with spans.tracer.start_as_current_span("here"):
        assert extract_ray_context() is otel_context.get_current()
        assert extract_ray_context(None) is otel_context.get_current()


def test_extract_round_trip_resumes_the_trace(spans: InMemorySpans) -> None:
    """NeMo-RL's shape `extract_ray_context(carrier)`: a span under it is the driver's child."""
    carrier, driver = driver_carrier(spans)
    remote = spans.tracer.start_span("remote", context=extract_ray_context(carrier))
    remote.end()
    finished = one(spans, "remote")
    assert_child_of(finished, driver)
    assert finished.parent.is_remote


def test_extract_works_without_setup(bare_process: None) -> None:
    """In a process that never ran setup, a valid carrier still gives its span context."""
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    ids = trace.get_current_span(extract_ray_context(carrier)).get_span_context()
    assert ids.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert ids.span_id == 0xB7AD6B7169203331


@pytest.mark.parametrize(
    "carrier", [{}, {"traceparent": "garbage"}, {"traceparent": 7}, "garbage", 42, ["x"], object()]
)
def test_extract_of_a_malformed_carrier_never_raises(carrier: Any) -> None:
    """Garbage, wrong value types or a non-dict give a context without a valid span."""
    context = extract_ray_context(carrier)
    assert not trace.get_current_span(context).get_span_context().is_valid


@given(
    st.one_of(
        st.dictionaries(st.text(), st.text()),
        st.dictionaries(st.sampled_from(["traceparent", "tracestate", "baggage"]), st.text()),
        st.lists(st.text()),
        st.integers(),
        st.none(),
    )
)
def test_extract_never_raises_on_any_carrier(carrier: Any) -> None:
    """Whatever the carrier holds, extract_ray_context returns a Context."""
    assert isinstance(extract_ray_context(carrier), otel_context.Context)


# --- the wrapper's shape ----------------------------------------------------------------------


def test_wrapper_keeps_the_metadata_and_shows_the_carrier() -> None:
    """functools.wraps metadata is kept; `_otel_carrier` is a keyword-only parameter, last."""
    add = Worker.__dict__["add"]
    assert add.__name__ == "add"
    assert add.__qualname__ == "Worker.add"
    assert add.__module__ == __name__
    assert add.__doc__ == "Add two numbers."
    parameters = list(inspect.signature(add).parameters.values())
    assert [p.name for p in parameters] == ["self", "x", "y", "_otel_carrier"]
    carrier = parameters[-1]
    assert carrier.kind is inspect.Parameter.KEYWORD_ONLY
    assert carrier.default is None


def test_wrapper_does_not_lead_back_to_the_method() -> None:
    """No `__wrapped__`: Ray reads `inspect.unwrap(method)`'s signature for actor methods."""
    add = Worker.__dict__["add"]
    assert inspect.unwrap(add) is add
    assert "_otel_carrier" in inspect.signature(inspect.unwrap(add)).parameters


def test_wrapper_copies_the_method_attributes() -> None:
    """Attributes set on the method (as `@ray.method` sets them) are on the wrapper too."""

    def method() -> None: ...

    method.__ray_num_returns__ = 2  # type: ignore[attr-defined]
    assert traced_remote_call(method).__ray_num_returns__ == 2  # type: ignore[attr-defined]


def test_carrier_goes_before_var_keyword() -> None:
    """With `**kwargs`, the carrier is the last keyword-only parameter before it."""

    def method(a: int, *rest: int, flag: bool = False, **options: object) -> None: ...

    names = list(inspect.signature(traced_remote_call(method)).parameters)
    assert names == ["a", "rest", "flag", "_otel_carrier", "options"]


def test_binding_validates_like_ray_does() -> None:
    """The signature binds a call carrying `_otel_carrier` and refuses an unknown keyword."""
    signature = inspect.signature(traced_remote_call(plain("add")))
    signature.bind(object(), 1, _otel_carrier={})
    with pytest.raises(TypeError):
        signature.bind(object(), 1, carrier={})


@pytest.mark.parametrize(
    ("name", "coroutine", "async_generator", "generator"),
    [
        ("add", False, False, False),
        ("add_later", True, False, False),
        ("count", False, True, False),
        ("count_sync", False, False, True),
    ],
)
def test_wrapper_keeps_the_method_nature(
    name: str, coroutine: bool, async_generator: bool, generator: bool
) -> None:
    """Ray reads the nature to decide how to run a method; the wrapper has the method's."""
    wrapped = Worker.__dict__[name]
    assert inspect.iscoroutinefunction(wrapped) is coroutine
    assert inspect.isasyncgenfunction(wrapped) is async_generator
    assert inspect.isgeneratorfunction(wrapped) is generator


def test_a_method_that_declares_the_carrier_receives_it(spans: InMemorySpans) -> None:
    """A method taking `_otel_carrier` itself keeps its signature and is passed the carrier."""
    received: list[object] = []

    def method(x: int, _otel_carrier: dict[str, str] | None = None) -> int:
        received.append(_otel_carrier)
        return x

    wrapped = traced_remote_call(method, spans.tracer)
    assert inspect.signature(wrapped) == inspect.signature(method)
    carrier, driver = driver_carrier(spans)
    assert wrapped(3, _otel_carrier=carrier) == 3
    assert received == [carrier]
    assert_child_of(one(spans, method.__qualname__), driver)


# --- the spans --------------------------------------------------------------------------------


def test_sync_call_is_a_child_of_the_carrier(spans: InMemorySpans) -> None:
    """The span is named after the qualname, parented to the carrier, current in the body."""
    worker = Worker()
    wrapped = traced_remote_call(plain("add"), spans.tracer)
    carrier, driver = driver_carrier(spans)
    assert carried(wrapped)(worker, 2, y=3, _otel_carrier=carrier) == 5
    finished = one(spans, "Worker.add")
    assert_child_of(finished, driver)
    assert finished.parent.is_remote
    assert worker.seen[0].get_span_context() == finished.context
    assert trace.get_current_span() is trace.INVALID_SPAN  # left behind nothing


def test_baggage_reaches_the_body(spans: InMemorySpans) -> None:
    """The whole carried context is current in the body, baggage included."""
    seen: list[object] = []

    def method() -> None:
        seen.append(baggage.get_baggage("run"))

    token = otel_context.attach(baggage.set_baggage("run", "r7"))
    try:
        carrier = inject_ray_context()
    finally:
        otel_context.detach(token)
    carried(traced_remote_call(method, spans.tracer))(_otel_carrier=carrier)
    assert seen == ["r7"]


def test_no_carrier_parents_to_the_current_span(spans: InMemorySpans) -> None:
    """Without `_otel_carrier` the span is a child of whatever is current."""
    wrapped = traced_remote_call(plain("add"), spans.tracer)
    with spans.tracer.start_as_current_span("local") as local:
        wrapped(Worker(), 1)
    assert_child_of(one(spans, "Worker.add"), local)


def test_default_tracer_is_looked_up_at_call_time(bare_process: None) -> None:
    """Decorated before any provider exists, the call uses the provider installed later."""
    pytest.importorskip("opentelemetry.sdk.trace")
    worker = Worker()
    pipeline = in_memory_spans(install=True)
    worker.add(1)
    finished = one(pipeline, "Worker.add")
    assert finished.instrumentation_scope.name == "nemo.lens.ray"


def test_coroutine_span_covers_the_awaited_body(spans: InMemorySpans) -> None:
    """The span is current after an await in the body and ends after the body's last step."""

    async def method() -> str:
        await asyncio.sleep(0)
        with spans.tracer.start_as_current_span("after-await"):
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        return "done"

    carrier, driver = driver_carrier(spans)
    wrapped = carried(traced_remote_call(method, spans.tracer))
    assert asyncio.run(wrapped(_otel_carrier=carrier)) == "done"
    outer = one(spans, method.__qualname__)
    inner = one(spans, "after-await")
    assert_child_of(outer, driver)
    assert inner.parent.span_id == outer.context.span_id
    assert outer.end_time >= inner.end_time
    assert outer.start_time <= inner.start_time


def test_coroutine_span_starts_when_the_coroutine_runs(spans: InMemorySpans) -> None:
    """Creating the coroutine opens no span; one that never runs leaves none behind."""

    async def method() -> None: ...

    coroutine = traced_remote_call(method, spans.tracer)()
    coroutine.close()
    assert spans.finished() == []


def test_async_generator_span_covers_the_iteration(spans: InMemorySpans) -> None:
    """One span for the whole iteration, current in each step but not in the consumer."""
    worker = Worker()
    wrapped = carried(traced_remote_call(plain("count"), spans.tracer))
    carrier, driver = driver_carrier(spans)
    consumer_saw: list[Span] = []

    async def consume() -> list[int]:
        items = []
        async for item in wrapped(worker, 3, _otel_carrier=carrier):
            consumer_saw.append(trace.get_current_span())
            with spans.tracer.start_as_current_span(f"consumer-{item}"):
                pass
            items.append(item)
        return items

    assert asyncio.run(consume()) == [0, 1, 2]
    (outer,) = [span for span in spans.finished() if span.name == "Worker.count"]
    assert_child_of(outer, driver)
    assert [span.get_span_context() for span in worker.seen] == [outer.context] * 3
    assert all(span is trace.INVALID_SPAN for span in consumer_saw)
    last_consumer = one(spans, "consumer-2")
    assert last_consumer.parent is None  # the consumer's spans are not the wrapper's children
    assert outer.end_time >= last_consumer.end_time  # ended after the last step


def test_async_generator_passes_asend_and_aclose(spans: InMemorySpans) -> None:
    """Values sent reach the body; closing early ends the span without an error."""
    received: list[object] = []

    async def echo() -> Any:
        value = None
        while True:
            value = yield value
            received.append(value)

    async def drive() -> None:
        generator = traced_remote_call(echo, spans.tracer)()
        assert await generator.asend(None) is None
        assert await generator.asend("a") == "a"
        await generator.aclose()

    asyncio.run(drive())
    assert received == ["a"]
    assert one(spans, echo.__qualname__).status.status_code is StatusCode.UNSET


def test_sync_generator_span_covers_the_iteration(spans: InMemorySpans) -> None:
    """A generator method gets one span over its whole iteration, current in its steps."""
    worker = Worker()
    wrapped = carried(traced_remote_call(plain("count_sync"), spans.tracer))
    carrier, driver = driver_carrier(spans)
    items = []
    for item in wrapped(worker, 2, _otel_carrier=carrier):
        assert trace.get_current_span() is trace.INVALID_SPAN
        assert spans.finished() == [one(spans, "driver")]  # still open
        items.append(item)
    assert items == [0, 1]
    outer = one(spans, "Worker.count_sync")
    assert_child_of(outer, driver)
    assert [span.get_span_context() for span in worker.seen] == [outer.context] * 2


def test_sync_generator_passes_send_throw_and_return_value(spans: InMemorySpans) -> None:
    """send() and throw() reach the body, and its return value ends the iteration."""

    def body() -> Any:
        total = 0
        while True:
            try:
                value = yield total
            except KeyError:
                return total
            total += value

    generator = traced_remote_call(body, spans.tracer)()
    assert next(generator) == 0
    assert generator.send(2) == 2
    with pytest.raises(StopIteration) as stopped:
        generator.throw(KeyError("stop"))
    assert stopped.value.value == 2
    assert one(spans, body.__qualname__).status.status_code is StatusCode.UNSET


def test_sync_generator_closed_early_ends_its_span(spans: InMemorySpans) -> None:
    """Closing the wrapper closes the body in the span's context and ends the span cleanly."""
    closed_in: list[Span] = []

    def body() -> Generator[int, None, None]:
        try:
            yield 1
            yield 2
        finally:
            closed_in.append(trace.get_current_span())

    generator = traced_remote_call(body, spans.tracer)()
    assert next(generator) == 1
    generator.close()
    finished = one(spans, body.__qualname__)
    assert finished.status.status_code is StatusCode.UNSET
    assert closed_in[0].get_span_context() == finished.context


def test_async_generator_passes_athrow(spans: InMemorySpans) -> None:
    """An exception thrown in by the consumer reaches the body, which may handle it."""

    async def body() -> AsyncGenerator[str, None]:
        try:
            yield "first"
        except KeyError:
            yield "handled"

    async def drive() -> list[str]:
        generator = traced_remote_call(body, spans.tracer)()
        got = [await generator.__anext__(), await generator.athrow(KeyError("k"))]
        with pytest.raises(StopAsyncIteration):
            await generator.__anext__()
        return got

    assert asyncio.run(drive()) == ["first", "handled"]
    assert one(spans, body.__qualname__).status.status_code is StatusCode.UNSET


@pytest.mark.parametrize("kind", ["add", "add_later", "count", "count_sync"])
def test_every_kind_forwards_a_declared_carrier(spans: InMemorySpans, kind: str) -> None:
    """Wrapping a wrapper: the outer one passes the carrier on to the inner one."""
    worker = Worker()
    once = traced_remote_call(plain(kind), spans.tracer)
    twice = carried(traced_remote_call(once, spans.tracer))
    carrier, driver = driver_carrier(spans)
    result = twice(worker, 1, _otel_carrier=carrier)
    if inspect.iscoroutine(result):
        asyncio.run(result)
    elif inspect.isasyncgen(result):

        async def drain() -> None:
            async for _ in result:
                pass

        asyncio.run(drain())
    elif inspect.isgenerator(result):
        list(result)
    qualname = f"Worker.{kind}"
    both = [span for span in spans.finished() if span.name == qualname]
    assert len(both) == 2  # inner and outer, both under the driver
    for span in both:
        assert_child_of(span, driver)


# --- errors -----------------------------------------------------------------------------------


def _fail() -> None:
    raise ValueError("boom")


async def _fail_later() -> None:
    await asyncio.sleep(0)
    raise ValueError("boom")


async def _fail_midway() -> AsyncIterator[int]:
    yield 1
    raise ValueError("boom")


def _run(wrapped: Callable[[], Any]) -> None:
    if inspect.iscoroutinefunction(wrapped):
        asyncio.run(wrapped())
    elif inspect.isasyncgenfunction(wrapped):

        async def drain() -> None:
            async for _ in wrapped():
                pass

        asyncio.run(drain())
    else:
        wrapped()


@pytest.mark.parametrize("method", [_fail, _fail_later, _fail_midway])
def test_an_exception_is_recorded_and_re_raised(
    spans: InMemorySpans, method: Callable[[], Any]
) -> None:
    """The body's exception gets an event and ERROR status, and reaches the caller."""
    with pytest.raises(ValueError, match="boom"):
        _run(traced_remote_call(method, spans.tracer))
    finished = one(spans, method.__qualname__)
    assert finished.status.status_code is StatusCode.ERROR
    assert "boom" in finished.status.description
    assert [event.attributes["exception.type"] for event in finished.events] == ["ValueError"]


def test_keyboard_interrupt_passes_unrecorded(spans: InMemorySpans) -> None:
    """A BaseException is not an error of the call: it propagates, the span still ends."""

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        traced_remote_call(interrupted, spans.tracer)()
    assert one(spans, interrupted.__qualname__).status.status_code is StatusCode.UNSET


# --- telemetry never breaks the call ----------------------------------------------------------


@pytest.mark.parametrize(
    "carrier", [{"traceparent": "garbage"}, "not a carrier", 42, None, {"traceparent": 7}]
)
def test_a_malformed_carrier_still_runs_the_method(spans: InMemorySpans, carrier: Any) -> None:
    """Whatever arrives as `_otel_carrier`, the method runs and returns; the span is a root."""
    wrapped = carried(traced_remote_call(plain("add"), spans.tracer))
    assert wrapped(Worker(), 1, _otel_carrier=carrier) == 2
    assert one(spans, "Worker.add").parent is None


class _BrokenTracer(trace.NoOpTracer):
    """A real tracer whose start_span fails, as a faulty SDK would."""

    def start_span(self, *args: Any, **kwargs: Any) -> Span:
        raise RuntimeError("tracer down")


def test_a_failing_tracer_still_runs_every_kind(caplog: pytest.LogCaptureFixture) -> None:
    """When the span cannot be started, each kind of method still runs, with one warning."""
    worker = Worker()
    tracer = _BrokenTracer()
    with caplog.at_level(logging.WARNING, logger="nemo.lens.contrib.ray"):
        assert traced_remote_call(plain("add"), tracer)(worker, 1) == 2
        assert asyncio.run(traced_remote_call(plain("add_later"), tracer)(worker, 1)) == 2
        assert list(traced_remote_call(plain("count_sync"), tracer)(worker, 2)) == [0, 1]

        async def drain() -> list[int]:
            gen = traced_remote_call(plain("count"), tracer)(worker, 2)
            return [item async for item in gen]

        assert asyncio.run(drain()) == [0, 1]
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 1
    assert "starting the span failed (RuntimeError: tracer down)" in messages[0]


class _SpanThatFailsToEnd(NonRecordingSpan):
    def end(self, end_time: int | None = None) -> None:
        raise RuntimeError("end failed")


class _TracerOfBadSpans(trace.NoOpTracer):
    """A real tracer whose spans fail when ended."""

    def start_span(self, *args: Any, **kwargs: Any) -> Span:
        return _SpanThatFailsToEnd(trace.INVALID_SPAN_CONTEXT)


def test_a_span_that_fails_to_end_still_returns(caplog: pytest.LogCaptureFixture) -> None:
    """The method's result reaches the caller even when ending the span raises."""
    with caplog.at_level(logging.WARNING, logger="nemo.lens.contrib.ray"):
        assert traced_remote_call(plain("add"), _TracerOfBadSpans())(Worker(), 1) == 2
    assert "ending the span failed (RuntimeError: end failed)" in caplog.records[0].getMessage()


def test_failures_are_logged_on_the_ray_logger_with_their_consequence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The shared span lifecycle logs traced_remote_call's failures on this module's logger,
    saying that the method runs without the span."""
    with caplog.at_level(logging.WARNING, logger="nemo.lens.contrib.ray"):
        traced_remote_call(plain("add"), _BrokenTracer())(Worker(), 1)
    (record,) = caplog.records
    assert record.name == "nemo.lens.contrib.ray"
    assert record.getMessage() == (
        "traced_remote_call: starting the span failed (RuntimeError: tracer down); the "
        "method runs without it. Further RuntimeError errors here are not logged."
    )


class _NoneTracer(trace.NoOpTracer):
    """A tracer whose start_span returns None (a broken plug-in)."""

    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        return None


def test_a_tracer_returning_no_span_still_runs_every_kind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not a span: each kind of method runs without one, and one warning says why."""
    worker = Worker()
    tracer = _NoneTracer()
    with caplog.at_level(logging.WARNING, logger="nemo.lens.contrib.ray"):
        assert traced_remote_call(plain("add"), tracer)(worker, 1) == 2
        assert asyncio.run(traced_remote_call(plain("add_later"), tracer)(worker, 1)) == 2
        assert list(traced_remote_call(plain("count_sync"), tracer)(worker, 2)) == [0, 1]
    (message,) = [record.getMessage() for record in caplog.records]
    assert "returned NoneType, not a span" in message
    assert trace.get_current_span() is trace.INVALID_SPAN


class _InvalidSpanTracer(trace.NoOpTracer):
    """The no-op tracer of OpenTelemetry API 1.23: every span it starts is the invalid span."""

    def start_span(self, *args: Any, **kwargs: Any) -> Span:
        return trace.INVALID_SPAN


def test_an_invalid_span_leaves_the_carried_context_current() -> None:
    """Under a span that is not valid, the body still sees the caller's span (the trace is
    not cut), in a function and in each step of a generator."""
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    worker = Worker()
    tracer = _InvalidSpanTracer()
    assert carried(traced_remote_call(plain("add"), tracer))(worker, 1, _otel_carrier=carrier)
    generator = carried(traced_remote_call(plain("count_sync"), tracer))
    assert list(generator(worker, 2, _otel_carrier=carrier)) == [0, 1]
    assert len(worker.seen) == 3
    for span in worker.seen:
        assert span.get_span_context().span_id == 0xB7AD6B7169203331
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_an_unreadable_signature_still_wraps(caplog: pytest.LogCaptureFixture) -> None:
    """A callable whose signature cannot be read is wrapped without a `__signature__`."""

    def method(*args: object, **kwargs: object) -> str:
        return "ran"

    method.__signature__ = "not a signature"  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="nemo.lens.contrib.ray"):
        wrapped = traced_remote_call(method)
    assert carried(wrapped)(_otel_carrier=None) == "ran"
    assert "reading the method's signature failed" in caplog.records[0].getMessage()


def test_a_carrier_whose_reads_fail_still_runs_the_method(spans: InMemorySpans) -> None:
    """A carrier object that raises on every read is ignored; the method runs."""

    class Hostile(dict[str, str]):
        def get(self, *args: object, **kwargs: object) -> Any:
            raise RuntimeError("no")

        def __getitem__(self, key: str) -> str:
            raise RuntimeError("no")

    wrapped = carried(traced_remote_call(plain("add"), spans.tracer))
    assert wrapped(Worker(), 4, _otel_carrier=Hostile(traceparent="x")) == 5
    assert one(spans, "Worker.add").parent is None


def test_without_setup_every_kind_runs_on_a_non_recording_span(bare_process: None) -> None:
    """As in a Ray actor that never called setup: the calls work; the span records nothing."""
    worker = Worker()
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    assert carried(worker.add)(1, _otel_carrier=carrier) == 2
    assert asyncio.run(carried(worker.add_later)(1, _otel_carrier=carrier)) == 2
    assert list(carried(worker.count_sync)(2, _otel_carrier=carrier)) == [0, 1]

    async def drain() -> list[int]:
        return [item async for item in carried(worker.count)(2, _otel_carrier=carrier)]

    assert asyncio.run(drain()) == [0, 1]
    assert len(worker.seen) == 6
    for span in worker.seen:
        assert isinstance(span, NonRecordingSpan)
        assert not span.is_recording()
        # the API's default tracer still carries the caller's span context along
        assert span.get_span_context().trace_id == 0x0AF7651916CD43DD8448EB211C80319C


# --- ray_dispatch_with_context --------------------------------------------------------------


class _LocalRemote:
    """A plain object shaped like a Ray actor method: `.remote(...)` runs `fn` here."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        return self.fn(*args, **kwargs)


def test_dispatch_injects_the_current_context(spans: InMemorySpans) -> None:
    """The call gets `_otel_carrier` with the current span, and the remote span is its child."""
    worker = Worker()
    wrapped = traced_remote_call(plain("add"), spans.tracer)
    remote = _LocalRemote(lambda *a, **k: wrapped(worker, *a, **k))
    with spans.tracer.start_as_current_span("driver") as driver:
        assert ray_dispatch_with_context(remote, 2, y=5) == 7
    ((args, kwargs),) = remote.calls
    assert args == (2,)
    assert kwargs["y"] == 5
    assert set(kwargs["_otel_carrier"]) == {"traceparent"}
    assert_child_of(one(spans, "Worker.add"), driver)


def test_dispatch_passes_a_given_carrier(spans: InMemorySpans) -> None:
    """An explicit `_carrier` is sent as it is; an empty one is replaced by the current context."""
    remote = _LocalRemote(lambda *a, **k: None)
    chosen = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    with spans.tracer.start_as_current_span("driver"):
        ray_dispatch_with_context(remote, _carrier=chosen)
        ray_dispatch_with_context(remote, "x", _carrier={})
        current = inject_ray_context()
    assert remote.calls[0] == ((), {"_otel_carrier": chosen})
    assert remote.calls[1] == (("x",), {"_otel_carrier": current})
    assert current != {}


def test_importing_contrib_loads_neither_ray_nor_torch() -> None:
    """`nemo.lens.contrib.ray` and `.nccl` import no third-party runtime (in a fresh process)."""
    code = (
        "import sys, nemo.lens.contrib.ray, nemo.lens.contrib.nccl\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'torch'))\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
