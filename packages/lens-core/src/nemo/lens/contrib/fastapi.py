"""Trace the requests a FastAPI app serves in SERVER spans parented from `traceparent`.

`instrument_fastapi(app)` applies OpenTelemetry's FastAPI instrumentation to one app. Each
request it serves gets a SERVER span. When the request carries a `traceparent` header (an
aiohttp client instrumented with `nemo.lens.contrib.aiohttp` sends one), the span continues
that trace as a child of the caller's span.

This module imports the instrumentation inside the function, never at import. It needs
`opentelemetry-instrumentation-fastapi`: `pip install 'lens-core[fastapi]'`.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from nemo.lens import _otel_env
from nemo.lens.propagation import _propagate

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["instrument_fastapi"]

# instrument_app checks the app's mark, wraps its middleware stack, then marks it: two
# threads instrumenting one app at once would both wrap it (and the process-wide
# BackgroundTask patch), so every request would pass two tracing middlewares.
_instrument_lock = threading.Lock()


def instrument_fastapi(app: FastAPI, service_name: str = "nemo-gym") -> None:
    """Trace every request `app` serves in a SERVER span.

    The span's parent comes from the request's `traceparent` header (read through the
    global text-map propagator); without one the span starts a new trace. The spans go to
    the global tracer provider, so the call may come before `setup_telemetry`. Call it
    before the app serves its first request.

    A second call on the same app adds nothing: each request still gets one SERVER span
    (OpenTelemetry's instrumentation logs a warning that the app is already instrumented),
    also when two threads call it at the same moment.
    FastAPI releases that trace requests by themselves step aside for the instrumentation,
    so an instrumented app never reports a request twice.

    Args:
        app: The FastAPI application.
        service_name: Accepted and ignored, as NeMo Lens 0.2 did. The spans' `service.name`
            is the tracer provider's resource: with lens, `NemoLensConfig.service_name`.

    Raises:
        ImportError: `opentelemetry-instrumentation-fastapi` (or FastAPI itself) is not
            installed; the message names the lens-core extra to install.
        LensValueError: `OTEL_PROPAGATORS` names a propagator that is not installed.
    """
    del service_name  # kept in the signature for NeMo-Gym's call shape; see the docstring
    # The instrumentation imports opentelemetry.propagate: lens imports it first, so a
    # blank OTEL_PROPAGATORS (or entry) means the default there too, and installs its
    # filter that keeps baggage warnings bounded and free of header content.
    _propagate()
    try:
        from opentelemetry.instrumentation.fastapi import (  # type: ignore[import-untyped,unused-ignore]
            FastAPIInstrumentor,
        )
    except ImportError as exc:
        raise ImportError(
            "instrument_fastapi needs opentelemetry-instrumentation-fastapi; "
            f"{_otel_env.install_hint(_otel_env.FASTAPI_EXTRA)} ({exc})"
        ) from exc
    # The instrumentation marks the app it has instrumented and skips it on a repeat call,
    # in every release from 0.44b0 on; the lock makes its check and its wrapping one step.
    with _instrument_lock:
        FastAPIInstrumentor.instrument_app(app)
