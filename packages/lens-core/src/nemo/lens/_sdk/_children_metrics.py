"""Forked children's series in every collection of their parent's pipeline.

At each collection of a lens pipeline's reader, the series the pipeline's forked children
recorded (`nemo.lens._forked_children`) join what the SDK collected, as if the
parent had recorded them: a counter's or up-down counter's point adds the children's sums,
a histogram's point adds their counts, sums and bucket counts and takes the smallest min
and largest max, a gauge's point combines the values by the spec's `multiprocess` mode.
A series or instrument only children recorded gets a point (and a metric) of its own.
Every reader sees the result, the Prometheus endpoint's included.

Under delta temporality each point carries what the children added since this reader's
previous collection; a histogram's min and max there are the children's over their life
so far (a child keeps no per-interval extremes). A gauge the parent sets too: in `"last"`
mode the parent's value wins in a collection in which it changed, and otherwise the most
recently set child value does.

Nothing here raises into the reader: a failure leaves the SDK's own data as it was, with
one warning.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricReader,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from nemo.lens import _forked_children, _otel_internals
from nemo.lens._forked_children import SeriesId, SeriesTotal, combine_gauges
from nemo.lens._shared_region import REGION_BYTES
from nemo.lens._warn_once import WarnOnce
from nemo.lens.instruments._series import typed_series_key

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "nemo.lens forked children's metrics")

Scope = tuple[str, str | None, str | None]


def merge_children(
    reader: MetricReader,
    meter_provider: object,
    resource: Resource,
    on_shutdown: list[Callable[[], None]],
) -> bool:
    """Make each collection of `reader` (the one reader of `meter_provider`, which lens's
    pipeline built) add the series of the children forked from this process from now on;
    their regions are released by the step this appends to `on_shutdown`.

    Wraps the collection callback as the fork gate does, after it (a child's collection,
    which the gate empties, has nothing to merge). False, leaving the reader as it was,
    where the SDK gives no callback or the provider no measurement consumer.
    """
    original = _otel_internals.collect_callback(reader)
    consumer = _otel_internals.provider_consumer(meter_provider)
    if original is None or consumer is None:
        _logger.warning(
            "this OpenTelemetry SDK lets lens not add forked children's series to the "
            "collections of %s; metrics recorded in forked children are not exported",
            type(reader).__name__,
        )
        return False
    token = _forked_children.accept_children(consumer)
    merge = ChildrenMerge(token, reader, resource)

    def collect_with_children(*args: Any, **kwargs: Any) -> Any:
        collected = original(*args, **kwargs)
        if collected is not None and not isinstance(collected, MetricsData):
            return collected
        return merge(collected)

    _otel_internals.replace_collect_callback(reader, collect_with_children)
    on_shutdown.append(lambda: _forked_children.stop_accepting(token))
    return True


class ChildrenMerge:
    """Adds pipeline `token`'s children's series to each collection of `reader`.

    Args:
        token: The pipeline's token (`_forked_children.accept_children`).
        reader: The reader whose collections this merges into (its temporality counts).
        resource: The pipeline's resource, for a collection that held nothing else.
    """

    def __init__(self, token: int, reader: MetricReader, resource: Resource) -> None:
        self._token = token
        self._delta_kinds = _otel_internals.delta_kinds(reader)
        self._resource = resource
        self._started_ns = time.time_ns()
        self._previous_ns = self._started_ns
        # Delta: each series' updates and values at this reader's previous report.
        self._reported: dict[SeriesId, tuple[int, tuple[Any, ...]]] = {}
        # The parent's own gauge values at the previous collection ("last" mode).
        self._parent_gauges: dict[tuple[Scope, str, frozenset[Any]], object] = {}
        # Series children dropped (their region was full) before this pipeline's last look.
        self._dropped_seen = _forked_children.dropped_series()
        # Instruments whose children's series did not fit the SDK's, to warn about.
        self._unmergeable: list[tuple[str, str]] = []
        # One collection of this reader at a time (a scrape may meet a shutdown's).
        self._lock = threading.Lock()

    def __call__(self, data: MetricsData | None) -> MetricsData | None:
        """`data` with the children's series added; `data` itself when there are none."""
        if _forked_children.never_had_children():  # the common case, in one look
            with self._lock:
                self._previous_ns = time.time_ns()  # a first child's delta starts here
            return data
        try:
            # Read and merged under one lock: a collection that read older totals must not
            # report after a newer one (its delta would be negative).
            with self._lock:
                totals = _forked_children.collect(self._token)
                now = time.time_ns()
                merged = data
                try:
                    if totals:
                        merged = self._merged(data, totals, now)
                finally:
                    self._previous_ns = now
                    unmergeable, self._unmergeable = self._unmergeable, []
            self._warn(unmergeable)  # outside the lock: a logging handler may record
            return merged
        except Exception as exc:  # never break the reader: the SDK's data still goes out
            _warnings.failure(
                "adding forked children's series to a collection",
                exc,
                "that collection holds this process's own series only",
            )
            return data

    def _warn(self, unmergeable: list[tuple[str, str]]) -> None:
        dropped = _forked_children.dropped_series()
        if dropped > self._dropped_seen:  # new drops since this pipeline began
            self._dropped_seen = dropped
            _warnings.warn(
                "region full",
                "a forked child recorded more series than its shared region holds "
                "(%d bytes); the series beyond it are not exported",
                REGION_BYTES,
            )
        for name in _forked_children.conflicting_instruments():
            unmergeable.append(("histogram", name))
        for kind, name in unmergeable:
            _warnings.warn(
                ("shape", name),
                "the forked children's values of %s %r were not exported: this process's "
                "pipeline, or another child, aggregates that instrument differently (a "
                "view, or other bucket boundaries)",
                kind,
                name,
            )

    def _merged(
        self, data: MetricsData | None, totals: dict[SeriesId, SeriesTotal], now: int
    ) -> MetricsData | None:
        by_metric: dict[tuple[Scope, str], list[tuple[SeriesId, SeriesTotal]]] = {}
        for series_id, total in totals.items():
            by_metric.setdefault((total.meta.scope, total.meta.name), []).append((series_id, total))
        if data is not None and data.resource_metrics:
            resource_metrics = data.resource_metrics[0]
            rest = list(data.resource_metrics[1:])
        else:
            resource_metrics = ResourceMetrics(
                resource=self._resource, scope_metrics=[], schema_url=""
            )
            rest = []
        scopes = list(resource_metrics.scope_metrics)
        added_any = False
        for (scope, name), series in by_metric.items():
            position = next(
                (
                    at
                    for at, scope_metrics in enumerate(scopes)
                    if _scope(scope_metrics) == _same_scope(scope)
                ),
                None,
            )
            if position is None:
                scopes.append(
                    ScopeMetrics(
                        scope=InstrumentationScope(*scope), metrics=[], schema_url=scope[2] or ""
                    )
                )
                position = len(scopes) - 1
            metrics = list(scopes[position].metrics)
            at = next((i for i, metric in enumerate(metrics) if metric.name == name), None)
            merged = self._merged_metric(None if at is None else metrics[at], series, now)
            if merged is None:
                continue
            added_any = True
            if at is None:
                metrics.append(merged)
            else:
                metrics[at] = merged
            scopes[position] = dataclasses.replace(scopes[position], metrics=metrics)
        if not added_any:
            return data
        scopes = [scope_metrics for scope_metrics in scopes if scope_metrics.metrics]
        resource_metrics = dataclasses.replace(resource_metrics, scope_metrics=scopes)
        return MetricsData(resource_metrics=[resource_metrics, *rest])

    def _merged_metric(
        self,
        metric: Metric | None,
        series: list[tuple[SeriesId, SeriesTotal]],
        now: int,
    ) -> Metric | None:
        meta = series[0][1].meta
        kind = meta.kind
        delta = kind in self._delta_kinds and kind != "gauge"
        if metric is not None and not _same_shape(metric, kind, meta.bounds):
            self._unmergeable.append((kind, meta.name))
            return None
        points: list[Any] = list(metric.data.data_points) if metric is not None else []
        index = {
            typed_series_key(dict(point.attributes or {})): at for at, point in enumerate(points)
        }
        start = self._previous_ns if delta else self._started_ns
        bounds = list(meta.bounds or ())  # one list for every new point: none changes it
        changed = False
        for series_id, total in series:
            values = self._delta_contribution(series_id, total) if delta else total.values
            if values is None:
                continue
            changed = True
            key = series_id[4]
            at = index.get(key)
            if at is None:
                index[key] = len(points)
                points.append(_new_point(kind, total.attributes, values, bounds, start, now))
            else:
                points[at] = self._combined_point(kind, total, values, points[at])
        if not changed:
            return None
        if metric is not None:
            collected: Any = metric.data  # one of the SDK's point containers, as checked
            return dataclasses.replace(
                metric, data=dataclasses.replace(collected, data_points=points)
            )
        temporality = AggregationTemporality.DELTA if delta else AggregationTemporality.CUMULATIVE
        data: Any
        if kind == "gauge":
            data = Gauge(data_points=points)
        elif kind == "histogram":
            data = Histogram(data_points=points, aggregation_temporality=temporality)
        else:
            data = Sum(
                data_points=points,
                aggregation_temporality=temporality,
                is_monotonic=kind == "counter",
            )
        return Metric(name=meta.name, description=meta.description, unit=meta.unit, data=data)

    def _delta_contribution(
        self, series_id: SeriesId, total: SeriesTotal
    ) -> tuple[Any, ...] | None:
        """What the children added to the series since this reader's previous report
        (delta temporality); None for nothing new."""
        reported = self._reported.get(series_id)
        self._reported[series_id] = (total.updates, total.values)
        if reported is None:
            return total.values
        updates, before = reported
        if total.updates == updates:
            return None
        if total.meta.kind == "histogram":
            count, summed, low, high, buckets = total.values
            return (
                count - before[0],
                summed - before[1],
                low,
                high,
                tuple(now - then for now, then in zip(buckets, before[4], strict=True)),
            )
        return (total.values[0] - before[0],)

    def _combined_point(
        self, kind: str, total: SeriesTotal, values: tuple[Any, ...], own: Any
    ) -> Any:
        """The parent's own point `own` with the children's `values` added in."""
        if kind == "histogram":
            count, summed, low, high, buckets = values
            return dataclasses.replace(
                own,
                count=own.count + count,
                sum=own.sum + summed,
                min=min(own.min, low),
                max=max(own.max, high),
                bucket_counts=[a + b for a, b in zip(own.bucket_counts, buckets, strict=True)],
            )
        if kind == "gauge":
            return dataclasses.replace(own, value=self._gauge_value(total, values, own))
        return dataclasses.replace(own, value=own.value + values[0])

    def _gauge_value(self, total: SeriesTotal, values: tuple[Any, ...], own: Any) -> Any:
        mode = total.meta.gauge_mode or "last"
        child_value, child_set_at = values
        key = (total.meta.scope, total.meta.name, typed_series_key(total.attributes))
        previous = self._parent_gauges.get(key, _NOTHING)
        self._parent_gauges[key] = own.value
        if mode == "last":
            return own.value if own.value != previous else child_value
        combined, _ = combine_gauges(mode, [(own.value, 0), (child_value, child_set_at)])
        return combined


def _new_point(
    kind: str,
    attributes: dict[str, Any],
    values: tuple[Any, ...],
    bounds: list[float],
    start: int,
    now: int,
) -> Any:
    """A point of a series only the children recorded."""
    if kind == "histogram":
        count, summed, low, high, buckets = values
        return HistogramDataPoint(
            attributes=attributes,
            start_time_unix_nano=start,
            time_unix_nano=now,
            count=count,
            sum=summed,
            bucket_counts=list(buckets),
            explicit_bounds=bounds,
            min=low,
            max=high,
        )
    return NumberDataPoint(
        attributes=attributes,
        start_time_unix_nano=start,
        time_unix_nano=now,
        value=values[0],
    )


_NOTHING = object()


def _scope(scope_metrics: ScopeMetrics) -> Scope:
    scope = scope_metrics.scope
    return _same_scope((scope.name, scope.version, scope.schema_url))


def _same_scope(scope: Scope) -> Scope:
    """`scope` as compared: a missing version or schema URL is None, whether a meter or
    the SDK's `InstrumentationScope` (which keeps "" for a missing schema URL) holds it."""
    name, version, schema_url = scope
    return (name, version or None, schema_url or None)


def _same_shape(metric: Metric, kind: str, bounds: Sequence[float] | None) -> bool:
    """True when `metric` (as the SDK collected it) aggregates as a child's series of
    `kind` does, so their points can be added."""
    data = metric.data
    if kind == "histogram":
        if type(data) is not Histogram:
            return False
        return all(list(point.explicit_bounds) == list(bounds or ()) for point in data.data_points)
    if kind == "gauge":
        return type(data) is Gauge
    return type(data) is Sum
