"""The span helpers' default tracer: cached per scope while the global provider stays put."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import nemo.lens.helpers
from nemo.lens import managed_span, set_enabled_span_groups, span_cm, trace_fn
from nemo.lens.testing import InMemorySpans, in_memory_spans, reset_otel_globals, reset_span_state

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry import trace

GROUP = "step"
HELPERS_SCOPE = "nemo.lens.helpers"
TRACE_FN_SCOPE = "nemo.lens"


@pytest.fixture(autouse=True)
def _fresh_globals() -> Iterator[None]:
    """No global provider and only GROUP enabled, before and after each test."""
    reset_otel_globals()
    reset_span_state(clear_registry=True)
    set_enabled_span_groups(frozenset({GROUP}))
    yield
    reset_otel_globals()
    reset_span_state(clear_registry=True)


@pytest.fixture
def installed() -> InMemorySpans:
    """An in-memory pipeline installed as the global tracer provider (reset after the test)."""
    return in_memory_spans(install=True)


class CountingGetTracer:
    """Wraps the real `trace.get_tracer`, noting the scope of each call."""

    def __init__(self, real: Callable[..., trace.Tracer]) -> None:
        self.real = real
        self.scopes: list[str] = []

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> trace.Tracer:
        self.scopes.append(name)
        return self.real(name, *args, **kwargs)


@pytest.fixture
def get_tracer_calls(monkeypatch: pytest.MonkeyPatch) -> CountingGetTracer:
    """Consumer shape: `trace.get_tracer` patched through `nemo.lens.helpers.trace`."""
    counting = CountingGetTracer(trace.get_tracer)
    monkeypatch.setattr(nemo.lens.helpers.trace, "get_tracer", counting)
    return counting


def name_and_scope(pipeline: InMemorySpans) -> set[tuple[str, str | None]]:
    """The (span name, instrumentation scope name) pairs of the finished spans."""
    return {
        (span.name, None if span.instrumentation_scope is None else span.instrumentation_scope.name)
        for span in pipeline.finished()
    }


def open_managed_span(name: str) -> trace.Span | None:
    with managed_span(GROUP, name) as span:
        return span


def open_span_cm(name: str) -> trace.Span | None:
    with span_cm(name) as span:
        return span


def open_trace_fn(name: str) -> trace.Span | None:
    @trace_fn(GROUP, name)
    def body() -> trace.Span:
        return trace.get_current_span()

    return body()


def open_async_trace_fn(name: str) -> trace.Span | None:
    @trace_fn(GROUP, name)
    async def body() -> trace.Span:
        return trace.get_current_span()

    return asyncio.run(body())


def is_sdk_span(span: trace.Span | None) -> bool:
    """True for a span a real provider made; the proxy's no-op span has an invalid context."""
    return span is not None and span.get_span_context().is_valid


# Each opens one span named `name` without `tracer=` and returns the span it was given.
OPENERS: dict[str, tuple[Callable[[str], trace.Span | None], str]] = {
    "managed_span": (open_managed_span, HELPERS_SCOPE),
    "span_cm": (open_span_cm, HELPERS_SCOPE),
    "trace_fn": (open_trace_fn, TRACE_FN_SCOPE),
    "async trace_fn": (open_async_trace_fn, TRACE_FN_SCOPE),
}


@pytest.mark.parametrize("helper", list(OPENERS))
def test_one_get_tracer_call_serves_many_spans(
    helper: str, installed: InMemorySpans, get_tracer_calls: CountingGetTracer
) -> None:
    """With one real global provider, five spans of a helper cost one `trace.get_tracer`."""
    open_span, scope = OPENERS[helper]
    for _ in range(5):
        open_span("s")
    assert get_tracer_calls.scopes == [scope]
    assert installed.names() == ["s"] * 5
    assert name_and_scope(installed) == {("s", scope)}


def test_each_scope_has_its_own_entry(
    installed: InMemorySpans, get_tracer_calls: CountingGetTracer
) -> None:
    """Interleaved managed_span and trace_fn spans keep their scopes, one look-up each."""
    for _ in range(3):
        open_managed_span("cm")
        open_trace_fn("fn")
    assert get_tracer_calls.scopes == [HELPERS_SCOPE, TRACE_FN_SCOPE]
    assert name_and_scope(installed) == {("cm", HELPERS_SCOPE), ("fn", TRACE_FN_SCOPE)}


def test_a_provider_installed_after_a_first_span_is_used(spans: InMemorySpans) -> None:
    """A span before any provider is a no-op; the providers installed later get the next ones."""
    assert not is_sdk_span(open_managed_span("before"))
    first = in_memory_spans(install=True)
    open_managed_span("first")
    reset_otel_globals()
    trace.set_tracer_provider(spans.provider)
    open_managed_span("second")
    assert first.names() == ["first"]
    assert spans.names() == ["second"]


def test_without_a_provider_every_span_looks_the_tracer_up(
    get_tracer_calls: CountingGetTracer,
) -> None:
    """Under the API's proxy provider nothing is cached: each span calls `trace.get_tracer`."""
    for _ in range(3):
        open_managed_span("s")
    assert get_tracer_calls.scopes == [HELPERS_SCOPE] * 3


def test_a_patched_get_tracer_is_honoured_and_so_is_undoing_it(
    monkeypatch: pytest.MonkeyPatch, installed: InMemorySpans, spans: InMemorySpans
) -> None:
    """Patching `trace.get_tracer` after the cache is warm takes effect; undoing it too."""
    open_managed_span("real-1")
    monkeypatch.setattr(nemo.lens.helpers.trace, "get_tracer", lambda *a, **k: spans.tracer)
    open_managed_span("patched-1")
    open_trace_fn("patched-2")
    monkeypatch.undo()
    open_managed_span("real-2")
    assert spans.names() == ["patched-1", "patched-2"]
    assert installed.names() == ["real-1", "real-2"]


def test_after_a_testing_reset_spans_do_not_reach_the_old_provider(
    installed: InMemorySpans,
) -> None:
    """Once `reset_otel_globals` forgets a provider, its cached tracer is never used again."""
    open_managed_span("before-reset")
    open_trace_fn("fn-before-reset")
    reset_otel_globals()
    after = [open_managed_span("after-reset"), open_trace_fn("fn-after-reset")]
    assert [is_sdk_span(span) for span in after] == [False, False]
    later = in_memory_spans(install=True)
    open_managed_span("later")
    assert installed.names() == ["before-reset", "fn-before-reset"]
    assert later.names() == ["later"]


def test_a_proxy_tracer_is_not_kept_past_the_provider_it_bound_to(
    monkeypatch: pytest.MonkeyPatch, spans: InMemorySpans
) -> None:
    """A provider arriving between the look-up and the span (another thread) binds a cached
    ProxyTracer for good; nothing got under the proxy is kept, so a reset forgets it."""
    real_get_tracer_provider = trace.get_tracer_provider
    arriving: list[trace.TracerProvider] = []

    def read_then_let_one_arrive() -> trace.TracerProvider:
        provider = real_get_tracer_provider()
        if arriving:
            trace.set_tracer_provider(arriving.pop())
        return provider

    monkeypatch.setattr(nemo.lens.helpers.trace, "get_tracer_provider", read_then_let_one_arrive)
    assert not is_sdk_span(open_managed_span("early"))
    arriving.append(spans.provider)
    open_managed_span("bound")
    assert spans.names() == ["bound"]
    reset_otel_globals()
    assert not is_sdk_span(open_managed_span("after-reset"))


def test_a_tracer_got_while_the_provider_changed_is_not_kept_under_the_old_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The provider changes during the look-up: the tracer is not remembered for the old one."""
    old = in_memory_spans()
    new = in_memory_spans()
    current = [old.provider]
    monkeypatch.setattr(nemo.lens.helpers.trace, "get_tracer_provider", lambda: current[0])
    real_get_tracer = trace.get_tracer

    def provider_changes_meanwhile(name: str, *args: Any, **kwargs: Any) -> trace.Tracer:
        if current[0] is old.provider and not new.names():
            current[0] = new.provider
        return real_get_tracer(name, *args, **kwargs)

    monkeypatch.setattr(nemo.lens.helpers.trace, "get_tracer", provider_changes_meanwhile)
    try:
        open_managed_span("during-change")
        current[0] = old.provider
        open_managed_span("old-again")
        assert new.names() == ["during-change"]
        assert old.names() == ["old-again"]
    finally:
        old.shutdown()
        new.shutdown()


@pytest.mark.parametrize("helper", ["managed_span", "span_cm", "trace_fn"])
def test_an_explicit_tracer_wins_over_a_warm_cache(
    helper: str, installed: InMemorySpans, spans: InMemorySpans
) -> None:
    """With the default tracer cached, `tracer=` still decides where the span goes."""
    OPENERS[helper][0]("default")
    if helper == "managed_span":
        with managed_span(GROUP, "explicit", tracer=spans.tracer):
            pass
    elif helper == "span_cm":
        with span_cm("explicit", tracer=spans.tracer):
            pass
    else:
        trace_fn(GROUP, "explicit", tracer=spans.tracer)(lambda: None)()
    assert spans.names() == ["explicit"]
    assert installed.names() == ["default"]


def test_threads_sharing_the_cache_lose_no_span(
    installed: InMemorySpans, get_tracer_calls: CountingGetTracer
) -> None:
    """Eight threads opening spans at once: every span is exported, at most a look-up each."""
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            barrier.wait(timeout=10)
            for _ in range(50):
                open_managed_span("t")
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert len(installed.names()) == 400
    assert 1 <= len(get_tracer_calls.scopes) <= 8
