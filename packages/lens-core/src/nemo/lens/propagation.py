"""Carry the current trace context across process boundaries (W3C trace context, baggage).

Both functions go through OpenTelemetry's global text-map propagator. An exporting setup
installs the W3C composite propagator (unless `OTEL_PROPAGATORS` is set); elsewhere the
API default applies, so both work in a process that never ran setup.

`opentelemetry.propagate` is imported on first use, not at import: importing it resolves
the configured propagators through package entry points, which costs more than the rest
of `import nemo.lens`'s own modules together.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from opentelemetry.context import Context

from nemo.lens import _otel_env
from nemo.lens._warn_once import WarnOnce
from nemo.lens.errors import LensValueError

if TYPE_CHECKING:
    from opentelemetry.propagators.textmap import TextMapPropagator

__all__ = ["extract_context", "inject_context"]

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "nemo.lens propagation")
# What a failure warning says happens next.
_CARRIER_IGNORED: Final = "the carrier is ignored"


def inject_context(carrier: dict[str, str]) -> None:
    """Write the current context into `carrier` (`traceparent`, and `tracestate`/`baggage`
    when present). Never raises; a carrier that cannot be written is left as it is.
    """
    try:
        from opentelemetry import propagate

        propagate.inject(carrier)
    except Exception as exc:
        _warnings.failure("inject_context", exc, _CARRIER_IGNORED)


def _carrier_to_bytes(carrier: Mapping[str, str]) -> bytes | None:
    """`carrier` as compact JSON bytes for a byte channel (a collective, a pipe).

    The JSON is ASCII (non-ASCII baggage is escaped), so the bytes are valid UTF-8 and
    always decode again. None when JSON cannot hold a value a custom propagator wrote.
    `nemo.lens.contrib.nccl` and `nemo.lens.distributed` share this encoding.
    """
    try:
        return json.dumps(dict(carrier), separators=(",", ":"), sort_keys=True).encode("ascii")
    except Exception:
        return None


def _carrier_from_bytes(data: object) -> dict[str, str] | None:
    """The carrier `_carrier_to_bytes` wrote into `data`; None unless `data` is bytes-like
    UTF-8 JSON of an object of str to str. Never raises."""
    try:
        carrier = json.loads(memoryview(data).tobytes().decode("utf-8"))  # type: ignore[arg-type]
    except Exception:  # not bytes-like, not UTF-8, not JSON, or nested too deep
        return None
    if not isinstance(carrier, dict):
        return None
    if not all(isinstance(key, str) and isinstance(value, str) for key, value in carrier.items()):
        return None
    return carrier


def extract_context(carrier: dict[str, str]) -> Context:
    """Return the context `carrier` describes; never raises.

    An empty or invalid carrier gives a context whose span is invalid, so a span started
    under it becomes a new root.
    """
    try:
        from opentelemetry import propagate

        return propagate.extract(carrier)
    except Exception as exc:
        _warnings.failure("extract_context", exc, _CARRIER_IGNORED)
        return Context()


def _install_w3c_propagator() -> None:
    """Make the W3C composite propagator (tracecontext plus baggage) global.

    Called by an exporting setup. Leaves the global alone when `OTEL_PROPAGATORS` is set,
    because the API has already built the propagators it names.
    """
    if _otel_env.configured_propagators():
        return
    from opentelemetry import propagate

    propagate.set_global_textmap(_environment_propagator())


def _environment_propagator() -> TextMapPropagator:
    """The propagator the API builds from `OTEL_PROPAGATORS` at import: the ones it names
    (`none`: none at all), else W3C trace context plus baggage.

    Raises:
        ValueError: A name no installed `opentelemetry_propagator` entry point provides.
    """
    from opentelemetry.propagators.composite import CompositePropagator

    names = _otel_env.configured_propagators()
    if not names:
        from opentelemetry.baggage.propagation import W3CBaggagePropagator
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        return CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
    propagators: list[TextMapPropagator] = []
    for name in names:
        if name.lower() == "none":
            return CompositePropagator([])
        found = importlib.metadata.entry_points(group="opentelemetry_propagator", name=name)
        for entry_point in found:
            propagators.append(entry_point.load()())
            break
        else:
            raise LensValueError(
                f"OTEL_PROPAGATORS names propagator {name!r}, which is not installed"
            )
    return CompositePropagator(propagators)
