"""instrument_fastapi: a real uvicorn server's SERVER spans, parented from traceparent."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import aiohttp
import pytest
import uvicorn
from fastapi import FastAPI, Request
from lens_threads import call_at_once
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind

from nemo.lens.contrib.aiohttp import instrument_aiohttp_client
from nemo.lens.contrib.fastapi import instrument_fastapi
from nemo.lens.testing import InMemorySpans, in_memory_spans, isolated_telemetry

pytestmark = pytest.mark.filterwarnings(
    # opentelemetry-instrumentation 0.44b0 (the release that goes with OpenTelemetry 1.23)
    # imports pkg_resources. The last setuptools releases that ship it (80.x, 81) warn
    # with a UserWarning, which pyproject's DeprecationWarning filter does not cover.
    "ignore:pkg_resources is deprecated as an API:UserWarning",
)

INSTRUMENTATION = "opentelemetry.instrumentation.fastapi"
#: Every wait in this module ends within this many seconds.
TIMEOUT_S = 20
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def gym_app() -> FastAPI:
    """A Gym-style resource server: one POST endpoint that reports the traceparent it got."""
    app = FastAPI()

    @app.post("/run")
    async def run(request: Request) -> dict[str, str]:
        return {"traceparent": request.headers.get("traceparent", "")}

    return app


@pytest.fixture
def spans() -> Iterator[InMemorySpans]:
    """A global in-memory tracer provider; OpenTelemetry's globals are restored after."""
    with isolated_telemetry():
        yield in_memory_spans(install=True)


@pytest.fixture
def make_app() -> Iterator[Callable[[], FastAPI]]:
    """Build fresh Gym-style apps; each one's instrumentation is removed after the test
    (the instrumentation also patches Starlette's BackgroundTask process-wide, and removing
    it restores that)."""
    from opentelemetry.instrumentation.fastapi import (  # type: ignore[import-untyped,unused-ignore]
        FastAPIInstrumentor,
    )

    built: list[FastAPI] = []

    def make() -> FastAPI:
        built.append(gym_app())
        return built[-1]

    yield make
    for app in built:
        FastAPIInstrumentor.uninstrument_app(app)


@pytest.fixture
def app(make_app: Callable[[], FastAPI]) -> FastAPI:
    """A fresh Gym-style app, uninstrumented after the test."""
    return make_app()


@pytest.fixture
def aiohttp_instrumented() -> Iterator[None]:
    """The process-wide aiohttp client instrumentation, switched off after the test."""
    from opentelemetry.instrumentation.aiohttp_client import (  # type: ignore[import-untyped,unused-ignore]
        AioHttpClientInstrumentor,
    )

    instrument_aiohttp_client()
    yield
    AioHttpClientInstrumentor().uninstrument()


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """Serve `app` with uvicorn on 127.0.0.1 (a free port) in a thread; yield its base URL.

    On exit the server stops and the thread is joined: uvicorn finishes every request it
    accepted first, so each request's SERVER span has ended by then.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(app, lifespan="off", ws="none", log_config=None, access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [listener]}, name="uvicorn", daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(TIMEOUT_S)
        listener.close()
    assert not thread.is_alive(), "uvicorn did not stop"


def post(url: str, headers: dict[str, str] | None = None) -> str:
    """POST `{}` with the standard library's (uninstrumented) client; return the echoed
    traceparent."""
    request = urllib.request.Request(
        f"{url}/run",
        data=b"{}",
        headers={"content-type": "application/json", **(headers or {})},
        method="POST",
    )
    # No proxy handler: a proxy set in the environment must not see a 127.0.0.1 request.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=TIMEOUT_S) as response:
        body: dict[str, str] = json.loads(response.read())
    return body["traceparent"]


def of_kind(spans: InMemorySpans, kind: SpanKind) -> list[ReadableSpan]:
    """The finished spans of `kind`, in the order they ended."""
    return [span for span in spans.finished() if span.kind is kind]


def ids(span: ReadableSpan) -> SpanContext:
    """The trace and span ids of a finished span."""
    context = span.get_span_context()
    assert context is not None
    return context


def server_spans(spans: InMemorySpans) -> list[ReadableSpan]:
    """The finished SERVER spans, each checked to come from OpenTelemetry's instrumentation.

    FastAPI 0.142 and later trace requests by themselves once a provider is installed and
    step aside when they find the instrumentation; the scope check tells the two apart, so
    these tests cannot pass on FastAPI's own spans.
    """
    found = of_kind(spans, SpanKind.SERVER)
    for span in found:
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.name.startswith("opentelemetry.instrumentation.")
    return found


def test_the_server_span_is_the_aiohttp_client_spans_child(
    spans: InMemorySpans, app: FastAPI, aiohttp_instrumented: None
) -> None:
    """Gym shape `instrument_fastapi(app)` with RL3's `instrument_aiohttp_client()`: the
    server's one SERVER span shares the CLIENT span's trace and has it as its parent."""
    instrument_fastapi(app)

    async def call(url: str) -> str:
        timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(f"{url}/run", json={}) as response,
        ):
            response.raise_for_status()
            body: dict[str, str] = await response.json()
            return body["traceparent"]

    with serving(app) as url, spans.tracer.start_as_current_span("rollout"):
        seen = asyncio.run(asyncio.wait_for(call(url), TIMEOUT_S))

    (client,) = of_kind(spans, SpanKind.CLIENT)
    (server,) = server_spans(spans)
    client_context = ids(client)
    assert seen == (
        f"00-{client_context.trace_id:032x}-{client_context.span_id:016x}"
        f"-{client_context.trace_flags:02x}"
    )
    assert ids(server).trace_id == client_context.trace_id
    assert server.parent is not None
    assert server.parent.span_id == client_context.span_id
    assert server.parent.is_remote


def test_an_incoming_traceparent_parents_the_server_span(
    spans: InMemorySpans, app: FastAPI
) -> None:
    """Any caller's `traceparent` header becomes the SERVER span's remote parent."""
    instrument_fastapi(app)

    with serving(app) as url:
        post(url, {"traceparent": TRACEPARENT})

    (server,) = server_spans(spans)
    assert f"{ids(server).trace_id:032x}" == TRACEPARENT.split("-")[1]
    assert server.parent is not None
    assert f"{server.parent.span_id:016x}" == TRACEPARENT.split("-")[2]
    assert server.parent.is_remote


def test_a_request_without_traceparent_starts_a_trace(spans: InMemorySpans, app: FastAPI) -> None:
    """Without the header the SERVER span is a new root."""
    instrument_fastapi(app)

    with serving(app) as url:
        post(url)

    (server,) = server_spans(spans)
    assert server.parent is None


def test_calling_twice_instruments_once(
    spans: InMemorySpans, make_app: Callable[[], FastAPI]
) -> None:
    """A second call on the same app neither raises nor adds spans: a request gives one
    SERVER span and exactly the spans an app instrumented once gives."""
    once, twice = make_app(), make_app()
    instrument_fastapi(once)
    instrument_fastapi(twice)
    instrument_fastapi(twice)

    recorded: list[list[tuple[str, str]]] = []
    for app in (once, twice):
        spans.clear()
        with serving(app) as url:
            post(url)
        assert len(server_spans(spans)) == 1
        recorded.append(sorted((span.name, span.kind.name) for span in spans.finished()))

    assert recorded[1] == recorded[0]


def test_concurrent_calls_on_one_app_instrument_it_once(
    spans: InMemorySpans, make_app: Callable[[], FastAPI]
) -> None:
    """Two threads instrumenting the same app at the same moment (a barrier lines them up;
    10 apps) instrument it once: a request to real uvicorn gives one SERVER span and exactly
    the spans of an app instrumented once (no second middleware's INTERNAL spans)."""
    reference = make_app()
    instrument_fastapi(reference)
    raced = [make_app() for _ in range(10)]
    for app in raced:
        call_at_once(lambda app=app: instrument_fastapi(app))  # type: ignore[misc]

    recorded: list[list[tuple[str, str]]] = []
    for app in [reference, *raced]:
        spans.clear()
        with serving(app) as url:
            post(url)
        assert len(server_spans(spans)) == 1
        recorded.append(sorted((span.name, span.kind.name) for span in spans.finished()))

    assert [len(spans_of_app) for spans_of_app in recorded[1:]] == [len(recorded[0])] * 10
    assert recorded[1:] == [recorded[0]] * 10


def test_an_oversized_baggage_header_warns_once_without_its_value(
    spans: InMemorySpans, app: FastAPI, caplog: pytest.LogCaptureFixture
) -> None:
    """Five requests whose 12 KB baggage holds `token=secret` give one warning in all,
    which shows nothing of the header; each request still gets its SERVER span."""
    instrument_fastapi(app)
    members = ["token=secret"] + [f"k{index}={'v' * 64}" for index in range(180)]
    caplog.set_level(logging.DEBUG)

    with serving(app) as url:
        for _ in range(5):
            post(url, {"traceparent": TRACEPARENT, "baggage": ",".join(members)})

    assert len(server_spans(spans)) == 5
    baggage_lines = [r for r in caplog.records if "baggage" in r.getMessage().lower()]
    assert len(baggage_lines) == 1
    assert baggage_lines[0].levelno == logging.WARNING
    assert all("secret" not in record.getMessage() for record in caplog.records)


def test_service_name_is_accepted_and_ignored(spans: InMemorySpans, app: FastAPI) -> None:
    """`service_name` changes nothing: the span's resource is the provider's, and the name
    appears in no span attribute."""
    instrument_fastapi(app, service_name="gym-math-server")

    with serving(app) as url:
        post(url)

    (server,) = server_spans(spans)
    assert server.resource is spans.provider.resource
    assert server.resource.attributes.get("service.name") != "gym-math-server"
    assert "gym-math-server" not in (server.attributes or {}).values()


def test_missing_instrumentation_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without opentelemetry-instrumentation-fastapi the ImportError says to
    `pip install 'lens-core[fastapi]'` (the import is made to fail as a missing package does)."""
    monkeypatch.setitem(sys.modules, INSTRUMENTATION, None)

    with pytest.raises(ImportError, match=re.escape("pip install 'lens-core[fastapi]'")) as info:
        instrument_fastapi(gym_app())

    assert "opentelemetry-instrumentation-fastapi" in str(info.value)
    assert isinstance(info.value.__cause__, ImportError)
