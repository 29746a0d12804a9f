"""Trace the requests a FastAPI app serves in SERVER spans parented from `traceparent`.

`instrument_fastapi(app)` applies OpenTelemetry's FastAPI instrumentation to one app. Each
request it serves gets a SERVER span. When the request carries a `traceparent` header (an
aiohttp client instrumented with `nemo.lens.contrib.aiohttp` sends one), the span continues
that trace as a child of the caller's span.

This module imports the instrumentation inside the function, never at import. It needs
`opentelemetry-instrumentation-fastapi`: `pip install 'lens-core[fastapi]'`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nemo.lens import _otel_env

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["instrument_fastapi"]


def instrument_fastapi(app: FastAPI, service_name: str = "nemo-gym") -> None:
    """Trace every request `app` serves in a SERVER span.

    The span's parent comes from the request's `traceparent` header (read through the
    global text-map propagator); without one the span starts a new trace. The spans go to
    the global tracer provider, so the call may come before `setup_telemetry`. Call it
    before the app serves its first request.

    A second call on the same app adds nothing: each request still gets one SERVER span
    (OpenTelemetry's instrumentation logs a warning that the app is already instrumented).
    FastAPI releases that trace requests by themselves step aside for the instrumentation,
    so an instrumented app never reports a request twice.

    Args:
        app: The FastAPI application.
        service_name: Accepted and ignored, as NeMo Lens 0.2 did. The spans' `service.name`
            is the tracer provider's resource: with lens, `NemoLensConfig.service_name`.

    Raises:
        ImportError: `opentelemetry-instrumentation-fastapi` (or FastAPI itself) is not
            installed; the message names the lens-core extra to install.
    """
    del service_name  # kept in the signature for NeMo-Gym's call shape; see the docstring
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
    # in every release from 0.44b0 on.
    FastAPIInstrumentor.instrument_app(app)
