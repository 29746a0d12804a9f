"""Carry the current trace context across process boundaries (W3C trace context, baggage).

Both functions go through OpenTelemetry's global text-map propagator. An exporting setup
installs the W3C composite propagator (unless `OTEL_PROPAGATORS` is set); elsewhere the
API default applies, so both work in a process that never ran setup.

`opentelemetry.propagate` is imported on first use, not at import: importing it resolves
the configured propagators through package entry points, which costs more than the rest
of `import nemo.lens`'s own modules together.
"""

from __future__ import annotations

import logging
import os

from opentelemetry.context import Context

from nemo.lens._warn_once import WarnOnce

__all__ = ["extract_context", "inject_context"]

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "nemo.lens propagation")


def inject_context(carrier: dict[str, str]) -> None:
    """Write the current context into `carrier` (`traceparent`, and `tracestate`/`baggage`
    when present). Never raises; a carrier that cannot be written is left as it is.
    """
    try:
        from opentelemetry import propagate

        propagate.inject(carrier)
    except Exception as exc:
        _warn_once("inject_context", exc)


def extract_context(carrier: dict[str, str]) -> Context:
    """Return the context `carrier` describes; never raises.

    An empty or invalid carrier gives a context whose span is invalid, so a span started
    under it becomes a new root.
    """
    try:
        from opentelemetry import propagate

        return propagate.extract(carrier)
    except Exception as exc:
        _warn_once("extract_context", exc)
        return Context()


def install_w3c_propagator() -> None:
    """Make the W3C composite propagator (tracecontext plus baggage) global.

    Called by an exporting setup. Leaves the global alone when `OTEL_PROPAGATORS` is set,
    because the API has already built the propagators it names.
    """
    if os.environ.get("OTEL_PROPAGATORS", "").strip():
        return
    from opentelemetry import propagate
    from opentelemetry.baggage.propagation import W3CBaggagePropagator
    from opentelemetry.propagators.composite import CompositePropagator
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    propagate.set_global_textmap(
        CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
    )


def _warn_once(where: str, exc: Exception) -> None:
    _warnings.warn(
        (where, type(exc).__name__),
        "%s failed (%s: %s); the carrier is ignored. Further %s errors are not logged.",
        where,
        type(exc).__name__,
        exc,
        type(exc).__name__,
    )
