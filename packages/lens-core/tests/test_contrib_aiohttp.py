"""instrument_aiohttp_client: CLIENT spans whose context reaches a real server as traceparent."""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from collections.abc import Callable, Iterator

import aiohttp
import pytest
from aiohttp import web
from lens_threads import call_at_once
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Span, SpanContext, SpanKind

from nemo.lens.contrib.aiohttp import instrument_aiohttp_client
from nemo.lens.testing import InMemorySpans, in_memory_spans, isolated_telemetry

pytestmark = pytest.mark.filterwarnings(
    # opentelemetry-instrumentation 0.44b0 (the release that goes with OpenTelemetry 1.23)
    # imports pkg_resources. The last setuptools releases that ship it (80.x, 81) warn
    # with a UserWarning, which pyproject's DeprecationWarning filter does not cover.
    "ignore:pkg_resources is deprecated as an API:UserWarning",
)

INSTRUMENTATION = "opentelemetry.instrumentation.aiohttp_client"
#: Every wait in this module ends within this many seconds.
TIMEOUT_S = 20


def uninstrument_fully() -> None:
    """Switch the process-wide aiohttp instrumentation off, including any second wrapper a
    racing pair of `instrument()` calls left on `ClientSession.__init__`."""
    from opentelemetry.instrumentation.aiohttp_client import (  # type: ignore[import-untyped,unused-ignore]
        AioHttpClientInstrumentor,
    )
    from opentelemetry.instrumentation.utils import unwrap

    instrumentor = AioHttpClientInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()
    while hasattr(aiohttp.ClientSession.__init__, "__wrapped__"):
        unwrap(aiohttp.ClientSession, "__init__")


@pytest.fixture
def uninstrument_after() -> Iterator[None]:
    """Switch the process-wide aiohttp instrumentation off after the test."""
    yield
    uninstrument_fully()


@pytest.fixture
def spans(uninstrument_after: None) -> Iterator[InMemorySpans]:
    """A global in-memory tracer provider; OpenTelemetry's globals are restored after."""
    with isolated_telemetry():
        yield in_memory_spans(install=True)


async def _echo_traceparent(request: web.Request) -> web.Response:
    return web.json_response({"traceparent": request.headers.get("traceparent", "")})


async def _call_echo_server(requests: int, once_session_exists: Callable[[], None]) -> list[str]:
    """Serve an echo app on 127.0.0.1 (a free port), create a client session, call
    `once_session_exists`, then POST to the server `requests` times; return the traceparent
    the server saw on each request."""
    app = web.Application()
    app.router.add_post("/echo", _echo_traceparent)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        seen: list[str] = []
        timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            once_session_exists()
            for _ in range(requests):
                async with session.post(f"http://{host}:{port}/echo", json={}) as response:
                    response.raise_for_status()
                    seen.append((await response.json())["traceparent"])
        return seen
    finally:
        await runner.cleanup()


def call_echo_server(
    requests: int = 1, once_session_exists: Callable[[], None] = lambda: None
) -> list[str]:
    """`_call_echo_server` on a new event loop, bounded by `TIMEOUT_S`."""
    coroutine = _call_echo_server(requests, once_session_exists)
    return asyncio.run(asyncio.wait_for(coroutine, TIMEOUT_S))


def client_spans(spans: InMemorySpans) -> list[ReadableSpan]:
    """The finished CLIENT spans, in the order they ended."""
    return [span for span in spans.finished() if span.kind is SpanKind.CLIENT]


def traceparent_of(span: ReadableSpan | Span) -> str:
    """The W3C traceparent header that names `span`."""
    context: SpanContext | None = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def test_the_client_span_reaches_the_server_as_traceparent(spans: InMemorySpans) -> None:
    """RL3 shape `instrument_aiohttp_client()`: a request gets one CLIENT span, child of the
    current span, and the server receives that CLIENT span's context as `traceparent`."""
    instrument_aiohttp_client()

    with spans.tracer.start_as_current_span("rollout") as rollout:
        (seen,) = call_echo_server()

    (client,) = client_spans(spans)
    assert seen == traceparent_of(client)
    assert client.parent is not None
    assert client.parent.span_id == rollout.get_span_context().span_id
    assert traceparent_of(client).split("-")[1] == traceparent_of(rollout).split("-")[1]


def test_a_request_without_a_current_span_starts_a_trace(spans: InMemorySpans) -> None:
    """With no span active, the CLIENT span is a new root and still reaches the server."""
    instrument_aiohttp_client()

    (seen,) = call_echo_server()

    (client,) = client_spans(spans)
    assert client.parent is None
    assert seen == traceparent_of(client)


def test_calling_twice_instruments_once_and_quietly(
    spans: InMemorySpans, caplog: pytest.LogCaptureFixture
) -> None:
    """A second call adds no second span per request and logs nothing."""
    caplog.set_level(logging.DEBUG)
    instrument_aiohttp_client()
    instrument_aiohttp_client()

    seen = call_echo_server(requests=2)

    found = client_spans(spans)
    assert len(found) == 2
    assert seen == [traceparent_of(span) for span in found]
    assert [record for record in caplog.records if "instrument" in record.getMessage()] == []


def test_concurrent_calls_instrument_once(spans: InMemorySpans) -> None:
    """Two threads calling it at the same moment (a barrier lines them up; 20 rounds)
    instrument once: a real request to a real server gives exactly one CLIENT span."""
    per_round: list[int] = []
    for _ in range(20):
        call_at_once(instrument_aiohttp_client)
        spans.clear()
        (seen,) = call_echo_server()
        found = client_spans(spans)
        per_round.append(len(found))
        assert seen == traceparent_of(found[-1])
        uninstrument_fully()

    assert per_round == [1] * 20


def test_instrumenting_before_the_provider_is_installed(uninstrument_after: None) -> None:
    """Called before setup (no tracer provider yet), the sessions created afterwards record
    on the provider installed later."""
    with isolated_telemetry():
        instrument_aiohttp_client()
        spans = in_memory_spans(install=True)

        (seen,) = call_echo_server()

        (client,) = client_spans(spans)
        assert seen == traceparent_of(client)


def test_a_session_created_before_the_call_stays_untraced(spans: InMemorySpans) -> None:
    """Only sessions created after the call are instrumented, as documented."""
    seen = call_echo_server(once_session_exists=instrument_aiohttp_client)

    assert seen == [""]
    assert client_spans(spans) == []


def test_missing_instrumentation_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without opentelemetry-instrumentation-aiohttp-client the ImportError says to
    `pip install 'lens-core[aiohttp]'` (the import is made to fail as a missing package does)."""
    monkeypatch.setitem(sys.modules, INSTRUMENTATION, None)

    with pytest.raises(ImportError, match=re.escape("pip install 'lens-core[aiohttp]'")) as info:
        instrument_aiohttp_client()

    assert "opentelemetry-instrumentation-aiohttp-client" in str(info.value)
    assert isinstance(info.value.__cause__, ImportError)
