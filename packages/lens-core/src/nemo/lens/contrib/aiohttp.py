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

import threading

from nemo.lens import _otel_env
from nemo.lens.propagation import _propagate

__all__ = ["instrument_aiohttp_client"]

# OpenTelemetry's instrument() checks its flag, then wraps, then sets the flag: two threads
# calling it at once would both wrap, and every request would get two CLIENT spans.
_instrument_lock = threading.Lock()


def instrument_aiohttp_client() -> None:
    """Trace every aiohttp client session the process creates from now on.

    Sessions created before the call stay untraced. The spans go to the global tracer
    provider, so the call may come before `setup_telemetry`: once setup installs its
    provider, the sessions' spans reach it. A second call changes nothing and logs
    nothing, also when two threads call it at the same moment.

    Raises:
        ImportError: `opentelemetry-instrumentation-aiohttp-client` (or aiohttp itself) is
            not installed; the message names the lens-core extra to install.
        LensValueError: `OTEL_PROPAGATORS` names a propagator that is not installed.
    """
    # The instrumentation imports opentelemetry.propagate: lens imports it first, so a
    # blank OTEL_PROPAGATORS (or entry) means the default there too, and installs its
    # filter that keeps baggage warnings bounded and free of header content.
    _propagate()
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
    # log "already instrumented" at WARNING. The lock makes check and instrument one step.
    instrumentor = AioHttpClientInstrumentor()
    with _instrument_lock:
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument()
