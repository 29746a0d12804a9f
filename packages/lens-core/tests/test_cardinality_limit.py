"""`metric_cardinality_limit`: lens folds new attribute sets past the limit into overflow.

Per instrument, once `limit` distinct attribute sets have been seen, each further new set
is recorded on `{"otel.metric.overflow": True}`; the sets seen before keep their series.
Everything records through the real SDK into an in-memory reader.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from lens_children import run_child
from lens_fork import in_child
from lens_meters import CountingMeter
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    record_metrics,
    register_metric_group,
    setup_telemetry,
)
from nemo.lens.instruments import _cardinality, _record, record_inference_metrics
from nemo.lens.instruments._registry import GROUPS
from nemo.lens.semconv import OTEL_METRIC_OVERFLOW
from nemo.lens.testing import (
    InMemoryMetrics,
    in_memory_metrics,
    isolated_telemetry,
    reset_all,
    reset_metric_registry,
)

OVERFLOW = {OTEL_METRIC_OVERFLOW: True}
SPECS = [
    MetricSpec("samples", "card.samples", "counter"),
    MetricSpec("latency", "card.latency", "histogram"),
    MetricSpec("depth", "card.depth", "gauge"),
]


@pytest.fixture
def card(pipeline: InMemoryMetrics) -> InMemoryMetrics:
    """The pipeline with the 'card' group registered."""
    register_metric_group("card", SPECS)
    return pipeline


def series(metrics: InMemoryMetrics, name: str) -> dict[frozenset[Any], Any]:
    """Attribute set -> value (sum or gauge) or (count, sum) (histogram), for series `name`."""
    found: dict[frozenset[Any], Any] = {}
    for point in metrics.points(name):
        value = (point.count, point.sum) if hasattr(point, "bucket_counts") else point.value
        found[frozenset(point.attributes.items())] = value
    return found


def attribute_set(**attributes: object) -> frozenset[Any]:
    """The attribute set of these keyword attributes, as `series` keys it."""
    return frozenset(attributes.items())


OVERFLOW_SET = frozenset(OVERFLOW.items())


def collected_sums(reader: InMemoryMetricReader) -> dict[frozenset[Any], Any]:
    """Collect `reader` now; attribute set -> value of every sum point of `card.samples`."""
    data: Any = reader.get_metrics_data()
    assert data is not None
    return {
        frozenset(point.attributes.items()): point.value
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "card.samples"
        for point in metric.data.data_points
    }


def limit_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The cardinality-limit warnings lens logged."""
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING and "metric_cardinality_limit" in record.getMessage()
    ]


def test_limit_3_keeps_3_series_and_folds_the_rest_into_overflow(card: InMemoryMetrics) -> None:
    """5 sets under limit 3 on a counter: the first 3 keep their sums, 4 and 5 sum in overflow."""
    _cardinality.set_limit(3)
    for sample in range(5):
        record_metrics(card.meter, "card", samples=sample + 1, attributes={"sample": sample})
    assert series(card, "card.samples") == {
        attribute_set(sample=0): 1,
        attribute_set(sample=1): 2,
        attribute_set(sample=2): 3,
        OVERFLOW_SET: 4 + 5,
    }


def test_sets_seen_before_the_limit_keep_recording_on_their_own_series(
    card: InMemoryMetrics,
) -> None:
    """After the limit is reached, a known set still adds to its series, a new one to overflow."""
    _cardinality.set_limit(2)
    for sample in (0, 1, 2, 0, 1, 3, 0):
        record_metrics(card.meter, "card", samples=10, attributes={"sample": sample})
    assert series(card, "card.samples") == {
        attribute_set(sample=0): 30,
        attribute_set(sample=1): 20,
        OVERFLOW_SET: 20,
    }


def test_a_histogram_and_a_gauge_overflow_per_instrument(card: InMemoryMetrics) -> None:
    """Each instrument counts its own sets: a histogram's counts and a gauge's last value."""
    _cardinality.set_limit(1)
    record_metrics(card.meter, "card", latency=1.0, attributes={"route": "a"})
    record_metrics(card.meter, "card", depth=5, attributes={"route": "b"})
    record_metrics(card.meter, "card", latency=2.0, depth=6, attributes={"route": "c"})
    record_metrics(card.meter, "card", latency=3.0, depth=7, attributes={"route": "d"})
    assert series(card, "card.latency") == {
        attribute_set(route="a"): (1, 1.0),
        OVERFLOW_SET: (2, 5.0),
    }
    assert series(card, "card.depth") == {attribute_set(route="b"): 5, OVERFLOW_SET: 7}


def test_one_warning_per_instrument_naming_group_key_series_and_limit(
    card: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """Overflowing many times logs once per instrument, with its group, key, series and limit."""
    _cardinality.set_limit(1)
    for sample in range(20):
        record_metrics(card.meter, "card", samples=1, latency=1.0, attributes={"sample": sample})
    messages = limit_warnings(caplog)
    assert len(messages) == 2
    for key, series_name in (("samples", "card.samples"), ("latency", "card.latency")):
        (message,) = [message for message in messages if f"key {key!r}" in message]
        assert "group 'card'" in message
        assert repr(series_name) in message
        assert "metric_cardinality_limit=1 " in message
        assert OTEL_METRIC_OVERFLOW in message


def test_each_meter_has_its_own_sets_and_its_own_warning(
    card: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """Two meters of one provider: each instrument counts its sets and warns once."""
    other = card.provider.get_meter("card.other")
    _cardinality.set_limit(1)
    for meter in (card.meter, other):
        for sample in range(3):
            record_metrics(meter, "card", samples=1, attributes={"sample": sample})
    assert len(limit_warnings(caplog)) == 2
    by_scope = {
        scope.scope.name: {
            frozenset(point.attributes.items()): point.value
            for point in scope.metrics[0].data.data_points
        }
        for scope in _collected_scopes(card)
    }
    expected = {attribute_set(sample=0): 1, OVERFLOW_SET: 2}
    assert by_scope == {"nemo.lens.testing": expected, "card.other": expected}


def _collected_scopes(metrics: InMemoryMetrics) -> list[Any]:
    """Collect now; every scope's metrics."""
    data = metrics.reader.get_metrics_data()
    assert data is not None
    return [scope for resource in data.resource_metrics for scope in resource.scope_metrics]


class NamelessMeter(CountingMeter):
    """A real meter behind a wrapper whose `name` cannot be read."""

    @property
    def name(self) -> str:
        raise RuntimeError("no name here")


def test_a_meter_without_a_readable_name_is_named_by_its_type(
    card: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """The overflow warning falls back to the meter's type; the limit applies all the same."""
    meter = NamelessMeter(card.meter)
    _cardinality.set_limit(1)
    for sample in range(3):
        record_metrics(meter, "card", samples=1, attributes={"sample": sample})
    (message,) = limit_warnings(caplog)
    assert "meter NamelessMeter" in message
    assert series(card, "card.samples") == {attribute_set(sample=0): 1, OVERFLOW_SET: 2}


def test_threads_recording_new_sets_keep_the_total_and_the_bound(card: InMemoryMetrics) -> None:
    """8 threads x 200 new sets under limit 10: the sum is whole, at most a few sets past 10."""
    _cardinality.set_limit(10)
    start = threading.Barrier(8)

    def work(thread: int) -> None:
        start.wait()
        for sample in range(200):
            record_metrics(
                card.meter, "card", samples=1, attributes={"sample": thread * 1000 + sample}
            )

    threads = [threading.Thread(target=work, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    found = series(card, "card.samples")
    assert sum(found.values()) == 8 * 200
    # A race may admit a set or two past the limit; never one per new set.
    assert 10 <= len(found) - 1 <= 10 + 8


def test_each_key_is_wrapped_once_per_meter(card: InMemoryMetrics) -> None:
    """A second wrap of the same key on the same meter returns the first wrapper."""
    _cardinality.set_limit(1)
    record_metrics(card.meter, "card", samples=1, attributes={"sample": 0})
    state = GROUPS["card"]
    (cache,) = state.meters.values()
    first = cache.bounded["samples"]
    again = _record._bound_emitter(state, cache, card.meter, "samples", cache.emitters["samples"])
    assert again is first


def test_limit_0_never_overflows(card: InMemoryMetrics, caplog: pytest.LogCaptureFixture) -> None:
    """The default, 0, keeps every attribute set on its own series and warns about nothing."""
    assert _cardinality.limit == 0
    for sample in range(50):
        record_metrics(card.meter, "card", samples=1, attributes={"sample": sample})
    found = series(card, "card.samples")
    assert len(found) == 50
    assert OVERFLOW_SET not in found
    assert limit_warnings(caplog) == []


def test_calls_without_attributes_do_not_count_towards_the_limit(card: InMemoryMetrics) -> None:
    """Points without attributes keep their one series; only attribute sets are counted."""
    _cardinality.set_limit(1)
    record_metrics(card.meter, "card", samples=1)
    record_metrics(card.meter, "card", samples=1, attributes={})
    record_metrics(card.meter, "card", samples=2, attributes={"sample": 0})
    record_metrics(card.meter, "card", samples=3, attributes={"sample": 1})
    assert series(card, "card.samples") == {
        frozenset(): 2,
        attribute_set(sample=0): 2,
        OVERFLOW_SET: 3,
    }


def test_cleaned_attributes_are_what_the_limit_counts(card: InMemoryMetrics) -> None:
    """A list value becomes a tuple before counting; equal cleaned sets are one series."""
    _cardinality.set_limit(1)
    record_metrics(card.meter, "card", samples=1, attributes={"ids": [1, 2]})
    record_metrics(card.meter, "card", samples=1, attributes={"ids": (1, 2)})
    record_metrics(card.meter, "card", samples=1, attributes={"ids": [3]})
    assert series(card, "card.samples") == {attribute_set(ids=(1, 2)): 2, OVERFLOW_SET: 1}


def test_an_unhashable_attribute_set_is_recorded_on_overflow() -> None:
    """Defensively, a set that cannot be hashed goes to overflow instead of raising."""
    recorded: list[tuple[float, object]] = []
    warned: list[bool] = []
    _cardinality.set_limit(5)
    emit = _cardinality.BoundedEmitter(
        lambda value, attributes: recorded.append((value, attributes)),
        lambda: warned.append(True),
    )
    emit(1.0, {"ids": [1, 2]})
    assert recorded == [(1.0, OVERFLOW)]
    assert warned == [True]


def test_record_inference_metrics_is_limited_too(card: InMemoryMetrics) -> None:
    """record_inference_metrics records through record_metrics, so its series are limited."""
    _cardinality.set_limit(2)
    for model in ("m0", "m1", "m2", "m3"):
        record_inference_metrics(card.meter, request_duration_s=1.0, model=model)
    found = series(card, "gen_ai.server.request.duration")
    assert len(found) == 3
    assert found[OVERFLOW_SET] == (2, 2.0)


def test_instruments_created_on_the_meter_directly_are_not_limited(
    card: InMemoryMetrics,
) -> None:
    """The limit covers record_metrics only; a consumer's own instrument keeps every set."""
    _cardinality.set_limit(1)
    counter = card.meter.create_counter("card.direct")
    for sample in range(4):
        counter.add(1, {"sample": sample})
    assert len(series(card, "card.direct")) == 4


def test_setup_telemetry_applies_the_configured_limit() -> None:
    """setup_telemetry with metric_cardinality_limit=2 limits what record_metrics records."""
    with isolated_telemetry():
        reader = InMemoryMetricReader()
        handle = setup_telemetry(
            NemoLensConfig(enabled=True, traces_enabled=False, metric_cardinality_limit=2),
            metric_reader=reader,
        )
        try:
            assert _cardinality.limit == 2
            register_metric_group("card", SPECS)
            for sample in range(4):
                record_metrics(handle.meter, "card", samples=1, attributes={"sample": sample})
            assert collected_sums(reader) == {
                attribute_set(sample=0): 1,
                attribute_set(sample=1): 1,
                OVERFLOW_SET: 2,
            }
        finally:
            handle.shutdown()
        assert _cardinality.limit == 2  # a later setup sets its own; the resets lift it
    assert _cardinality.limit == 0


#: Equal in Python (and so one series to an SDK that keys by `frozenset(items)`), while
#: SDKs that key by value and type keep them as three series.
EQUAL_VALUES = (1, True, 1.0)


def typed_points(points: list[Any]) -> list[tuple[tuple[tuple[str, str, object], ...], Any]]:
    """(attributes with each value's type, value) of `points`, so 1, True and 1.0 differ."""
    return sorted(
        (
            tuple(
                sorted((key, type(item).__name__, item) for key, item in point.attributes.items())
            ),
            point.value,
        )
        for point in points
    )


def sdk_series_of_equal_values() -> int:
    """How many series the installed SDK itself keeps of `{"k": v}` for each EQUAL_VALUES."""
    raw = in_memory_metrics()
    try:
        counter = raw.meter.create_counter("card.raw")
        for value in EQUAL_VALUES:
            counter.add(1, {"k": value})
        return len(raw.points("card.raw"))
    finally:
        raw.shutdown()


@pytest.mark.parametrize("meter_of", ["setup", "own-provider"])
def test_the_limit_counts_series_as_the_sdk_keeps_them(meter_of: str) -> None:
    """Under limit 1, `{"k": 1}`, `{"k": True}` and `{"k": 1.0}` are as many series to the
    limit as to the SDK: one series where it merges them, else the first plus overflow;
    on lens's coalescing meter and on a provider lens did not build alike."""
    kept_apart = sdk_series_of_equal_values() == len(EQUAL_VALUES)
    with isolated_telemetry():
        reader = InMemoryMetricReader()
        handle = setup_telemetry(
            NemoLensConfig(enabled=True, traces_enabled=False, metric_cardinality_limit=1),
            metric_reader=reader,
        )
        own = in_memory_metrics()
        try:
            register_metric_group("card", SPECS)
            meter = handle.meter if meter_of == "setup" else own.meter
            for step, value in enumerate(EQUAL_VALUES):
                record_metrics(meter, "card", samples=1, depth=step, attributes={"k": value})
            # One collection each: older SDKs leave a gauge out of the next one.
            points = collected_points(reader if meter_of == "setup" else own.reader)
        finally:
            own.shutdown()
            handle.shutdown()
    first = (("k", "int", 1),)
    overflow = ((OTEL_METRIC_OVERFLOW, "bool", True),)
    samples, depth = points["card.samples"], points["card.depth"]
    if kept_apart:
        assert typed_points(samples) == sorted([(first, 1), (overflow, 2)])
        assert typed_points(depth) == sorted([(first, 0), (overflow, 2)])
    else:
        assert typed_points(samples) == [(first, 3)]
        assert typed_points(depth) == [(first, 2)]


def collected_points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Collect `reader` now; metric name -> its data points."""
    data: Any = reader.get_metrics_data()
    assert data is not None
    return {
        metric.name: list(metric.data.data_points)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


_CHILD = """
import json, logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from nemo.lens import MetricSpec, NemoLensConfig, record_metrics, register_metric_group
from nemo.lens import setup_telemetry
config = NemoLensConfig.from_env("TRAINER_OTEL")
config.enabled = True
config.traces_enabled = False
reader = InMemoryMetricReader()
handle = setup_telemetry(config, metric_reader=reader)
register_metric_group("child", [MetricSpec("samples", "child.samples", "counter")])
for sample in range(6):
    record_metrics(handle.meter, "child", samples=sample, attributes={"sample": sample})
data = reader.get_metrics_data()
points = [
    [sorted(point.attributes.items()), point.value]
    for resource in data.resource_metrics
    for scope in resource.scope_metrics
    for metric in scope.metrics
    for point in metric.data.data_points
]
handle.shutdown(timeout_ms=5000)
print(json.dumps({"limit": config.metric_cardinality_limit, "points": sorted(points)}))
"""


def test_the_environment_variable_sets_the_limit_through_setup() -> None:
    """<PREFIX>_METRIC_CARDINALITY_LIMIT=4 in a fresh interpreter: 4 series plus overflow."""
    run = run_child(_CHILD, {"TRAINER_OTEL_METRIC_CARDINALITY_LIMIT": "4"}, 120)
    assert run.returncode == 0, run.stderr
    outcome = json.loads(run.stdout.splitlines()[-1])
    assert outcome["limit"] == 4
    assert outcome["points"] == sorted(
        [
            *([[["sample", sample]], sample] for sample in range(4)),
            [[[OTEL_METRIC_OVERFLOW, True]], 4 + 5],
        ]
    )
    assert run.stderr.count("reached metric_cardinality_limit=4") == 1


def test_resetting_the_registry_lifts_the_limit_and_forgets_the_sets(
    card: InMemoryMetrics,
) -> None:
    """reset_metric_registry() puts the limit back to 0; a new limit starts from fresh sets."""
    _cardinality.set_limit(1)
    record_metrics(card.meter, "card", samples=1, attributes={"sample": 0})
    reset_metric_registry()
    assert _cardinality.limit == 0
    fresh = in_memory_metrics()
    try:
        register_metric_group("card", SPECS)
        _cardinality.set_limit(1)
        record_metrics(fresh.meter, "card", samples=1, attributes={"sample": 1})
        record_metrics(fresh.meter, "card", samples=1, attributes={"sample": 0})
        assert series(fresh, "card.samples") == {attribute_set(sample=1): 1, OVERFLOW_SET: 1}
    finally:
        fresh.shutdown()


def test_reset_all_lifts_the_limit() -> None:
    """reset_all() leaves no cardinality limit behind."""
    _cardinality.set_limit(7)
    reset_all()
    assert _cardinality.limit == 0


def test_a_raised_limit_admits_more_sets_on_the_same_instrument(card: InMemoryMetrics) -> None:
    """The limit is read per record: raising it lets new sets have their own series again."""
    _cardinality.set_limit(1)
    record_metrics(card.meter, "card", samples=1, attributes={"sample": 0})
    record_metrics(card.meter, "card", samples=1, attributes={"sample": 1})
    _cardinality.set_limit(2)
    record_metrics(card.meter, "card", samples=1, attributes={"sample": 2})
    assert series(card, "card.samples") == {
        attribute_set(sample=0): 1,
        attribute_set(sample=2): 1,
        OVERFLOW_SET: 1,
    }


@pytest.fixture
def _isolated_setup() -> Iterator[None]:
    """Fresh OpenTelemetry globals and setup guard around a test that sets up telemetry."""
    with isolated_telemetry():
        yield


@pytest.mark.fork
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
@pytest.mark.usefixtures("_isolated_setup")
def test_a_forked_child_starts_with_fresh_attribute_sets() -> None:
    """The parent's seen sets stay behind: the child's own setup counts its sets afresh."""
    register_metric_group("card", SPECS)
    reader = InMemoryMetricReader()
    parent = setup_telemetry(
        NemoLensConfig(enabled=True, traces_enabled=False, metric_cardinality_limit=2),
        metric_reader=reader,
    )
    for sample in range(3):
        record_metrics(parent.meter, "card", samples=1, attributes={"sample": sample})

    def child() -> dict[str, Any]:
        inherited = [cache.bounded for cache in GROUPS["card"].meters.values()]
        own_reader = InMemoryMetricReader()
        own = setup_telemetry(
            NemoLensConfig(enabled=True, traces_enabled=False, metric_cardinality_limit=2),
            metric_reader=own_reader,
        )
        for sample in (10, 11, 12):
            record_metrics(own.meter, "card", samples=1, attributes={"sample": sample})
        points = sorted([sorted(key), value] for key, value in collected_sums(own_reader).items())
        own.shutdown(timeout_ms=2000)
        return {"inherited": [len(bounded) for bounded in inherited], "points": points}

    report = in_child(child)
    assert report["inherited"] == [0]
    assert report["points"] == [
        [[["otel.metric.overflow", True]], 1],
        [[["sample", 10]], 1],
        [[["sample", 11]], 1],
    ]
    parent.shutdown()


def delta_reader() -> InMemoryMetricReader:
    """An in-memory reader collecting counters and histograms as delta (OTLP's `delta`)."""
    from opentelemetry.sdk.metrics import Counter, Histogram
    from opentelemetry.sdk.metrics.export import AggregationTemporality

    return InMemoryMetricReader(
        preferred_temporality={
            Counter: AggregationTemporality.DELTA,
            Histogram: AggregationTemporality.DELTA,
        }
    )


def limited_setup(reader: InMemoryMetricReader, limit: int) -> Any:
    """A metrics-only setup collecting into `reader` under `metric_cardinality_limit`."""
    return setup_telemetry(
        NemoLensConfig(enabled=True, traces_enabled=False, metric_cardinality_limit=limit),
        metric_reader=reader,
    )


def test_under_delta_temporality_the_limit_counts_per_collection_cycle() -> None:
    """Limit 5, delta: 5 new sets after a collection keep their own series (the spec's
    cycle) where the SDK forgets delta series at each collection; elsewhere they overflow,
    so the SDK's storage stays bounded."""
    from nemo.lens._sdk._coalescing import sdk_forgets_delta_series

    with isolated_telemetry():
        register_metric_group("card", SPECS)
        reader = delta_reader()
        handle = limited_setup(reader, 5)
        try:
            for sample in range(5):
                record_metrics(handle.meter, "card", samples=1, attributes={"sample": sample})
            first = collected_sums(reader)
            for sample in range(5, 10):
                record_metrics(handle.meter, "card", samples=1, attributes={"sample": sample})
            second = collected_sums(reader)
            for sample in range(10, 17):
                record_metrics(handle.meter, "card", samples=1, attributes={"sample": sample})
            third = collected_sums(reader)
        finally:
            handle.shutdown()
    assert first == {attribute_set(sample=sample): 1 for sample in range(5)}
    if not sdk_forgets_delta_series():
        # The SDK keeps the first cycle's series: the new sets go to overflow.
        assert attribute_set(sample=5) not in second
        assert second[OVERFLOW_SET] == 5
        assert third == {OVERFLOW_SET: 7}
        return
    assert second == {attribute_set(sample=sample): 1 for sample in range(5, 10)}
    # A cycle of its own still holds the limit: 5 sets, then overflow.
    assert third == {
        **{attribute_set(sample=sample): 1 for sample in range(10, 15)},
        OVERFLOW_SET: 2,
    }


def test_the_sdk_probe_tells_whether_delta_series_are_forgotten() -> None:
    """The probe answers True exactly on releases whose readers take per-reader limits and
    reset delta storage at each collection (1.45.2 and newer)."""
    import inspect

    from nemo.lens._sdk._coalescing import sdk_forgets_delta_series

    takes_limits = "cardinality_limits" in inspect.signature(InMemoryMetricReader).parameters
    assert sdk_forgets_delta_series() is takes_limits


def test_under_cumulative_temporality_the_limit_counts_over_the_process_life() -> None:
    """Limit 5, cumulative: the SDK keeps every series; 5 new sets after a collection overflow."""
    with isolated_telemetry():
        register_metric_group("card", SPECS)
        reader = InMemoryMetricReader()
        handle = limited_setup(reader, 5)
        try:
            for sample in range(5):
                record_metrics(handle.meter, "card", samples=1, attributes={"sample": sample})
            collected_sums(reader)
            for sample in range(5, 10):
                record_metrics(handle.meter, "card", samples=1, attributes={"sample": sample})
            after = collected_sums(reader)
        finally:
            handle.shutdown()
    assert after == {**{attribute_set(sample=sample): 1 for sample in range(5)}, OVERFLOW_SET: 5}


def test_delta_cycles_apply_only_to_the_kinds_the_reader_collects_as_delta() -> None:
    """Under OTLP's `delta` a gauge stays cumulative: its sets count over the process's life."""
    with isolated_telemetry():
        register_metric_group("card", SPECS)
        reader = delta_reader()
        handle = limited_setup(reader, 2)
        try:
            for sample in range(2):
                record_metrics(handle.meter, "card", depth=1.0, attributes={"sample": sample})
            reader.get_metrics_data()
            record_metrics(handle.meter, "card", depth=2.0, attributes={"sample": 2})
            data: Any = reader.get_metrics_data()
        finally:
            handle.shutdown()
    gauge = {
        frozenset(point.attributes.items()): point.value
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "card.depth"
        for point in metric.data.data_points
    }
    # Whether the two earlier sets are reported again differs by release (1.23 reports a
    # gauge only when it changed); the third set is on overflow on every one.
    assert attribute_set(sample=2) not in gauge
    assert gauge[OVERFLOW_SET] == 2.0


def test_the_otlp_delta_preference_makes_counters_and_histograms_count_per_cycle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reader lens builds under OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    from nemo.lens import _otel_internals

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta")
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint="http://127.0.0.1:9/v1/metrics"),
        export_interval_millis=60_000,
    )
    try:
        assert _otel_internals.delta_kinds(reader) == {"counter", "histogram"}
    finally:
        reader.shutdown()
    assert _otel_internals.delta_kinds(InMemoryMetricReader()) == frozenset()


#: More distinct sets than opentelemetry-sdk 1.45.2's own default limit (2000) keeps.
BEYOND_SDK_DEFAULT = 2500


@pytest.mark.parametrize("limit", [0, 5000])
def test_the_configured_limit_is_the_only_one_on_every_sdk_release(limit: int) -> None:
    """Limit 0 (none) or 5000 keeps 2500 sets apart, on record_metrics and handle.meter alike.

    opentelemetry-sdk 1.45.2 caps each instrument at 2000 sets by itself; lens lifts that
    cap on the reader its pipeline collects through, so the documented limit holds.
    """
    with isolated_telemetry():
        register_metric_group("card", SPECS)
        reader = InMemoryMetricReader()
        handle = limited_setup(reader, limit)
        try:
            direct = handle.meter.create_counter("card.direct")
            for sample in range(BEYOND_SDK_DEFAULT):
                record_metrics(handle.meter, "card", samples=1, attributes={"sample": sample})
                direct.add(1, {"sample": sample})
            data: Any = reader.get_metrics_data()
        finally:
            handle.shutdown()
    counts = {
        metric.name: len(metric.data.data_points)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert counts["card.samples"] == BEYOND_SDK_DEFAULT
    assert counts["card.direct"] == BEYOND_SDK_DEFAULT


def test_the_sdk_limit_is_found_to_lift_wherever_the_sdk_has_one() -> None:
    """A release whose readers take `cardinality_limits` keeps them where lens lifts them
    (a rename would bring back the SDK's silent 2000 limit: this fails instead)."""
    import inspect

    from nemo.lens import _otel_internals

    takes_limits = "cardinality_limits" in inspect.signature(InMemoryMetricReader).parameters
    lifted = _otel_internals.lift_sdk_cardinality_limits(
        InMemoryMetricReader(), _cardinality.SDK_UNLIMITED
    )
    assert lifted is takes_limits
