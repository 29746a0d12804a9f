"""Coalesced histograms (issue 26): a series' interval is kept as bucket counts, sum, min
and max, and handed into the SDK's aggregation at the flush, exporting what recording
each value would have exported; where the SDK aggregates otherwise, values stay direct."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.metrics")

from lens_exact import exact
from lens_meters import sdk_forgets_delta_series
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation
from opentelemetry.sdk.resources import Resource

from nemo.lens import MetricSpec, record_metrics, register_metric_group
from nemo.lens import _otel_internals as internals
from nemo.lens._process import BuiltHere
from nemo.lens._sdk import _coalescing
from nemo.lens._sdk._views import histogram_views
from nemo.lens.instruments import _coalesce
from nemo.lens.testing import isolated_telemetry

GROUP = "histograms"
SPECS = [
    MetricSpec("ms", "hist.ms", "histogram", unit="ms", buckets=[1.0, 10.0, 100.0]),
    MetricSpec("default", "hist.default", "histogram"),
]


@pytest.fixture(autouse=True)
def _isolated() -> Iterator[None]:
    with isolated_telemetry():
        register_metric_group(GROUP, SPECS)
        yield


def build(coalesced: bool, **reader_options: Any) -> tuple[MeterProvider, Any, Any]:
    reader = InMemoryMetricReader(**reader_options)
    provider = MeterProvider(
        metric_readers=[reader],
        resource=Resource.get_empty(),
        shutdown_on_exit=False,
        views=histogram_views(),  # the specs' buckets, as lens's pipeline gives them
    )
    if coalesced:
        assert _coalescing.coalesce_recording(provider, [reader], BuiltHere()) is not None
    return provider, provider.get_meter("nemo.lens.histograms"), reader


def histogram_points(reader: Any) -> dict[tuple[str, tuple[Any, ...]], tuple[Any, ...]]:
    """Collect; (metric, attributes) -> count, sum, buckets, bounds, min and max, exactly."""
    data = reader.get_metrics_data()
    points: dict[tuple[str, tuple[Any, ...]], tuple[Any, ...]] = {}
    for resource_metrics in data.resource_metrics if data else []:
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    key = (metric.name, tuple(sorted(point.attributes.items())))
                    points[key] = (
                        point.count,
                        exact(point.sum),
                        tuple(point.bucket_counts),
                        tuple(point.explicit_bounds),
                        exact(point.min),
                        exact(point.max),
                    )
    return points


def buffered_histogram_values(meter: Any) -> int:
    """How many histogram values the meter's buffer holds as bucket counts right now."""
    buffer = _coalesce.buffer_for(meter)
    assert buffer is not None
    return sum(
        sum(entry[0])
        for pending, entry in buffer.buffered_entries()
        if pending.histogram and isinstance(entry[0], list)
    )


SPLIT_SUM_DIFFERS = (
    0.2182828277770933,
    0.4324129599046336,
    0.35937717798142654,
    0.2875601526248024,
)
Calls = list[tuple[dict[str, Any], dict[str, object] | None]]
# A new series whose sum, its least value taken out and added back, differs in the last
# bit: the hand-over must not split the sum.
SPLIT_SUM_SERIES: Calls = [({"ms": value}, {"rank": 4}) for value in SPLIT_SUM_DIFFERS]
INTERVALS: list[Calls] = [
    # The first interval goes to the SDK directly: lens learns the boundaries from it.
    [({"ms": 0.5, "default": 3}, None), ({"ms": 5.0}, None)],
    # Floats whose sum depends on the order they are added in; -0.0; ints; a new series.
    [
        ({"ms": 0.1, "default": 7}, None),
        ({"ms": 0.2, "default": 1}, None),
        ({"ms": 0.3, "default": 2500}, None),
        ({"ms": -0.0}, {"rank": 1}),
        ({"ms": 0.0}, {"rank": 1}),
        ({"ms": 1e308}, {"rank": 2}),
        ({"ms": 1e308}, {"rank": 2}),
        ({"ms": 10.0}, {"rank": 3}),
        *SPLIT_SUM_SERIES,
    ],
    [],
    [({"ms": 1000.0, "default": 0}, None), ({"ms": 100.0, "default": 4}, None)],
]


@pytest.mark.parametrize("temporality", ["cumulative", "delta"])
def test_a_buffered_histogram_exports_what_recording_each_value_exports(temporality: str) -> None:
    """From its second interval a histogram's values are buffered as bucket counts, and
    every collection holds exactly the points direct recording gives: counts, buckets,
    bounds, min, max and the sum's bits (added in the same order), new series included."""
    options: dict[str, Any] = (
        {"preferred_temporality": {Histogram: AggregationTemporality.DELTA}}
        if temporality == "delta"
        else {}
    )
    direct_provider, direct_meter, direct_reader = build(False, **options)
    lens_provider, lens_meter, lens_reader = build(True, **options)
    buffered: list[int] = []
    try:
        for interval in INTERVALS:
            for values, attributes in interval:
                record_metrics(direct_meter, GROUP, values, attributes=attributes)
                record_metrics(lens_meter, GROUP, values, attributes=attributes)
            buffered.append(buffered_histogram_values(lens_meter))
            assert histogram_points(lens_reader) == histogram_points(direct_reader)
    finally:
        direct_provider.shutdown()
        lens_provider.shutdown()
    # Series the SDK holds are buffered as bucket counts; a new one's values go to the
    # SDK at once for its first interval (ranks 1-4 in interval 2).
    # Where the SDK forgets delta series, only the last interval's count as held: the
    # empty third one leaves none.
    forgotten = temporality == "delta" and sdk_forgets_delta_series()
    assert buffered == [0, 6, 0, 0 if forgotten else 4]


def test_a_series_holds_its_bucket_counts_however_many_values_it_gets() -> None:
    """Memory per series is bounded: 10,000 values of one series are one entry of 4
    counts until the flush, which hands all of them over."""
    provider, meter, reader = build(True)
    try:
        record_metrics(meter, GROUP, ms=1.0)
        reader.get_metrics_data()
        for step in range(10_000):
            record_metrics(meter, GROUP, ms=float(step % 200))
        buffer = _coalesce.buffer_for(meter)
        assert buffer is not None
        entries = [entry for pending, entry in buffer.buffered_entries() if pending.histogram]
        assert len(entries) == 1
        assert len(entries[0][0]) == 4
        assert sum(entries[0][0]) == 10_000
        ((count, *_),) = histogram_points(reader).values()
        assert count == 10_001
    finally:
        provider.shutdown()


def test_a_histogram_the_sdk_aggregates_otherwise_stays_direct() -> None:
    """A reader asking for exponential histograms (of a histogram no view gives buckets):
    lens never buckets those values."""
    options = {"preferred_aggregation": {Histogram: ExponentialBucketHistogramAggregation()}}
    direct_provider, direct_meter, direct_reader = build(False, **options)
    lens_provider, lens_meter, lens_reader = build(True, **options)
    try:
        for _interval in range(3):
            for value in (0.5, 5.0, 50.0):
                record_metrics(direct_meter, GROUP, default=value)
                record_metrics(lens_meter, GROUP, default=value)
            assert buffered_histogram_values(lens_meter) == 0
            direct_data = direct_reader.get_metrics_data()
            lens_data = lens_reader.get_metrics_data()
            [direct_point] = (
                direct_data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
            )
            [lens_point] = (
                lens_data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
            )
            assert (lens_point.count, lens_point.sum, lens_point.positive.bucket_counts) == (
                direct_point.count,
                direct_point.sum,
                direct_point.positive.bucket_counts,
            )
    finally:
        direct_provider.shutdown()
        lens_provider.shutdown()


def test_a_histogram_whose_every_value_is_an_exemplar_candidate_stays_direct() -> None:
    """Under the always-on exemplar filter each value must reach the SDK to be sampled."""
    try:
        from opentelemetry.sdk.metrics import AlwaysOnExemplarFilter
    except ImportError:
        pytest.skip("this SDK release samples no exemplars")
    reader = InMemoryMetricReader()
    provider = MeterProvider(
        metric_readers=[reader],
        resource=Resource.get_empty(),
        shutdown_on_exit=False,
        exemplar_filter=AlwaysOnExemplarFilter(),
    )
    assert _coalescing.coalesce_recording(provider, [reader], BuiltHere()) is not None
    meter = provider.get_meter("nemo.lens.histograms")
    try:
        for _interval in range(3):
            for value in (0.5, 5.0, 50.0):
                record_metrics(meter, GROUP, ms=value)
            assert buffered_histogram_values(meter) == 0
            data = reader.get_metrics_data()
            assert data is not None
            [point] = data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
            assert {exemplar.value for exemplar in point.exemplars} >= {0.5, 5.0, 50.0}
    finally:
        provider.shutdown()


def test_a_value_recorded_beside_the_buffer_joins_the_interval() -> None:
    """The same SDK histogram recorded directly (not through record_metrics) in an
    interval the buffer also holds values of: the point counts every value once."""
    provider, meter, reader = build(True)
    try:
        record_metrics(meter, GROUP, ms=1)
        reader.get_metrics_data()
        for value in (2, 3, 40):
            record_metrics(meter, GROUP, ms=value)
        meter.create_histogram("hist.ms", unit="ms").record(500)
        (point,) = histogram_points(reader).values()
        assert point == (
            5,
            ("int", 546),
            (1, 2, 1, 1),
            (1.0, 10.0, 100.0),
            ("int", 1),
            ("int", 500),
        )
    finally:
        provider.shutdown()


def test_an_interval_handed_into_an_aggregation_another_value_reached_adds_the_rest() -> None:
    """`add_histogram_interval`: the caller recorded one value to make the series, and a
    second value reached it meanwhile; the interval's other values are added to both."""
    provider, meter, reader = build(False)
    try:
        histogram = meter.create_histogram("hist.ms", unit="ms")
        histogram.record(5)  # the caller's value
        histogram.record(50)  # another one, meanwhile
        match = internals.series_match(histogram, "histogram")
        assert match is not None
        bounds = match.boundaries  # the SDK's default ones: no view, no advisory
        assert bounds is not None
        aggregation = match.find(match.aggregations(), None)
        # The interval the caller held: 5 (recorded), 0 and 2000.
        counts = [0] * (len(bounds) + 1)
        for value in (5, 0, 2000):
            counts[bisect.bisect_left(bounds, value)] += 1
        internals.add_histogram_interval(aggregation, counts, 2005, 0, 2000, recorded=5)
        (point,) = histogram_points(reader).values()
        expected = [0] * (len(bounds) + 1)
        for value in (5, 50, 0, 2000):
            expected[bisect.bisect_left(bounds, value)] += 1
        assert point == (4, ("int", 2055), tuple(expected), bounds, ("int", 0), ("int", 2000))
    finally:
        provider.shutdown()


def test_a_histograms_int_reaching_the_sdk_at_once_stays_an_int() -> None:
    """A histogram has no int64 guard (the SDK keeps no int sum of it that OTLP carries
    as an int): its ints that reach the SDK at once, under attributes no series key
    holds, are never turned into floats, as a sum's are past int64."""
    recorded: list[object] = []

    class Histogram:
        def record(self, value: float, attributes: object = None) -> None:
            recorded.append(value)

    buffer = _coalesce.CoalescingBuffer(single_reader=True)
    keep = buffer.instrument(Histogram(), "record", "histogram").keep
    for _ in range(3):
        keep(2**62, {"ids": [1, 2]})
    assert recorded == [2**62] * 3
    assert [type(value) for value in recorded] == [int, int, int]
