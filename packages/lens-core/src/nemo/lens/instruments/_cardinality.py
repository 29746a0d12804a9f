"""The metric cardinality limit lens applies to what `record_metrics` records.

opentelemetry-sdk 1.23 to 1.45 keep one series per distinct attribute set for as long as
the process lives, so an attribute that takes a new value every step (a sample id) grows
memory without bound. lens applies the limit the OpenTelemetry metrics SDK specification
describes itself: per instrument, once `limit` distinct attribute sets have been seen,
each further new set is recorded on the overflow set `{"otel.metric.overflow": True}`
(sums and counts stay right overall), and the sets seen before keep their own series.

An attribute set is one series as the installed SDK keys it (`_series.series_key`, the
key the coalescing buffer uses too): where the SDK keeps `{"k": 1}` and `{"k": True}`
apart, so does the limit.

The limit counts per collection cycle where the SDK keeps a series only for one cycle
(delta temporality, such as counters and histograms under
`OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta`, on opentelemetry-sdk 1.45.2 and
newer), as the specification says, and over the process's life otherwise: cumulative
temporality, and releases before 1.45.2, which keep every delta series they saw too (a
per-cycle count there would let memory grow by `limit` sets a collection). A meter of
lens's pipeline tells which kinds are delta (`count_per_collection`), and each of that
pipeline's collections starts a new cycle (`start_cycle`). Attribute sets recorded while a
collection runs may count towards the next cycle: the cycle turns without a lock.

opentelemetry-sdk 1.45.2 and newer apply a limit of their own (2000 sets per instrument);
lens's pipeline lifts it on its reader, so `metric_cardinality_limit` is the one limit on
every release.

`setup_telemetry` sets the process-wide limit (`metric_cardinality_limit`; 0 means none).
Calls without attributes record on the one series without attributes, which does not
count towards the limit. Instruments a consumer creates on `handle.meter` itself are not
limited: lens never sees what they record.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any, Final

from nemo.lens import _otel_internals
from nemo.lens.instruments._series import SeriesAttributes, keyed
from nemo.lens.semconv import OTEL_METRIC_OVERFLOW

#: The attribute set every point past an instrument's limit is recorded on. A plain dict,
#: as the SDK expects on every release; nothing mutates it.
OVERFLOW_ATTRIBUTES: Final[Mapping[str, object]] = {OTEL_METRIC_OVERFLOW: True}

#: Distinct attribute sets each instrument records before overflowing; 0 means no limit.
#: Read by `record_metrics` on every call with attributes, so it stays a plain int.
limit: int = 0


#: What the SDK's own limit is raised to (1.45.2 and newer): more sets than memory holds.
SDK_UNLIMITED: Final = 2**62

#: The collection cycle of lens's pipeline: bumped by each of its collections.
cycle: int = 0

#: The measurement consumer of lens's pipeline (weakly) and the kinds it collects as delta,
#: whose attribute sets count per cycle. A forked child keeps its parent's (whose meters it
#: never records on) until a setup of its own replaces it.
_per_collection: tuple[weakref.ref[Any], frozenset[str]] | None = None


def count_per_collection(consumer: object | None, kinds: frozenset[str]) -> None:
    """Count the attribute sets of `kinds` per collection cycle on the meters sharing
    measurement consumer `consumer` (lens's pipeline, whose reader collects them as delta);
    None counts every set over the process's life."""
    global _per_collection
    _per_collection = None if consumer is None or not kinds else (weakref.ref(consumer), kinds)


def start_cycle() -> None:
    """Start a new collection cycle (lens's pipeline runs this before each collection)."""
    global cycle
    cycle += 1


def counts_per_collection(meter: object, kind: str) -> bool:
    """True when `meter`'s instruments of `kind` count attribute sets per cycle."""
    per_collection = _per_collection
    if per_collection is None or kind not in per_collection[1]:
        return False
    consumer = _otel_internals.meter_consumer(meter)
    return consumer is not None and consumer is per_collection[0]()


def set_limit(value: int) -> None:
    """Make `value` (an int >= 0, validated by setup) the limit from the next record on.

    Attribute sets an instrument has already seen keep recording under a lowered limit.
    """
    global limit
    limit = value


class BoundedEmitter:
    """An instrument's record method that folds new attribute sets past the limit.

    Wraps the method `record_metrics` calls when a limit is set and attributes are given,
    so a call without either never reaches it. `record_metrics` passes the attributes
    keyed once per call (`SeriesAttributes`); any other mapping is keyed here. They are
    already cleaned, hence hashable; a set that still is not (defensively) is recorded on
    the overflow set. With `per_collection`, the sets seen are forgotten when a new
    collection cycle starts (see the module's docstring).

    No lock: `in` and `set.add` are atomic under the GIL. Threads that add new sets at
    the same moment can each pass the length check before any of them adds, so at most
    one set per such thread gets past the limit; memory stays bounded all the same.
    """

    __slots__ = ("_cycle", "_emit", "_per_collection", "_seen", "_warn")

    def __init__(
        self, emit: Callable[..., object], warn: Callable[[], None], per_collection: bool = False
    ) -> None:
        self._emit = emit
        self._warn = warn
        self._per_collection = per_collection
        self._cycle = cycle
        #: The series keys of the attribute sets this instrument records on their own series.
        self._seen: set[frozenset[Any]] = set()

    def __call__(self, value: float, attributes: Mapping[str, object]) -> None:
        if type(attributes) is not SeriesAttributes:
            attributes = keyed(attributes)
        series_key = attributes.series_key  # None for an unhashable value
        seen = self._seen
        if self._per_collection and self._cycle != cycle:
            # A new cycle: the SDK has forgotten the sets of the last one. A new set
            # rather than clear(), so a thread still adding to the old one adds there.
            seen = self._seen = set()
            self._cycle = cycle
        if series_key not in seen:
            if series_key is not None and len(seen) < limit:
                seen.add(series_key)
            else:
                self._warn()
                attributes = OVERFLOW_ATTRIBUTES
        self._emit(value, attributes)
