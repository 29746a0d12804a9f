"""Carry the current trace context across process boundaries (W3C trace context, baggage).

Both functions go through OpenTelemetry's global text-map propagator. An exporting setup
installs the W3C composite propagator (unless `OTEL_PROPAGATORS` is set; where the API's
module is not loaded yet, that composite is the default it builds on loading); elsewhere
the API default applies, so both work in a process that never ran setup.

`opentelemetry.propagate` is imported on first use, not at import: importing it resolves
the configured propagators through package entry points, which costs more than the rest
of `import nemo.lens`'s own modules together.

OpenTelemetry's baggage propagator logs a warning, holding the header or the member, for
every bad baggage header or member it drops, on every extract. lens mutes that logger
(`opentelemetry.baggage.propagation`) with one filter, installed the first time lens
injects, extracts, sets up or instruments: each kind of problem becomes one lens warning
per process that names the kind and never the header's content.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Final

from opentelemetry.context import Context

from nemo.lens import _log_filters, _otel_env
from nemo.lens._warn_once import WarnOnce
from nemo.lens.errors import LensValueError

if TYPE_CHECKING:
    import importlib.metadata

    from opentelemetry.propagators.textmap import TextMapPropagator

__all__ = ["extract_context", "inject_context"]

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "nemo.lens propagation")
# What a failure warning says happens next.
_CARRIER_IGNORED: Final = "the carrier is ignored"

#: The logger OpenTelemetry's W3C baggage propagator warns on (every release lens supports).
_BAGGAGE_LOGGER: Final = "opentelemetry.baggage.propagation"
# A %-style placeholder in a log record's format string, e.g. `%s`, `%d`, `%(name)s`;
# compiled by `re` (and kept in its cache) at the first warning, not at import.
_PLACEHOLDER: Final = r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[a-zA-Z]"


class _BaggageWarnings(logging.Filter):
    """Drops every record of the baggage propagator's logger; the first record of each kind
    (its format string, the header's content left out) becomes one lens warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            kind = re.sub(_PLACEHOLDER, "...", str(record.msg))
            _warnings.warn(
                ("baggage", kind),
                "OpenTelemetry's baggage propagator dropped baggage: %s (the header's "
                "content is not logged). Further warnings of this kind are not logged.",
                kind,
            )
        except Exception:  # a filter must not raise into the propagator
            pass
        return False


_BAGGAGE_FILTER: Final = _BaggageWarnings()


def _bound_baggage_warnings() -> None:
    """Install lens's filter on `_BAGGAGE_LOGGER`, once per process (`_log_filters`)."""
    _log_filters.install_once(_BAGGAGE_LOGGER, _BAGGAGE_FILTER)


_import_lock = threading.Lock()


def _propagate() -> ModuleType:
    """`opentelemetry.propagate`, ready for lens: the baggage filter installed, and the module
    imported (the first time) with `OTEL_PROPAGATORS` read as lens reads it.

    The API builds its propagators from the variable when the module loads, and refuses a
    blank value or a blank entry (`tracecontext,,baggage`) with a raw ValueError, which
    the specification reads as unset and as skipped. So while the module loads, and only
    then, the variable holds `_otel_env.configured_propagators()` (or is unset when that is
    empty); it is restored at once. Once loaded, the module serves every later import,
    the instrumentations' too.

    Raises:
        LensValueError: `OTEL_PROPAGATORS` names a propagator that is not installed.
    """
    _bound_baggage_warnings()
    if "opentelemetry.propagate" not in sys.modules:
        with _import_lock:
            _import_propagate()
    from opentelemetry import propagate

    return propagate


def _import_propagate() -> None:
    """Import `opentelemetry.propagate` with the API seeing `configured_propagators()`."""
    variable = "OTEL_PROPAGATORS"
    raw = os.environ.get(variable)
    wanted = ",".join(_otel_env.configured_propagators())
    # An empty value too: OpenTelemetry 1.23 reads "" as one blank propagator name.
    swap = raw is not None and (not wanted or raw != wanted)
    if swap:
        if wanted:
            os.environ[variable] = wanted
        else:
            del os.environ[variable]
    try:
        import opentelemetry.propagate  # noqa: F401  (the import is the point)
    except ValueError:
        _check_propagators()  # names the variable when a name is the problem
        raise
    finally:
        if swap and raw is not None:
            os.environ[variable] = raw


def inject_context(carrier: dict[str, str]) -> None:
    """Write the current context into `carrier` (`traceparent`, and `tracestate`/`baggage`
    when present). Never raises; a carrier that cannot be written is left as it is.
    """
    try:
        _propagate().inject(carrier)
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
        context: Context = _propagate().extract(carrier)
        return context
    except Exception as exc:
        _warnings.failure("extract_context", exc, _CARRIER_IGNORED)
        return Context()


def _install_w3c_propagator() -> None:
    """Make the W3C composite propagator (tracecontext plus baggage) global.

    Called by an exporting setup. Leaves the global alone when `OTEL_PROPAGATORS` is set,
    because the API has already built the propagators it names (the export plan has
    checked that each is installed). Where the variable is absent and nothing has
    imported `opentelemetry.propagate` yet, the API builds that same composite itself
    when the module is first imported, so setup does not import it: that costs a first
    setup ~3 ms (on OpenTelemetry 1.23, whose import scans the entry points, ~15 ms).
    """
    if "opentelemetry.propagate" not in sys.modules and "OTEL_PROPAGATORS" not in os.environ:
        _bound_baggage_warnings()  # as `_propagate` does: setup installs the filter too
        return
    propagate = _propagate()
    if _otel_env.configured_propagators():
        return
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
        found = _propagator_entry_points(name)
        for entry_point in found:
            propagators.append(entry_point.load()())
            break
        else:
            _check_propagators()
            raise LensValueError(
                f"OTEL_PROPAGATORS names propagator {name!r}, which is not installed"
            )
    return CompositePropagator(propagators)


def _propagator_entry_points(name: str | None = None) -> importlib.metadata.EntryPoints:
    """The installed `opentelemetry_propagator` entry points (those called `name`, if given).

    `importlib.metadata` is imported only here, when `OTEL_PROPAGATORS` names propagators:
    it and what it loads cost a setup ~15 ms.
    """
    import importlib.metadata

    if name is None:
        return importlib.metadata.entry_points(group="opentelemetry_propagator")
    return importlib.metadata.entry_points(group="opentelemetry_propagator", name=name)


def _check_propagators(environ: Mapping[str, str] | None = None) -> None:
    """Refuse an `OTEL_PROPAGATORS` naming a propagator no installed
    `opentelemetry_propagator` entry point provides; the export plan calls it, so setup
    and `lens doctor` agree. A blank value or entry passes (see `_propagate`); so does
    anything after `none`, where the API stops reading.

    Raises:
        LensValueError: Names the variable, its value, the missing name and the installed
            names.
    """
    names = _otel_env.configured_propagators(environ)
    if not names:
        return
    group = _propagator_entry_points()
    installed = sorted({entry_point.name for entry_point in group})
    for name in names:
        if name.lower() == "none":
            return
        if name not in installed:
            raw = (os.environ if environ is None else environ).get("OTEL_PROPAGATORS", "")
            raise LensValueError(
                f"Invalid value for OTEL_PROPAGATORS: {raw!r} names propagator {name!r}, "
                "which is not installed; expected a comma-separated list of "
                f"{', '.join(map(repr, [*installed, 'none']))}"
            )
