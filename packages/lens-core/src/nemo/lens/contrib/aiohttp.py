"""Trace outgoing aiohttp requests in CLIENT spans that carry `traceparent` to the server.

`instrument_aiohttp_client()` switches on OpenTelemetry's aiohttp-client instrumentation
for the whole process. Every `aiohttp.ClientSession` created after the call records each
request in a CLIENT span and writes that span's context into the request headers through
the global text-map propagator, so a server instrumented with
`nemo.lens.contrib.fastapi.instrument_fastapi` continues the same trace.

This module imports the instrumentation inside the function, never at import. It needs
`opentelemetry-instrumentation-aiohttp-client`: `pip install 'lens-core[aiohttp]'`.
"""

from __future__ import annotations

from nemo.lens import _otel_env

__all__ = ["instrument_aiohttp_client"]


def instrument_aiohttp_client() -> None:
    """Trace every aiohttp client session the process creates from now on.

    Sessions created before the call stay untraced. The spans go to the global tracer
    provider, so the call may come before `setup_telemetry`: once setup installs its
    provider, the sessions' spans reach it. A second call changes nothing and logs
    nothing.

    Raises:
        ImportError: `opentelemetry-instrumentation-aiohttp-client` (or aiohttp itself) is
            not installed; the message names the lens-core extra to install.
    """
    try:
        from opentelemetry.instrumentation.aiohttp_client import (  # type: ignore[import-untyped,unused-ignore]
            AioHttpClientInstrumentor,
        )
    except ImportError as exc:
        raise ImportError(
            "instrument_aiohttp_client needs opentelemetry-instrumentation-aiohttp-client; "
            f"{_otel_env.install_hint(_otel_env.AIOHTTP_EXTRA)} ({exc})"
        ) from exc
    # Every BaseInstrumentor subclass has one instance per process, so this flag is
    # process-wide. Checking it first keeps a repeat call quiet: instrument() itself would
    # log "already instrumented" at WARNING.
    instrumentor = AioHttpClientInstrumentor()
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()
