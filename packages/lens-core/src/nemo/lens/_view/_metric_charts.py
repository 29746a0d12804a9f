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
from array import array
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

_TEMPORALITY: Final = {
    "AGGREGATION_TEMPORALITY_UNSPECIFIED": 0,
    "AGGREGATION_TEMPORALITY_DELTA": 1,
    "AGGREGATION_TEMPORALITY_CUMULATIVE": 2,
}
_DELTA: Final = 1
# OTLP's data field of each metric type, and the kind the page draws it as.
_DATA_FIELDS: Final = ("gauge", "sum", "histogram", "exponentialHistogram", "summary")


@dataclass
class Series:
    """One attribute set of one metric from one source, and its points."""

    source: int
    attributes: dict[str, str]
    #: Names of the value arrays beside `times`; the first one decides decimation.
    columns: tuple[str, ...]
    points: int = 0
    times: array[float] = field(default_factory=lambda: array("d"))
    values: dict[str, array[float]] = field(default_factory=dict)
    # Running state: the previous point's start, time and value (cumulative points are
    # compared with it), the running total of a delta counter, the bucket counts.
    last_start: int = -1
    last_time: int = -1
    last_value: float = 0.0
    running: float = 0.0
    #: A histogram's counts by each bucket's upper bound (math.inf for the last): points
    #: whose layouts differ (an exponential histogram that grew) still line up.
    buckets: dict[float, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.values = {column: array("d") for column in self.columns}

    def append(self, time_ns: int, row: tuple[float, ...]) -> None:
        self.points += 1
        self.times.append(time_ns / 1e6)
        for column, value in zip(self.columns, row, strict=True):
            self.values[column].append(value)
        if len(self.times) >= COMPACT_AT:
            self.decimate(COMPACT_AT // 4)

    def decimate(self, runs: int) -> None:
        self._keep(_decimate.kept_indices(self.times, self.values[self.columns[0]], runs))

    def _keep(self, indices: list[int]) -> None:
        """Keep only the points at `indices`, in that order, in every array."""
        self.times = array("d", (self.times[index] for index in indices))
        for column in self.columns:
            held = self.values[column]
            self.values[column] = array("d", (held[index] for index in indices))

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
        for column in self.columns:
            # JSON has no NaN or Infinity: a value that is not finite is a gap.
            out[column] = [value if math.isfinite(value) else None for value in self.values[column]]
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
        self.first_ns: int | None = None
        self.last_ns: int | None = None

    def add(self, source: int, metric: dict[str, Any]) -> int:
        """Take one OTLP metric of `source`; returns how many of its points were skipped."""
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
        chart = self._chart(name, kind, metric, data)
        # Per request, not per chart: two files may export one metric differently.
        temporality = enum(data.get("aggregationTemporality"), _TEMPORALITY)
        skipped = 0
        for point in _sequence(data.get("dataPoints")):
            if not isinstance(point, dict):
                skipped += 1
                continue
            try:
                self._add_point(chart, source, data_field, temporality, point)
            except (Malformed, TypeError, ValueError, ArithmeticError):
                skipped += 1
        return skipped

    def _chart(self, name: str, kind: str, metric: dict[str, Any], data: dict[str, Any]) -> Chart:
        key = (name, kind)
        chart = self.charts.get(key)
        if chart is None:
            chart = Chart(
                name=name,
                kind=kind,
                unit=shown_text(metric.get("unit") or ""),
                description=shown_text(metric.get("description") or ""),
                temporality=enum(data.get("aggregationTemporality"), _TEMPORALITY),
            )
            if len(self.charts) < MAX_CHARTS:
                self.charts[key] = chart
        return chart

    def _add_point(
        self, chart: Chart, source: int, data_field: str, temporality: int, point: dict[str, Any]
    ) -> None:
        time_ns = nanos(point, "timeUnixNano")
        if (chart.name, chart.kind) not in self.charts:
            self._count(chart, time_ns)
            if chart.name in self.uncharted or len(self.uncharted) < MAX_UNCHARTED:
                self.uncharted[chart.name] = self.uncharted.get(chart.name, 0) + 1
            return
        attributes = decode_attributes(point.get("attributes"))
        key = (source, *sorted((name, shown_text(value)) for name, value in attributes.items()))
        series = chart.series.get(key)
        if series is None:
            if len(chart.series) >= MAX_SERIES:
                self._count(chart, time_ns)
                chart.hidden_points += 1
                if len(chart.hidden) < _MAX_HIDDEN_KEYS:
                    chart.hidden.add(hash(key))
                return
            # Kept only once its first point reads: a bad point takes no series slot.
            series = Series(source, shown_attributes(attributes), chart.columns())
        start_ns = integer(point.get("startTimeUnixNano", 0))
        row: tuple[float, ...]
        if chart.kind == "counter":
            row = _counter_row(series, temporality, start_ns, time_ns, point_value(point))
        elif chart.kind == "histogram":
            row = _histogram_row(series, temporality, start_ns, data_field, point)
        elif chart.kind == "summary":
            row = _summary_row(point)
        elif chart.kind == "updown" and temporality == _DELTA:
            series.running += point_value(point)  # a delta up-down counter charts its level
            row = (series.running,)
        else:
            row = (point_value(point),)
        series.last_start, series.last_time = start_ns, time_ns
        series.append(time_ns, row)
        chart.series.setdefault(key, series)
        self._count(chart, time_ns)

    def _count(self, chart: Chart, time_ns: int) -> None:
        """Count a point that was read (and only one that was)."""
        self.points += 1
        chart.points += 1
        if self.first_ns is None or time_ns < self.first_ns:
            self.first_ns = time_ns
        if self.last_ns is None or time_ns > self.last_ns:
            self.last_ns = time_ns

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
                    {
                        "label": drawn_series["label"],
                        "bounds": sorted(bound for bound in one.buckets if bound != math.inf),
                        "counts": [one.buckets[bound] for bound in sorted(one.buckets)],
                    }
                    for drawn_series, one in zip(series, chart.series.values(), strict=True)
                ]
            drawn.append(entry)
        return drawn


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


def _counter_row(
    series: Series, temporality: int, start_ns: int, time_ns: int, value: float
) -> tuple[float, float]:
    """(rate per second, running total) of one counter point."""
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


def _histogram_row(
    series: Series, temporality: int, start_ns: int, data_field: str, point: dict[str, Any]
) -> tuple[float, float, float]:
    """(p99, p90, p50) of what one histogram point added; keeps the running buckets."""
    bounds, counts = _buckets(data_field, point)
    by_bound = dict(zip([*bounds, math.inf], counts, strict=True))
    low = _finite_or_none(point.get("min"))
    high = _finite_or_none(point.get("max"))
    held = series.buckets
    if temporality == _DELTA:
        interval = counts
        for bound, count in by_bound.items():
            held[bound] = held.get(bound, 0) + count
    else:
        # The same run (start time) whose every held bucket is still there, no smaller.
        same_run = start_ns == series.last_start and all(
            by_bound.get(bound, -1) >= count for bound, count in held.items() if count
        )
        if same_run:
            interval = [count - held.get(bound, 0) for bound, count in by_bound.items()]
            low = high = None  # the point's min and max are the run's, not the interval's
        else:
            interval = counts
        series.buckets = by_bound
    p99, p90, p50 = (_quantiles.quantile(q, bounds, interval, low, high) for q in (0.99, 0.9, 0.5))
    return p99, p90, p50


def _finite_or_none(value: Any) -> float | None:
    if value is None:
        return None
    found = number(value)
    return found if math.isfinite(found) else None


def _buckets(data_field: str, point: dict[str, Any]) -> tuple[list[float], list[int]]:
    if data_field == "histogram":
        bounds = _numbers(_sequence(point.get("explicitBounds")), float)
        counts = _numbers(_sequence(point.get("bucketCounts")), int)
        if not counts:
            counts = [integer(point.get("count", 0))]
            bounds = []
        if len(counts) != len(bounds) + 1:
            raise Malformed("bucketCounts does not match explicitBounds")
        if len(counts) > MAX_BUCKETS or not all(map(math.isfinite, bounds)):
            raise Malformed("more buckets than a report draws, or a bound that is not finite")
        if any(upper <= lower for lower, upper in itertools.pairwise(bounds)):
            raise Malformed("explicitBounds do not increase")
        if any(count < 0 for count in counts):
            raise Malformed("a negative bucket count")
        return bounds, counts

    def side(name: str) -> tuple[int, list[int]]:
        held = point.get(name)
        if not isinstance(held, dict):
            return 0, []
        counts = _numbers(_sequence(held.get("bucketCounts")), int)
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


def _summary_row(point: dict[str, Any]) -> tuple[float, float, float]:
    found = {}
    for entry in _sequence(point.get("quantileValues")):
        if isinstance(entry, dict):
            found[round(number(entry.get("quantile", 0)), 4)] = number(entry.get("value", 0))
    return found.get(0.99, math.nan), found.get(0.9, math.nan), found.get(0.5, math.nan)


def _sequence(value: Any) -> list[Any]:
    """A JSON list field; anything else (a string, a number) reads as empty."""
    return value if isinstance(value, list) else []


def _numbers(items: list[Any], kind: type[_N]) -> list[_N]:
    """A list of int64 strings or doubles, converted in one go (a histogram point's 16 or
    more buckets are most of what a large file holds)."""
    try:
        return [kind(item) for item in items]
    except (TypeError, ValueError, OverflowError) as exc:
        raise Malformed(f"a bucket list holds what is not a number: {exc}") from exc
