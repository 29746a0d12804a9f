"""The metrics part of the report: one chart per metric, one line per series.

Gauges and up-down counters chart their values; counters their rate per second, with the
running total kept beside it for the page's toggle; histograms p50/p90/p99 per export
interval, computed from the bucket counts that interval added, plus the distribution of
everything recorded up to the last export. Delta and cumulative temporality both give
per-interval figures: a cumulative point is compared with the previous point of its
series (same start time), a delta point stands alone.

Memory follows what is drawn: at most `MAX_SERIES` series per metric and `MAX_CHARTS`
charts keep points (the rest are counted), and a series keeps at most `COMPACT_AT`
points, min-max decimated (`_decimate`) whenever it reaches that many.
"""

from __future__ import annotations

import itertools
import math
import operator
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from nemo.lens._view import _decimate, _quantiles
from nemo.lens._view._otlp_json import (
    Malformed,
    decode_attributes,
    enum,
    integer,
    nanos,
    number,
    point_value,
    shown_attributes,
    shown_text,
    written_key,
)

_N = TypeVar("_N", int, float)

#: Series per metric that get a line; the others are counted, not drawn.
MAX_SERIES: Final = 20
#: Metrics that get a chart; the others are listed with their point counts (that many).
MAX_CHARTS: Final = 400
MAX_UNCHARTED: Final = 1000
#: Points a series holds before it is decimated to half as many.
COMPACT_AT: Final = 4000
#: Points per series drawn at most, and the points the whole page draws at most (shared
#: among the series, never fewer than MIN_DRAWN each): what keeps the page light.
MAX_DRAWN: Final = 2000
PAGE_POINTS: Final = 60_000
MIN_DRAWN: Final = 50
#: Buckets of one histogram point at most (the SDK's default explicit layout has 16, its
#: exponential one up to 320); a point with more is skipped.
MAX_BUCKETS: Final = 4096
# How many series keys of hidden series are remembered to count them distinctly.
_MAX_HIDDEN_KEYS: Final = 1_000_000
# A chart remembers which series this many attribute lists (as written, over all its
# sources) name, each of up to _MAX_KNOWN_TEXT bytes: a point of a known list skips
# decoding its attributes. At most MAX_CHARTS x 80 x 1 KiB (32 MiB) in all.
_MAX_KNOWN: Final = 4 * MAX_SERIES
_MAX_KNOWN_TEXT: Final = 1024
# What a source none of whose series a chart draws yet knows (never written to).
_NOTHING_KNOWN: Final[dict[bytes | None, Series]] = {}

_TEMPORALITY: Final = {
    "AGGREGATION_TEMPORALITY_UNSPECIFIED": 0,
    "AGGREGATION_TEMPORALITY_DELTA": 1,
    "AGGREGATION_TEMPORALITY_CUMULATIVE": 2,
}
_DELTA: Final = 1
# OTLP's data field of each metric type, and the kind the page draws it as.
_DATA_FIELDS: Final = ("gauge", "sum", "histogram", "exponentialHistogram", "summary")


@dataclass(slots=True)
class Series:
    """One attribute set of one metric from one source, and its points."""

    source: int
    attributes: dict[str, str]
    #: Names of the values of each point beside its time; the first decides decimation.
    columns: tuple[str, ...]
    points: int = 0
    times: array[float] = field(default_factory=lambda: array("d"))
    #: Every point's values, one row of `len(columns)` after another (one C call a point).
    rows: array[float] = field(default_factory=lambda: array("d"))
    # Running state: the previous point's start, time and value (cumulative points are
    # compared with it), the running total of a delta counter, the bucket counts.
    last_start: int = -1
    last_time: int = -1
    last_value: float = 0.0
    running: float = 0.0
    #: A histogram's counts by each bucket's upper bound (math.inf for the last), as two
    #: lists (the bounds distinct): points whose layouts differ (an exponential histogram
    #: that grew) still line up, and a point of the same layout is compared list to list.
    bucket_bounds: list[float] = field(default_factory=list)
    bucket_counts: list[int] = field(default_factory=list)
    #: The explicit bounds, as written, of the last histogram point that passed.
    checked_bounds: list[Any] | None = None

    def append(self, time_ns: int, row: tuple[float, ...]) -> None:
        self.points += 1
        times = self.times
        times.append(time_ns / 1e6)
        self.rows.extend(row)
        if len(times) >= COMPACT_AT:
            self.decimate(COMPACT_AT // 4)

    def column(self, place: int) -> array[float]:
        """The values of one column, point by point."""
        return self.rows[place :: len(self.columns)]

    def decimate(self, runs: int) -> None:
        self._keep(_decimate.kept_indices(self.times, self.column(0), runs))

    def _keep(self, indices: list[int]) -> None:
        """Keep only the points at `indices`, in that order."""
        # itemgetter picks in C, but gives a bare value, not a tuple, for one index.
        pick = operator.itemgetter(*indices) if len(indices) > 1 else None
        times, *columns = (
            pick(held) if pick else [held[index] for index in indices]
            for held in (self.times, *map(self.column, range(len(self.columns))))
        )
        self.times = array("d", times)
        self.rows = array("d", itertools.chain.from_iterable(zip(*columns, strict=True)))

    def buckets(self) -> dict[float, int]:
        """The histogram's counts by upper bound."""
        return dict(zip(self.bucket_bounds, self.bucket_counts, strict=True))

    def drawn(self, limit: int) -> dict[str, Any]:
        """The series as the page draws it: at most `limit` points, in time order."""
        if len(self.times) > limit:
            self.decimate(max(limit // 2, 1))
        else:
            order = sorted(range(len(self.times)), key=self.times.__getitem__)
            if order != list(range(len(order))):
                self._keep(order)
        out: dict[str, Any] = {
            "source": self.source,
            "attributes": self.attributes,
            "points": self.points,
            "t": [round(time, 3) for time in self.times],
        }
        for place, column in enumerate(self.columns):
            # JSON has no NaN or Infinity: a value that is not finite is a gap.
            out[column] = [value if math.isfinite(value) else None for value in self.column(place)]
        return out


@dataclass
class Chart:
    """One metric: its description and its series."""

    name: str
    kind: str  # gauge, updown, counter, histogram, summary
    unit: str
    description: str
    temporality: int
    series: dict[tuple[Any, ...], Series] = field(default_factory=dict)
    #: By source, a point's attributes as written (`written_key`; b"" for none) -> its
    #: series, once drawn (None, a list too deeply nested for a key, is never kept).
    known: dict[int, dict[bytes | None, Series]] = field(default_factory=dict)
    known_texts: int = 0
    hidden: set[int] = field(default_factory=set)
    hidden_points: int = 0
    points: int = 0

    def columns(self) -> tuple[str, ...]:
        if self.kind == "counter":
            return ("rate", "total")
        if self.kind in ("histogram", "summary"):
            return ("p99", "p90", "p50")
        return ("value",)


class MetricCharts:
    """Every metric of the files, fed one OTLP metric at a time."""

    def __init__(self) -> None:
        self.charts: dict[tuple[str, str], Chart] = {}
        self.uncharted: dict[str, int] = {}
        self.points = 0
        #: Points that could not be read.
        self.skipped = 0
        self.first_ns: int | None = None
        self.last_ns: int | None = None

    def add(self, source: int, metric: dict[str, Any]) -> None:
        """Take one OTLP metric of `source`; its points that cannot be read are counted
        in `skipped`."""
        name = metric.get("name")
        if not isinstance(name, str):
            raise Malformed("a metric without a name")
        for data_field in _DATA_FIELDS:
            data = metric.get(data_field)
            if isinstance(data, dict):
                break
        else:
            raise Malformed(f"metric {name!r} holds no data this report knows")
        kind = _kind(data_field, data)
        points = _sequence(data.get("dataPoints"))
        # Per request, not per chart: two files may export one metric differently.
        temporality = enum(data.get("aggregationTemporality"), _TEMPORALITY)
        chart = self.charts.get((name, kind))
        if chart is None:
            chart = self._new_chart(name, kind, metric, temporality)
            if chart is None:
                self._add_uncharted(name, points)
                return
        row_of = _ROWS[data_field if kind == "histogram" else kind]
        known = chart.known.get(source, _NOTHING_KNOWN)
        # The points read, and their first and last time, counted once at the end.
        read, first, last = 0, math.inf, -math.inf
        try:
            for point in points:
                if not isinstance(point, dict):
                    self.skipped += 1
                    continue
                try:
                    time_ns = nanos(point, "timeUnixNano")
                    # Every list that is not there or empty decodes to no attributes.
                    written = point.get("attributes")
                    text = written_key(written) if written else b""
                    series = known.get(text)
                    key = None
                    if series is None:
                        key, series = self._series(chart, source, point, time_ns)
                        if series is None:
                            continue  # a hidden series' point: counted there
                    start_ns = integer(point.get("startTimeUnixNano", 0))
                    row = row_of(series, temporality, start_ns, time_ns, point)
                    series.last_start, series.last_time = start_ns, time_ns
                    series.append(time_ns, row)
                    if key is not None:
                        _keep(chart, key, series, text)
                except (Malformed, TypeError, ValueError, ArithmeticError):
                    self.skipped += 1
                    continue
                read += 1
                if time_ns < first:
                    first = time_ns
                if time_ns > last:
                    last = time_ns
        finally:
            if read:
                self._count(chart, int(first), int(last), read)

    def _add_uncharted(self, name: str, points: list[Any]) -> None:
        """Count the points of a metric past the chart limit."""
        for point in points:
            try:
                if not isinstance(point, dict):
                    raise Malformed("a point that is not an object")
                time_ns = nanos(point, "timeUnixNano")
            except Malformed:
                self.skipped += 1
                continue
            self._count(None, time_ns, time_ns, 1)
            if name in self.uncharted or len(self.uncharted) < MAX_UNCHARTED:
                self.uncharted[name] = self.uncharted.get(name, 0) + 1

    def _new_chart(
        self, name: str, kind: str, metric: dict[str, Any], temporality: int
    ) -> Chart | None:
        """A metric's chart, made on its first point; None past the chart limit."""
        if len(self.charts) >= MAX_CHARTS:
            return None
        chart = self.charts[(name, kind)] = Chart(
            name=name,
            kind=kind,
            unit=shown_text(metric.get("unit") or ""),
            description=shown_text(metric.get("description") or ""),
            temporality=temporality,
        )
        return chart

    def _series(
        self, chart: Chart, source: int, point: dict[str, Any], time_ns: int
    ) -> tuple[tuple[Any, ...], Series | None]:
        """The key and series a point's attributes name, the series made if new (kept
        once its first point reads: `_keep`); no series for a point of a series past the
        limit, which is counted here."""
        attributes = decode_attributes(point.get("attributes"))
        key = (source, *sorted((name, shown_text(value)) for name, value in attributes.items()))
        series = chart.series.get(key)
        if series is None:
            if len(chart.series) >= MAX_SERIES:
                self._count(chart, time_ns, time_ns, 1)
                chart.hidden_points += 1
                if len(chart.hidden) < _MAX_HIDDEN_KEYS:
                    chart.hidden.add(hash(key))
                return key, None
            series = Series(source, shown_attributes(attributes), chart.columns())
        return key, series

    def _count(self, chart: Chart | None, first_ns: int, last_ns: int, points: int) -> None:
        """Count points that were read (and only those), from `first_ns` to `last_ns`."""
        self.points += points
        if chart is not None:
            chart.points += points
        if self.first_ns is None or first_ns < self.first_ns:
            self.first_ns = first_ns
        if self.last_ns is None or last_ns > self.last_ns:
            self.last_ns = last_ns

    def drawn(self, source_labels: list[str]) -> list[dict[str, Any]]:
        """Every chart as the page draws it, the page's point budget shared out."""
        total_series = sum(len(chart.series) for chart in self.charts.values())
        limit = max(MIN_DRAWN, min(MAX_DRAWN, PAGE_POINTS // max(total_series, 1)))
        sources_shown = len({key[0] for chart in self.charts.values() for key in chart.series}) > 1
        drawn = []
        for chart in sorted(self.charts.values(), key=lambda chart: (chart.name, chart.kind)):
            series = [
                {**one.drawn(limit), "label": _label(chart, one, source_labels, sources_shown)}
                for one in chart.series.values()
            ]
            entry: dict[str, Any] = {
                "name": chart.name,
                "kind": chart.kind,
                "unit": chart.unit,
                "description": chart.description,
                "temporality": "delta" if chart.temporality == _DELTA else "cumulative",
                "points": chart.points,
                "series": series,
                "hiddenSeries": len(chart.hidden),
                "hiddenPoints": chart.hidden_points,
                "decimated": any(len(one["t"]) < one["points"] for one in series),
            }
            if chart.kind == "histogram":
                entry["distribution"] = [
                    _distribution(drawn_series["label"], one.buckets())
                    for drawn_series, one in zip(series, chart.series.values(), strict=True)
                ]
            drawn.append(entry)
        return drawn


def _distribution(label: str, buckets: dict[float, int]) -> dict[str, Any]:
    """Everything a histogram series recorded up to its last point, bucket by bucket."""
    bounds = sorted(buckets)
    return {
        "label": label,
        "bounds": [bound for bound in bounds if bound != math.inf],
        "counts": [buckets[bound] for bound in bounds],
    }


def _keep(chart: Chart, key: tuple[Any, ...], series: Series, text: bytes | None) -> None:
    """Keep a series whose point read, and remember it by its attributes as written."""
    chart.series.setdefault(key, series)
    known = chart.known.setdefault(series.source, {})
    if text is None or text in known or len(text) > _MAX_KNOWN_TEXT:
        return
    if chart.known_texts < _MAX_KNOWN:
        known[text] = chart.series[key]
        chart.known_texts += 1


def _kind(data_field: str, data: dict[str, Any]) -> str:
    if data_field == "sum":
        return "counter" if data.get("isMonotonic") else "updown"
    if data_field in ("histogram", "exponentialHistogram"):
        return "histogram"
    return data_field


def _label(chart: Chart, series: Series, source_labels: list[str], sources_shown: bool) -> str:
    parts = [f"{key}={value}" for key, value in series.attributes.items()]
    if sources_shown or not parts:
        parts.insert(0, source_labels[series.source] if sources_shown else chart.name)
    return ", ".join(parts)


def _seconds(later_ns: int, earlier_ns: int) -> float:
    return (later_ns - earlier_ns) / 1e9


def _value_row(
    series: Series, temporality: int, start_ns: int, time_ns: int, point: dict[str, Any]
) -> tuple[float]:
    """The value of a gauge point."""
    return (point_value(point),)


def _updown_row(
    series: Series, temporality: int, start_ns: int, time_ns: int, point: dict[str, Any]
) -> tuple[float]:
    """An up-down sum's level: a delta point's value is added to the running level."""
    if temporality != _DELTA:
        return (point_value(point),)
    series.running += point_value(point)
    return (series.running,)


def _counter_row(
    series: Series, temporality: int, start_ns: int, time_ns: int, point: dict[str, Any]
) -> tuple[float, float]:
    """(rate per second, running total) of one counter point."""
    value = point_value(point)
    if temporality == _DELTA:
        series.running += value
        rate = value / _seconds(time_ns, start_ns) if time_ns > start_ns else math.nan
        return rate, series.running
    if start_ns == series.last_start and time_ns > series.last_time:
        rate = (value - series.last_value) / _seconds(time_ns, series.last_time)
    else:
        # The first point of a (re)started series: its start time need not be when counting
        # began (lens's coalesced series start at their first collection), so, like
        # Prometheus's rate(), wait for a second point.
        rate = math.nan
    series.last_value = value
    return rate, value


def _explicit_row(
    series: Series, temporality: int, start_ns: int, time_ns: int, point: dict[str, Any]
) -> tuple[float, float, float]:
    """(p99, p90, p50) of an explicit-bucket histogram point."""
    written = point.get("explicitBounds")
    bounds = _numbers(written, float)
    counts = _numbers(point.get("bucketCounts"), int)
    if not counts:
        counts = [integer(point.get("count", 0))]
        bounds = []
    if len(counts) != len(bounds) + 1:
        raise Malformed("bucketCounts does not match explicitBounds")
    # Bounds equal to the last of this series that passed pass again (nearly every point).
    if written != series.checked_bounds:
        if len(counts) > MAX_BUCKETS or not all(map(math.isfinite, bounds)):
            raise Malformed("more buckets than a report draws, or a bound that is not finite")
        if not all(map(operator.lt, bounds, bounds[1:])):
            raise Malformed("explicitBounds do not increase")
        series.checked_bounds = written if bounds else None
    if min(counts) < 0:
        raise Malformed("a negative bucket count")
    return _histogram_row(series, temporality, start_ns, point, bounds, counts)


def _exponential_row(
    series: Series, temporality: int, start_ns: int, time_ns: int, point: dict[str, Any]
) -> tuple[float, float, float]:
    bounds, counts = _exponential_buckets(point)
    return _histogram_row(series, temporality, start_ns, point, bounds, counts)


def _histogram_row(
    series: Series,
    temporality: int,
    start_ns: int,
    point: dict[str, Any],
    bounds: list[float],
    counts: list[int],
) -> tuple[float, float, float]:
    """(p99, p90, p50) of what one histogram point added; keeps the running buckets."""
    keys = [*bounds, math.inf]
    low = _finite_or_none(point.get("min"))
    high = _finite_or_none(point.get("max"))
    # The usual point has the layout of the one before: its buckets line up list to list.
    same_layout = keys == series.bucket_bounds
    if temporality == _DELTA:
        interval = counts
        if same_layout:
            series.bucket_counts = list(map(operator.add, series.bucket_counts, counts))
        else:
            held = series.buckets()
            for bound, count in dict(zip(keys, counts, strict=True)).items():
                held[bound] = held.get(bound, 0) + count
            series.bucket_bounds, series.bucket_counts = list(held), list(held.values())
    else:
        held_counts = series.bucket_counts
        if same_layout:
            # The same run (start time) whose every held bucket is still there, no smaller
            # (where all are no smaller, so are those that held something).
            same_run = start_ns == series.last_start and (
                all(map(operator.ge, counts, held_counts))
                or all(count >= was for count, was in zip(counts, held_counts, strict=True) if was)
            )
            interval = list(map(operator.sub, counts, held_counts)) if same_run else counts
            series.bucket_bounds, series.bucket_counts = keys, counts
        else:
            held = series.buckets()
            by_bound = dict(zip(keys, counts, strict=True))
            same_run = start_ns == series.last_start and all(
                by_bound.get(bound, -1) >= count for bound, count in held.items() if count
            )
            if same_run:
                interval = [count - held.get(bound, 0) for bound, count in by_bound.items()]
            else:
                interval = counts
            series.bucket_bounds, series.bucket_counts = list(by_bound), list(by_bound.values())
        if same_run:
            low = high = None  # the point's min and max are the run's, not the interval's
    p99, p90, p50 = _quantiles.quantiles(_quantiles.DRAWN, bounds, interval, low, high)
    return p99, p90, p50


def _finite_or_none(value: Any) -> float | None:
    if value is None:
        return None
    found = value if type(value) is float else number(value)
    return found if math.isfinite(found) else None


def _exponential_buckets(point: dict[str, Any]) -> tuple[list[float], list[int]]:
    def side(name: str) -> tuple[int, list[int]]:
        held = point.get(name)
        if not isinstance(held, dict):
            return 0, []
        counts = _numbers(held.get("bucketCounts"), int)
        if len(counts) > MAX_BUCKETS or any(count < 0 for count in counts):
            raise Malformed("more buckets than a report draws, or a negative count")
        return integer(held.get("offset", 0)), counts

    scale = integer(point.get("scale", 0))
    if not _quantiles.MIN_SCALE <= scale <= _quantiles.MAX_SCALE:
        raise Malformed(f"an exponential histogram's scale {scale} is out of range")
    threshold = _finite_or_none(point.get("zeroThreshold")) or 0.0
    try:
        return _quantiles.exponential_buckets(
            scale, integer(point.get("zeroCount", 0)), side("positive"), side("negative"), threshold
        )
    except OverflowError as exc:  # an offset that puts a bound past any float
        raise Malformed("an exponential histogram's buckets overflow a float") from exc


def _summary_row(
    series: Series, temporality: int, start_ns: int, time_ns: int, point: dict[str, Any]
) -> tuple[float, float, float]:
    found = {}
    for entry in _sequence(point.get("quantileValues")):
        if isinstance(entry, dict):
            found[round(number(entry.get("quantile", 0)), 4)] = number(entry.get("value", 0))
    return found.get(0.99, math.nan), found.get(0.9, math.nan), found.get(0.5, math.nan)


def _sequence(value: Any) -> list[Any]:
    """A JSON list field; anything else (a string, a number) reads as empty."""
    return value if isinstance(value, list) else []


def _numbers(items: Any, kind: type[_N]) -> list[_N]:
    """A list of int64 strings or doubles, converted in one go (a histogram point's 16 or
    more buckets are most of what a large file holds); anything else reads as empty."""
    if not isinstance(items, list):
        return []
    try:
        return list(map(kind, items))
    except (TypeError, ValueError, OverflowError) as exc:
        raise Malformed(f"a bucket list holds what is not a number: {exc}") from exc


#: How a point of each kind (a histogram: of each data field) becomes its row of values.
_ROWS: Final[dict[str, Callable[[Series, int, int, int, dict[str, Any]], tuple[float, ...]]]] = {
    "gauge": _value_row,
    "updown": _updown_row,
    "counter": _counter_row,
    "histogram": _explicit_row,
    "exponentialHistogram": _exponential_row,
    "summary": _summary_row,
}
