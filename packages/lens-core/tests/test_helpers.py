"""The span primitives against the real SDK with an in-memory exporter."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lens_spans import one

import nemo.lens
import nemo.lens.helpers
from nemo.lens import (
    DEFAULT_REDACT_KEYS,
    managed_span,
    redact_value,
    safe_set_span_attributes,
    set_enabled_span_groups,
    span_cm,
    trace_fn,
)
from nemo.lens.testing import InMemorySpans, in_memory_spans, reset_otel_globals, reset_span_state

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry import trace
from opentelemetry.trace import StatusCode


@pytest.fixture(autouse=True)
def _fresh_span_state() -> Iterator[None]:
    reset_span_state(clear_registry=True)
    yield
    reset_span_state(clear_registry=True)


def enable(*groups: str) -> None:
    set_enabled_span_groups(frozenset(groups))


class RecordingGetTracer:
    """Stands in for `trace.get_tracer`, handing out a real tracer and noting each call."""

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer
        self.calls: list[str] = []

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(name)
        return self.tracer


@pytest.fixture
def get_tracer_calls(monkeypatch: pytest.MonkeyPatch, spans: InMemorySpans) -> RecordingGetTracer:
    """Consumer shape: `monkeypatch.setattr(nemo.lens.helpers.trace, "get_tracer", ...)`."""
    recorder = RecordingGetTracer(spans.tracer)
    monkeypatch.setattr(nemo.lens.helpers.trace, "get_tracer", recorder)
    return recorder


class FailingTracer:
    """A tracer whose every span-starting call raises."""

    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("tracer is broken")

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("tracer is broken")


# --- module surface ------------------------------------------------------------------------


def test_module_surface() -> None:
    """`trace` is OpenTelemetry's module; Gym's `__module__` checks and root exports hold."""
    assert nemo.lens.helpers.trace is trace
    assert managed_span.__module__ == "nemo.lens.helpers"
    assert safe_set_span_attributes.__module__ == "nemo.lens.helpers"
    for name in nemo.lens.helpers.__all__:
        assert getattr(nemo.lens, name) is getattr(nemo.lens.helpers, name)


# --- redaction (the rule itself: test_redaction.py) -----------------------------------------


def test_default_redact_keys_keep_the_v0_2_0_list() -> None:
    """DEFAULT_REDACT_KEYS still holds the eight keys lens v0.2.0 listed, and more."""
    assert (
        frozenset(
            {"prompt", "input_text", "output_text", "text", "password", "token", "secret", "key"}
        )
        < DEFAULT_REDACT_KEYS
    )


def test_redact_value_keeps_its_call_shapes() -> None:
    """redact_value(key, value[, keys]) redacts listed keys and passes other values through."""
    assert redact_value("password", "hunter2") == "[REDACTED]"
    assert redact_value("model", "llama") == "llama"
    assert redact_value("run_name", "abc", frozenset({"run_name"})) == "[REDACTED]"
    assert redact_value("password", "hunter2", DEFAULT_REDACT_KEYS | {"x"}) == "[REDACTED]"


# --- safe_set_span_attributes ---------------------------------------------------------------


def test_sets_what_otel_can_carry_and_drops_the_rest(spans: InMemorySpans) -> None:
    """Scalars and one-type sequences are set (as lists); None, mixes, dicts and objects not."""
    with spans.tracer.start_as_current_span("s") as span:
        safe_set_span_attributes(
            span,
            {
                "i": 1,
                "f": 0.5,
                "b": True,
                "s": "x",
                "ints": (1, 2),
                "strs": ["a", "b"],
                "bools": [True, False],
                "empty": [],
                "none": None,
                "mixed": [1, "a"],
                "bool_and_int": [True, 1],
                "dict": {"a": 1},
                "obj": object(),
                "nested": [[1]],
                "": "empty key",
                3: "int key",  # type: ignore[dict-item]
            },
        )
    assert dict(one(spans, "s").attributes) == {
        "i": 1,
        "f": 0.5,
        "b": True,
        "s": "x",
        "ints": (1, 2),
        "strs": ("a", "b"),
        "bools": (True, False),
        "empty": (),
    }


def test_redacts_listed_keys_whatever_the_value_type(spans: InMemorySpans) -> None:
    """A listed key is redacted even for numbers and sequences; None values stay skipped."""
    with spans.tracer.start_as_current_span("s") as span:
        safe_set_span_attributes(
            span,
            {"token": ["a", "b"], "key": 42, "prompt": "tell me", "secret": None, "model": "m"},
        )
    assert dict(one(spans, "s").attributes) == {
        "token": "[REDACTED]",
        "key": "[REDACTED]",
        "prompt": "[REDACTED]",
        "model": "m",
    }


def test_redact_keys_none_means_the_defaults_and_a_set_extends_them(
    spans: InMemorySpans,
) -> None:
    """`redact_keys=None` uses DEFAULT_REDACT_KEYS; an explicit set adds to them."""
    with spans.tracer.start_as_current_span("default") as span:
        safe_set_span_attributes(span, {"password": "p", "api": "a"}, redact_keys=None)
    with spans.tracer.start_as_current_span("custom") as span:
        safe_set_span_attributes(span, {"password": "p", "api": "a"}, frozenset({"api"}))
    assert dict(one(spans, "default").attributes) == {"password": "[REDACTED]", "api": "a"}
    assert dict(one(spans, "custom").attributes) == {"password": "[REDACTED]", "api": "[REDACTED]"}


class WatchedAttributes(Mapping[str, object]):
    """Attributes that count every read. An exception raised on a read would prove nothing:
    safe_set_span_attributes swallows it (and logs it) like any other failure."""

    def __init__(self, **attributes: object) -> None:
        self._attributes = attributes
        self.reads = 0

    def __getitem__(self, key: str) -> object:
        self.reads += 1
        return self._attributes[key]

    def __iter__(self) -> Iterator[str]:
        self.reads += 1
        return iter(self._attributes)

    def __len__(self) -> int:
        self.reads += 1
        return len(self._attributes)


def test_none_and_non_recording_spans_return_at_once(
    spans: InMemorySpans, caplog: pytest.LogCaptureFixture
) -> None:
    """A None or non-recording span returns before the attributes are read: no read, no
    warning; the same attributes on a recording span are read and exported."""
    skipped = {"none": WatchedAttributes(a=1), "non-recording": WatchedAttributes(a=1)}
    with caplog.at_level(logging.DEBUG, logger="nemo.lens"):
        safe_set_span_attributes(None, skipped["none"])
        safe_set_span_attributes(trace.INVALID_SPAN, skipped["non-recording"])
    assert {case: watched.reads for case, watched in skipped.items()} == {
        "none": 0,
        "non-recording": 0,
    }
    assert caplog.records == []

    read = WatchedAttributes(a=1)
    with spans.tracer.start_as_current_span("s") as span:
        safe_set_span_attributes(span, read)
    assert read.reads > 0
    assert dict(one(spans, "s").attributes) == {"a": 1}


def test_current_span_shape(spans: InMemorySpans) -> None:
    """Consumer shape: `safe_set_span_attributes(trace.get_current_span(), {...})`."""
    safe_set_span_attributes(trace.get_current_span(), {"outside": 1})
    with spans.tracer.start_as_current_span("s"):
        safe_set_span_attributes(trace.get_current_span(), {"dl.iteration": 7})
    assert dict(one(spans, "s").attributes) == {"dl.iteration": 7}


def test_never_raises_and_logs_a_failure_once(
    spans: InMemorySpans, caplog: pytest.LogCaptureFixture
) -> None:
    """A span whose set_attributes raises costs a single warning, never an exception."""

    class BrokenSpan:
        def is_recording(self) -> bool:
            return True

        def set_attributes(self, attributes: Any) -> None:
            raise RuntimeError("exporter gone")

    with caplog.at_level(logging.WARNING, logger="nemo.lens.helpers"):
        for _ in range(3):
            safe_set_span_attributes(BrokenSpan(), {"a": 1})  # type: ignore[arg-type]
        safe_set_span_attributes(spans.tracer.start_span("s"), 3)  # type: ignore[arg-type]
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "RuntimeError" in m]) == 1
    assert len([m for m in messages if "AttributeError" in m]) == 1


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text())
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=4),
    st.tuples(scalars, scalars),
    st.dictionaries(st.text(), scalars, max_size=2),
    st.builds(object),
)


@given(st.dictionaries(st.one_of(st.text(), st.integers()), values, max_size=6))
def test_any_attributes_never_raise(attributes: dict[Any, Any]) -> None:
    """Whatever the mapping holds, the call returns and only carriable values arrive."""
    pipeline = in_memory_spans()
    with pipeline.tracer.start_as_current_span("s") as span:
        safe_set_span_attributes(span, attributes)
    for key, value in one(pipeline, "s").attributes.items():
        assert isinstance(key, str)
        assert key in attributes
        assert isinstance(value, (bool, int, float, str, tuple))
    pipeline.provider.shutdown()


# --- managed_span --------------------------------------------------------------------------


def test_disabled_yields_none_runs_the_body_and_records_nothing(
    spans: InMemorySpans, get_tracer_calls: RecordingGetTracer
) -> None:
    """With the group off the body runs, `as` gets None, no tracer is looked up."""
    ran = []
    with managed_span("step", "train_step", iteration=1) as span:
        ran.append(span)
    with managed_span("step", "explicit", tracer=spans.tracer) as span:
        ran.append(span)
    assert ran == [None, None]
    assert get_tracer_calls.calls == []
    assert spans.finished() == []


def test_disabled_lets_exceptions_through() -> None:
    """The disabled context manager never swallows an exception from the body."""
    with pytest.raises(KeyError, match="boom"), managed_span("step", "x"):
        raise KeyError("boom")
    with pytest.raises(KeyboardInterrupt), managed_span("step", "x"):
        raise KeyboardInterrupt


def test_disabled_path_is_one_shared_object() -> None:
    """Disabled calls allocate no context manager: they all return the same object."""
    assert managed_span("step", "a") is managed_span("job", "b", x=1)


def test_gate_is_checked_before_anything_else(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate decides first: with it off, no span class, tracer or attribute is touched."""
    monkeypatch.setattr(nemo.lens.helpers, "SpanLifecycle", None)
    monkeypatch.setattr(nemo.lens.helpers, "trace", None)
    monkeypatch.setattr(nemo.lens.helpers, "safe_set_span_attributes", None)
    with managed_span("step", "x", weird=object()) as span:
        assert span is None


def test_enabled_creates_a_current_span_with_attributes(spans: InMemorySpans) -> None:
    """Enabled, the span is current inside the body, carries the attributes and ends after."""
    enable("step")
    with managed_span("step", "train_step", tracer=spans.tracer, iteration=3) as span:
        assert span is not None
        assert trace.get_current_span() is span
        assert span.is_recording()
    assert trace.get_current_span() is trace.INVALID_SPAN
    finished = one(spans, "train_step")
    assert dict(finished.attributes) == {"iteration": 3}
    assert finished.status.status_code is StatusCode.UNSET
    assert finished.end_time is not None


def test_consumer_attribute_shapes(spans: InMemorySpans) -> None:
    """Consumer shapes: dotted keys via `**{...}`, bools, and an explicit tracer."""
    enable("rollout", "step")
    with managed_span("rollout", "generate", tracer=spans.tracer, **{"rl.backend": "vllm"}):
        pass
    with managed_span(
        "step",
        "iteration",
        tracer=spans.tracer,
        is_goodput_span=True,
        **{"megatron.iteration": 12},
    ):
        pass
    assert dict(one(spans, "generate").attributes) == {"rl.backend": "vllm"}
    assert dict(one(spans, "iteration").attributes) == {
        "is_goodput_span": True,
        "megatron.iteration": 12,
    }


def test_exception_is_recorded_with_error_status_and_re_raised(spans: InMemorySpans) -> None:
    """An Exception from the body is recorded, sets ERROR with str(exc), and propagates."""
    enable("step")
    with pytest.raises(ValueError, match="bad batch"), managed_span("step", "s", spans.tracer):
        raise ValueError("bad batch")
    finished = one(spans, "s")
    assert finished.status.status_code is StatusCode.ERROR
    assert finished.status.description == "bad batch"
    assert [event.name for event in finished.events] == ["exception"]
    assert finished.events[0].attributes["exception.type"] == "ValueError"
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_base_exception_ends_the_span_without_error(spans: InMemorySpans) -> None:
    """KeyboardInterrupt passes through; the span is still ended and detached, not ERROR."""
    enable("step")
    with pytest.raises(KeyboardInterrupt), managed_span("step", "s", spans.tracer):
        raise KeyboardInterrupt
    finished = one(spans, "s")
    assert finished.status.status_code is StatusCode.UNSET
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_default_tracer_is_looked_up_at_call_time(
    get_tracer_calls: RecordingGetTracer, spans: InMemorySpans
) -> None:
    """Without a tracer, `trace.get_tracer("nemo.lens.helpers")` is asked at use (on every
    use while no provider is installed: nothing is cached under the API's proxy)."""
    enable("step")
    for _ in range(2):
        with managed_span("step", "s"):
            pass
    assert get_tracer_calls.calls == ["nemo.lens.helpers", "nemo.lens.helpers"]
    assert spans.names() == ["s", "s"]


def test_default_tracer_follows_the_global_provider() -> None:
    """A provider installed after import is used: nothing was cached at import."""
    enable("step")
    pipeline = in_memory_spans(install=True)
    try:
        with managed_span("step", "global"):
            pass
        assert pipeline.names() == ["global"]
        assert one(pipeline, "global").instrumentation_scope.name == "nemo.lens.helpers"
    finally:
        reset_otel_globals()


def test_a_broken_tracer_degrades_to_none(caplog: pytest.LogCaptureFixture) -> None:
    """If the span cannot start, `as` gets None, the body runs, and one warning is logged."""
    enable("step")
    ran = []
    with caplog.at_level(logging.WARNING, logger="nemo.lens.helpers"):
        for _ in range(2):
            with managed_span("step", "s", tracer=FailingTracer()) as span:
                ran.append(span)
    assert ran == [None, None]
    assert len(caplog.records) == 1
    assert "tracer is broken" in caplog.records[0].getMessage()


def test_nested_spans_parent_correctly(spans: InMemorySpans) -> None:
    """span_cm > managed_span > trace_fn > managed_span form one chain in one trace."""
    enable("step", "forward_backward", "optimizer")

    @trace_fn("forward_backward", "fwd_bwd", tracer=spans.tracer)
    def forward_backward() -> None:
        with managed_span("optimizer", "inner", tracer=spans.tracer):
            pass

    with span_cm("job", tracer=spans.tracer):
        with managed_span("step", "step", tracer=spans.tracer):
            forward_backward()
        with managed_span("step", "sibling", tracer=spans.tracer):
            pass
    by_name = {span.name: span for span in spans.finished()}
    assert by_name["job"].parent is None
    expected_parent = {
        "step": "job",
        "fwd_bwd": "step",
        "inner": "fwd_bwd",
        "sibling": "job",
    }
    for child, parent in expected_parent.items():
        parent_context = by_name[child].parent
        assert parent_context is not None
        assert parent_context.span_id == by_name[parent].context.span_id
    assert len({span.context.trace_id for span in by_name.values()}) == 1
    assert spans.names() == ["inner", "fwd_bwd", "step", "sibling", "job"]


def test_threads_get_their_own_parents(spans: InMemorySpans) -> None:
    """A span opened in another thread does not become the parent of this thread's spans."""
    import threading

    enable("step")
    opened = threading.Event()
    release = threading.Event()

    def other_thread() -> None:
        with managed_span("step", "other", tracer=spans.tracer):
            opened.set()
            release.wait(timeout=30)

    thread = threading.Thread(target=other_thread)
    thread.start()
    assert opened.wait(timeout=30)
    with managed_span("step", "mine", tracer=spans.tracer):
        pass
    release.set()
    thread.join(timeout=30)
    assert one(spans, "mine").parent is None
    assert one(spans, "other").parent is None


# --- span_cm -------------------------------------------------------------------------------


def test_span_cm_is_ungated(spans: InMemorySpans) -> None:
    """Consumer shape: `span_cm(name, tracer=t, num_microbatches=n)` opens with every gate off."""
    with span_cm("pipeline_schedule", tracer=spans.tracer, num_microbatches=8) as span:
        assert trace.get_current_span() is span
    assert dict(one(spans, "pipeline_schedule").attributes) == {"num_microbatches": 8}


def test_span_cm_redacts_and_filters_attributes(spans: InMemorySpans) -> None:
    """span_cm sets attributes safely, as safe_set_span_attributes does."""
    with span_cm("s", tracer=spans.tracer, prompt="secret words", n=None, bad=object(), ok=1):
        pass
    assert dict(one(spans, "s").attributes) == {"prompt": "[REDACTED]", "ok": 1}


@pytest.mark.parametrize(("record_exception", "events"), [(True, ["exception"]), (False, [])])
def test_span_cm_exceptions(
    spans: InMemorySpans, record_exception: bool, events: list[str]
) -> None:
    """An exception sets ERROR and propagates; record_exception decides the event."""
    with (
        pytest.raises(RuntimeError, match="oom"),
        span_cm("s", tracer=spans.tracer, record_exception=record_exception),
    ):
        raise RuntimeError("oom")
    finished = one(spans, "s")
    assert finished.status.status_code is StatusCode.ERROR
    assert [event.name for event in finished.events] == events
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_span_cm_default_tracer(get_tracer_calls: RecordingGetTracer, spans: InMemorySpans) -> None:
    """Without a tracer, span_cm asks `trace.get_tracer("nemo.lens.helpers")` at use."""
    with span_cm("s"):
        pass
    assert get_tracer_calls.calls == ["nemo.lens.helpers"]
    assert spans.names() == ["s"]


def test_span_cm_with_a_broken_tracer_still_runs_the_body(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """If the span cannot start, the body gets a non-recording span and runs."""
    broken: Any = FailingTracer()
    with (
        caplog.at_level(logging.WARNING, logger="nemo.lens.helpers"),
        span_cm("s", tracer=broken, x=1) as span,
    ):
        span.set_attribute("still", "works")
        assert not span.is_recording()
    assert "tracer is broken" in caplog.records[0].getMessage()


# --- trace_fn ------------------------------------------------------------------------------


def test_trace_fn_keeps_the_function_metadata() -> None:
    """functools.wraps: name, qualname, doc, module, __wrapped__ and the signature survive."""

    def step(model: str, lr: float = 0.1) -> str:
        """Run one step."""
        return model

    wrapped = trace_fn("step", "train_step")(step)
    assert wrapped is not step
    assert wrapped.__name__ == "step"
    assert wrapped.__qualname__ == step.__qualname__
    assert wrapped.__doc__ == "Run one step."
    assert wrapped.__module__ == __name__
    assert wrapped.__wrapped__ is step  # type: ignore[attr-defined]
    assert inspect.signature(wrapped) == inspect.signature(step)


def test_trace_fn_disabled_is_a_plain_call(spans: InMemorySpans) -> None:
    """With the group off, the function runs and returns with no span."""

    @trace_fn("step", "add", tracer=spans.tracer)
    def add(a: int, b: int) -> int:
        return a + b

    assert add(1, 2) == 3
    assert spans.finished() == []


def test_trace_fn_checks_the_gate_on_every_call(spans: InMemorySpans) -> None:
    """Decorated while off, traced once on, plain again once off: the gate is read per call."""

    @trace_fn("step", "add", tracer=spans.tracer)
    def add(a: int, b: int) -> int:
        return a + b

    assert add(1, 2) == 3
    enable("step")
    assert add(2, 3) == 5
    enable()
    assert add(3, 4) == 7
    assert spans.names() == ["add"]


def test_trace_fn_enabled_span_is_current_inside(spans: InMemorySpans) -> None:
    """Enabled, the call runs inside the span, which is current and then ended."""
    enable("step")
    inside: list[Any] = []

    @trace_fn("step", "work", tracer=spans.tracer)
    def work() -> None:
        inside.append(trace.get_current_span())

    work()
    finished = one(spans, "work")
    assert inside[0].get_span_context().span_id == finished.context.span_id
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_trace_fn_records_the_exception_and_re_raises(spans: InMemorySpans) -> None:
    """An exception sets ERROR, adds the exception event, and reaches the caller."""
    enable("optimizer")

    @trace_fn("optimizer", "opt", tracer=spans.tracer)
    def optimizer_step() -> None:
        raise FloatingPointError("nan loss")

    with pytest.raises(FloatingPointError, match="nan loss"):
        optimizer_step()
    finished = one(spans, "opt")
    assert finished.status.status_code is StatusCode.ERROR
    assert [event.name for event in finished.events] == ["exception"]


def test_trace_fn_default_tracer_scope(
    get_tracer_calls: RecordingGetTracer, spans: InMemorySpans
) -> None:
    """Consumer shape `@trace_fn(g, n)`: the tracer is `trace.get_tracer("nemo.lens")`, asked
    at call time, not at decoration (per call while no provider is installed)."""
    enable("step")

    @trace_fn("step", "f")
    def f() -> int:
        return 1

    assert get_tracer_calls.calls == []
    assert f() + f() == 2
    assert get_tracer_calls.calls == ["nemo.lens", "nemo.lens"]
    assert spans.names() == ["f", "f"]


def test_trace_fn_async_span_covers_the_await(spans: InMemorySpans) -> None:
    """A coroutine function stays one; its span is current across awaits and ends after them."""
    enable("step")

    @trace_fn("step", "rollout", tracer=spans.tracer)
    async def rollout(n: int) -> int:
        await asyncio.sleep(0)
        with managed_span("step", "inside", tracer=spans.tracer):
            await asyncio.sleep(0)
        return n * 2

    assert inspect.iscoroutinefunction(rollout)
    assert asyncio.run(rollout(4)) == 8
    assert spans.names() == ["inside", "rollout"]
    assert one(spans, "inside").parent.span_id == one(spans, "rollout").context.span_id


def test_trace_fn_async_disabled_and_failing(spans: InMemorySpans) -> None:
    """Disabled, the coroutine is awaited plainly; enabled, its exception is recorded."""

    @trace_fn("step", "co", tracer=spans.tracer)
    async def co(fail: bool) -> str:
        await asyncio.sleep(0)
        if fail:
            raise ConnectionError("lost")
        return "ok"

    assert asyncio.run(co(False)) == "ok"
    assert spans.finished() == []
    enable("step")
    with pytest.raises(ConnectionError):
        asyncio.run(co(True))
    assert one(spans, "co").status.status_code is StatusCode.ERROR


DEFAULT_LIST: list[int] = []


def every_kind(
    a: Any, b: Any = 2, /, c: Any = 3, *args: Any, d: Any, e: Any = DEFAULT_LIST, **kwargs: Any
) -> tuple[Any, ...]:
    """A function with every parameter kind."""
    return (a, b, c, args, d, e, kwargs)


def keyword_only(*, x: Any, y: Any = 1) -> tuple[Any, ...]:
    return (x, y)


def positional_only(a: Any, b: Any, /) -> tuple[Any, ...]:
    return (a, b)


@pytest.mark.parametrize("enabled", [False, True])
@pytest.mark.parametrize(
    ("fn", "args", "kwargs"),
    [
        (every_kind, (1,), {"d": 4}),
        (every_kind, (1, 2, 3, 4, 5), {"d": 6, "e": 7, "f": 8}),
        (every_kind, (1,), {"c": 9, "d": 4}),
        (keyword_only, (), {"x": 1}),
        (keyword_only, (), {"x": 1, "y": 2}),
        (positional_only, (1, 2), {}),
    ],
)
def test_trace_fn_passes_every_argument_kind_through(
    spans: InMemorySpans, enabled: bool, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """Positional-only, defaults, *args, keyword-only and **kwargs reach the function as given."""
    if enabled:
        enable("step")
    wrapped = trace_fn("step", "f", tracer=spans.tracer)(fn)
    assert wrapped(*args, **kwargs) == fn(*args, **kwargs)
    assert inspect.signature(wrapped) == inspect.signature(fn)
    assert len(spans.finished()) == (1 if enabled else 0)


def test_trace_fn_keeps_default_objects_identical() -> None:
    """A mutable default reaches the function as the very same object."""
    wrapped = trace_fn("step", "f")(every_kind)
    assert wrapped(1, d=4)[5] is DEFAULT_LIST


def test_trace_fn_refuses_the_same_bad_calls(spans: InMemorySpans) -> None:
    """A call the function would refuse raises the same TypeError through the wrapper."""
    wrapped = trace_fn("step", "f", tracer=spans.tracer)(positional_only)
    with pytest.raises(TypeError):
        wrapped(a=1, b=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        trace_fn("step", "f")(keyword_only)(1)  # type: ignore[call-arg]


def test_trace_fn_on_methods(spans: InMemorySpans) -> None:
    """Decorating a method keeps `self` binding, enabled or not."""
    enable("step")

    class Trainer:
        def __init__(self) -> None:
            self.scale = 10

        @trace_fn("step", "Trainer.step", tracer=spans.tracer)
        def step(self, x: int) -> int:
            return x * self.scale

    assert Trainer().step(3) == 30
    assert spans.names() == ["Trainer.step"]


def test_trace_fn_on_other_callables(spans: InMemorySpans) -> None:
    """Callable objects, partials, builtins and pre-wrapped functions are traced correctly."""
    enable("step")

    class Doubler:
        __name__ = "Doubler"

        def __call__(self, x: int) -> int:
            return 2 * x

    def outer(fn: Any) -> Any:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs) + 1

        return inner

    @outer
    def base(x: int) -> int:
        return x

    tracer = spans.tracer
    assert trace_fn("step", "obj", tracer=tracer)(Doubler())(4) == 8
    assert trace_fn("step", "partial", tracer=tracer)(functools.partial(pow, 2))(5) == 32
    assert trace_fn("step", "builtin", tracer=tracer)(len)([1, 2]) == 2
    assert trace_fn("step", "prewrapped", tracer=tracer)(base)(1) == 2
    assert spans.names() == ["obj", "partial", "builtin", "prewrapped"]


def test_trace_fn_with_colliding_parameter_names(spans: InMemorySpans) -> None:
    """Parameters named like the wrapper's own internals still work (generic wrapper)."""
    enable("step")

    def clash(_lens_fn: int, _lens_state: int = 2) -> int:
        return _lens_fn + _lens_state

    wrapped = trace_fn("step", "clash", tracer=spans.tracer)(clash)
    assert wrapped(1) == 3
    assert wrapped(_lens_fn=1, _lens_state=5) == 6
    assert spans.names() == ["clash", "clash"]


def test_trace_fn_with_an_unhashable_group_never_traces(spans: InMemorySpans) -> None:
    """A group name that cannot be looked up is never enabled, and calls still work."""
    enable("step")
    wrapped = trace_fn(["step"], "f", tracer=spans.tracer)(positional_only)  # type: ignore[arg-type]
    assert wrapped(1, 2) == (1, 2)
    assert spans.finished() == []


def test_trace_fn_with_a_broken_tracer_still_calls(caplog: pytest.LogCaptureFixture) -> None:
    """If the span cannot start, the function is still called and its result returned."""
    enable("step")
    wrapped = trace_fn("step", "f", tracer=FailingTracer())(positional_only)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="nemo.lens.helpers"):
        assert wrapped(1, 2) == (1, 2)
    assert "tracer is broken" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        (
            managed_span,
            "(group: 'str', name: 'str', tracer: 'Tracer | None' = None, "
            "**attributes: 'object') -> 'AbstractContextManager[Span | None]'",
        ),
        (
            span_cm,
            "(name: 'str', tracer: 'Tracer | None' = None, record_exception: 'bool' = True, "
            "**attributes: 'object') -> 'AbstractContextManager[Span]'",
        ),
    ],
)
def test_typing_signatures_leave_the_runtime_function_unchanged(
    function: Any, expected: str
) -> None:
    """The static-signature decorator hands back the function itself: name, module, signature."""
    assert str(inspect.signature(function)) == expected
    assert function.__module__ == "nemo.lens.helpers"
    assert function.__qualname__ == function.__code__.co_name
    assert not hasattr(function, "__wrapped__")
