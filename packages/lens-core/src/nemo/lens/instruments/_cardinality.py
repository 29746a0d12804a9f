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

`setup_telemetry` sets the process-wide limit (`metric_cardinality_limit`; 0 means none).
Calls without attributes record on the one series without attributes, which does not
count towards the limit. Instruments a consumer creates on `handle.meter` itself are not
limited: lens never sees what they record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from nemo.lens.instruments._series import SeriesAttributes, keyed
from nemo.lens.semconv import OTEL_METRIC_OVERFLOW

#: The attribute set every point past an instrument's limit is recorded on. A plain dict,
#: as the SDK expects on every release; nothing mutates it.
OVERFLOW_ATTRIBUTES: Final[Mapping[str, object]] = {OTEL_METRIC_OVERFLOW: True}

#: Distinct attribute sets each instrument records before overflowing; 0 means no limit.
#: Read by `record_metrics` on every call with attributes, so it stays a plain int.
limit: int = 0


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
    the overflow set.

    No lock: `in` and `set.add` are atomic under the GIL. Threads that add new sets at
    the same moment can each pass the length check before any of them adds, so at most
    one set per such thread gets past the limit; memory stays bounded all the same.
    """

    __slots__ = ("_emit", "_seen", "_warn")

    def __init__(self, emit: Callable[..., object], warn: Callable[[], None]) -> None:
        self._emit = emit
        self._warn = warn
        #: The series keys of the attribute sets this instrument records on their own series.
        self._seen: set[frozenset[Any]] = set()

    def __call__(self, value: float, attributes: Mapping[str, object]) -> None:
        if type(attributes) is not SeriesAttributes:
            attributes = keyed(attributes)
        series_key = attributes.series_key  # None for an unhashable value
        seen = self._seen
        if series_key not in seen:
            if series_key is not None and len(seen) < limit:
                seen.add(series_key)
            else:
                self._warn()
                attributes = OVERFLOW_ATTRIBUTES
        self._emit(value, attributes)
