"""Coalesced recording exports exactly what direct recording exports (issue 14).

Hypothesis drives two meter providers with the same random sequence of `record_metrics`
calls and collections: one coalesces (lens's pipeline mechanism,
`_coalescing.coalesce_recording`), the other is a provider lens did not build, so it
records directly. After every collection, every reader of both must hold the same
points: same instruments, kinds, units, descriptions, values (type and bits),
attributes (with their types) and the same presence per interval. Timestamps and
exemplars are left out (the SDK stamps a coalesced value at its collection and samples
no exemplar for it). Readers: one cumulative, one delta, or both at once, collected
together or each at its own moments.
"""

from __future__ import annotations

import struct
import threading
import time
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.metrics")

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.resources import Resource

from nemo.lens import MetricSpec, record_metrics, register_metric_group
from nemo.lens._process import BuiltHere
from nemo.lens._sdk import _coalescing
from nemo.lens.instruments import _cardinality, _coalesce

GROUP = "equivalence"
SPECS = [
    MetricSpec("g", "eq.gauge", "gauge", unit="1", description="a gauge"),
    MetricSpec("g2", "eq.gauge2", "gauge"),
    MetricSpec("c", "eq.counter", "counter", unit="{item}", description="a counter"),
    MetricSpec("u", "eq.updown", "up_down_counter", unit="By"),
    MetricSpec("h", "eq.histogram", "histogram", unit="ms", buckets=[1.0, 10.0, 100.0]),
]
KEYS = [spec.key for spec in SPECS]

_DELTA: dict[type, AggregationTemporality] = dict.fromkeys(
    (
        Counter,
        UpDownCounter,
        Histogram,
        ObservableCounter,
        ObservableUpDownCounter,
        ObservableGauge,
    ),
    AggregationTemporality.DELTA,
)
# Reader setups: the temporality of each reader of one provider.
READER_SETUPS = {
    "cumulative": ("cumulative",),
    "delta": ("delta",),
    "cumulative+delta": ("cumulative", "delta"),
}

values = st.one_of(
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -0.0, 0.0, 2**62, -(2**62), 1e308, 0.1, 0.2]),
    st.none(),
)
# Attribute sets whose values Python finds equal (1, True, 1.0) but the SDK may keep
# apart, key orders, tuples, and no attributes at all.
attribute_sets = st.sampled_from(
    [
        None,
        {},
        {"a": 1},
        {"a": True},
        {"a": 1.0},
        {"a": "1"},
        {"a": 1, "b": "y"},
        {"b": "y", "a": 1},
        {"t": (1, 2)},
        {"t": (True, False)},
        {"t": (1.0, 2.0)},
        {"t": ()},
        {"rank": 3, "role": "policy", "step_kind": "train"},
    ]
)
record_calls = st.tuples(
    st.just("record"),
    st.dictionaries(st.sampled_from(KEYS), values, min_size=1, max_size=len(KEYS)),
    attribute_sets,
)
# A collection of every reader, or of one (readers of one provider collect at their own
# moments: a periodic OTLP export and a Prometheus scrape).
collections = st.tuples(st.just("collect"), st.sampled_from(["all", 0, 1]))
operations = st.lists(
    st.one_of(record_calls, record_calls, record_calls, collections),
    min_size=1,
    max_size=40,
)


def build(setup: tuple[str, ...], coalesced: bool) -> tuple[Any, Any, list[InMemoryMetricReader]]:
    readers = [
        InMemoryMetricReader(preferred_temporality=_DELTA if kind == "delta" else None)
        for kind in setup
    ]
    provider = MeterProvider(
        metric_readers=readers, resource=Resource.get_empty(), shutdown_on_exit=False
    )
    if coalesced:
        buffer = _coalescing.coalesce_recording(provider, readers, BuiltHere())
        assert buffer is not None
    meter = provider.get_meter("nemo.lens.equivalence")
    return provider, meter, readers


def exact(value: object) -> tuple[str, object]:
    """A value with its type and, for floats, its bits (-0.0 and 0.0 differ)."""
    if type(value) is float:
        return ("float", struct.pack("<d", value))
    return (type(value).__name__, value)


def typed_attributes(attributes: Any) -> tuple[Any, ...]:
    return tuple(
        sorted((key, type(value).__name__, repr(value)) for key, value in attributes.items())
    )


def point_fields(point: Any) -> tuple[Any, ...]:
    if hasattr(point, "bucket_counts"):
        return (
            "histogram",
            point.count,
            exact(point.sum),
            tuple(point.bucket_counts),
            tuple(point.explicit_bounds),
            exact(point.min),
            exact(point.max),
        )
    return ("number", exact(point.value))


def exported(reader: InMemoryMetricReader) -> dict[str, Any]:
    """Collect; metric name -> its kind, unit, description and points (order-free)."""
    data = reader.get_metrics_data()
    result: dict[str, Any] = {}
    if data is None:
        return result
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                points = sorted(
                    (typed_attributes(point.attributes), point_fields(point))
                    for point in metric.data.data_points
                )
                result[metric.name] = (
                    type(metric.data).__name__,
                    metric.unit,
                    metric.description,
                    getattr(metric.data, "aggregation_temporality", None),
                    getattr(metric.data, "is_monotonic", None),
                    tuple(points),
                )
    return result


@pytest.mark.parametrize("setup", list(READER_SETUPS.values()), ids=list(READER_SETUPS))
@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(limit=st.sampled_from([0, 0, 2]), sequence=operations)
# Floats a second reader would sum in another grouping (0.1 + 0.5, not 0.1 + 0.2 + 0.3).
@example(
    limit=0,
    sequence=[
        ("record", {"c": 0.1, "u": 0.1}, None),
        ("collect", 0),
        ("record", {"c": 0.2, "u": 0.2}, None),
        ("record", {"c": 0.3, "u": 0.3}, None),
        ("collect", 1),
    ],
)
def test_coalesced_recording_exports_what_direct_recording_exports(
    setup: tuple[str, ...], limit: int, sequence: list[tuple[Any, ...]]
) -> None:
    """The same records and collections give the same points on both paths (with lens's
    cardinality limit off, or at 2 attribute sets per instrument)."""
    register_metric_group(GROUP, SPECS, allow_override=True)
    _cardinality.set_limit(limit)
    direct_provider, direct_meter, direct_readers = build(setup, coalesced=False)
    lens_provider, lens_meter, lens_readers = build(setup, coalesced=True)
    try:
        assert _coalesce.buffer_for(direct_meter) is None
        assert _coalesce.buffer_for(lens_meter) is not None
        # A final collection, so values recorded after the last one are compared too.
        for operation in [*sequence, ("collect", "all")]:
            if operation[0] == "record":
                _, recorded, attributes = operation
                record_metrics(direct_meter, GROUP, recorded, attributes=attributes)
                record_metrics(lens_meter, GROUP, recorded, attributes=attributes)
                continue
            which = operation[1]
            pairs = list(zip(direct_readers, lens_readers, strict=True))
            if which != "all" and which < len(pairs):
                pairs = [pairs[which]]
            for direct_reader, lens_reader in pairs:
                assert exported(lens_reader) == exported(direct_reader)
    finally:
        _cardinality.set_limit(0)
        direct_provider.shutdown()
        lens_provider.shutdown()


def test_gauges_and_sums_are_buffered_and_histograms_recorded_directly() -> None:
    """Before a collection the gauge and counter wait in lens's buffer; the histogram is
    already in the SDK (what makes the equivalence above a test of coalescing)."""
    register_metric_group(GROUP, SPECS)
    provider, meter, readers = build(("cumulative",), coalesced=True)
    try:
        record_metrics(meter, GROUP, g=1.5, c=2, h=3.0)
        buffer = _coalesce.buffer_for(meter)
        assert buffer is not None
        pending = {id(instrument) for instrument, _ in buffer.buffered_entries()}
        assert len(pending) == 2
        names = set(exported(readers[0]))
        assert names == {"eq.gauge", "eq.counter", "eq.histogram"}
        assert buffer.buffered_entries() == []
    finally:
        provider.shutdown()


def test_with_two_readers_only_gauges_are_buffered() -> None:
    """A second reader collecting at other moments would sum buffered floats in another
    grouping than direct recording, so sums stay direct there."""
    register_metric_group(GROUP, SPECS)
    provider, meter, _ = build(("cumulative", "delta"), coalesced=True)
    try:
        record_metrics(meter, GROUP, g=1.5, c=2, u=1, h=3.0)
        buffer = _coalesce.buffer_for(meter)
        assert buffer is not None
        assert len(buffer.buffered_entries()) == 1
    finally:
        provider.shutdown()


@pytest.mark.parametrize("setup", [("cumulative",), ("delta",)], ids=["cumulative", "delta"])
def test_series_recorded_once_an_interval_go_direct_and_export_the_same(
    setup: tuple[str, ...],
) -> None:
    """Where most of an interval's many series got one value, new series go to the SDK at
    once (the hand-over would only add to that cost); the points stay those of direct
    recording through the switch, the direct intervals, each re-measuring interval, and
    back when the series get many values again."""
    register_metric_group(GROUP, SPECS)
    direct_provider, direct_meter, direct_readers = build(setup, coalesced=False)
    lens_provider, lens_meter, lens_readers = build(setup, coalesced=True)
    buffer = _coalesce.buffer_for(lens_meter)
    assert buffer is not None
    modes: list[bool] = []
    histogram_modes: list[bool] = []
    try:
        for interval in range(20):
            many_values = interval >= 11  # from here on each series gets 3 values
            for shard in range(150):
                # Old and new series alike; a float and an int per series and interval.
                attributes = {"shard": (shard + 40 * interval) % 400}
                for repeat in range(3 if many_values else 1):
                    recorded = {"g": shard * 0.1 + repeat, "c": interval + repeat, "h": 1.0}
                    record_metrics(direct_meter, GROUP, recorded, attributes=attributes)
                    record_metrics(lens_meter, GROUP, recorded, attributes=attributes)
            for direct_reader, lens_reader in zip(direct_readers, lens_readers, strict=True):
                assert exported(lens_reader) == exported(direct_reader)
            pendings = buffer._pending.values()
            modes.append(all(pending.direct for pending in pendings if not pending.histogram))
            histogram_modes.extend(pending.direct for pending in pendings if pending.histogram)
    finally:
        direct_provider.shutdown()
        lens_provider.shutdown()
    # Direct after the first interval; buffering for each re-measuring interval (every
    # 8th flush), and for good once a re-measure finds the series getting many values.
    assert modes == [True] * 8 + [False] + [True] * 8 + [False] * 3
    # The histogram the same, an interval later: its first values go to the SDK at once
    # (it learns the boundaries from the SDK's aggregation at the first flush).
    assert histogram_modes == [False] + [True] * 8 + [False] + [True] * 8 + [False] * 2


def test_a_direct_gauge_never_reports_a_value_older_than_the_last_recorded() -> None:
    """A thread records many gauge series while another collects all along: a value sent
    at once never lands before an older one of its series still being handed over, so
    the value the SDK got last for each series is the one recorded last."""
    register_metric_group(GROUP, SPECS)
    provider, meter, readers = build(("cumulative",), coalesced=True)
    buffer = _coalesce.buffer_for(meter)
    assert buffer is not None
    record_metrics(meter, GROUP, {"g": -1.0}, attributes={"shard": -1})
    [pending] = buffer._pending.values()
    sdk_set = pending.record
    # What the SDK got last per series (older releases export only a gauge's series set
    # in the interval, so the exported points would not show every series).
    got: dict[int, float] = {}

    def set_and_note(value: float, attributes: Any = None) -> None:
        got[attributes["shard"]] = value
        sdk_set(value, attributes)

    pending.record = set_and_note
    last: dict[int, float] = {}
    done = threading.Event()

    def record() -> None:
        for step in range(60):
            for shard in range(200):
                if (shard + step) % 3:  # most series once, some skipped, each step
                    value = float(step * 1000 + shard)
                    record_metrics(meter, GROUP, {"g": value}, attributes={"shard": shard})
                    last[shard] = value
            time.sleep(0)

    def collect() -> None:
        while not done.is_set():
            readers[0].get_metrics_data()

    recorder = threading.Thread(target=record)
    collector = threading.Thread(target=collect)
    try:
        collector.start()
        recorder.start()
        recorder.join(60)
        done.set()
        collector.join(60)
        readers[0].get_metrics_data()
        assert {shard: value for shard, value in got.items() if shard >= 0} == last
    finally:
        provider.shutdown()


def test_a_series_being_handed_over_is_buffered_even_while_direct() -> None:
    """A new value of a series whose older value a flush is still handing over waits in
    the buffer, though its instrument records new series directly: sent at once, it
    would reach the SDK first, and the older value would overwrite it."""
    register_metric_group(GROUP, SPECS)
    provider, meter, readers = build(("cumulative",), coalesced=True)
    buffer = _coalesce.buffer_for(meter)
    assert buffer is not None
    handing_over, release = threading.Event(), threading.Event()
    sent: list[tuple[int, float]] = []
    try:
        record_metrics(meter, GROUP, g=5.0, attributes={"shard": 0})  # buffered
        [pending] = buffer._pending.values()
        sdk_set = pending.record

        def set_and_note(value: float, attributes: Any = None) -> None:
            sent.append((attributes["shard"], value))
            sdk_set(value, attributes)

        def slow_set(value: float, attributes: Any = None) -> None:
            handing_over.set()
            release.wait(10)
            set_and_note(value, attributes)

        pending.record = slow_set
        collector = threading.Thread(target=readers[0].get_metrics_data)
        collector.start()
        assert handing_over.wait(10)
        pending.record = set_and_note  # the hand-over under way keeps the slow one
        pending.direct = True  # as if the series of its earlier intervals went direct
        record_metrics(meter, GROUP, g=7.0, attributes={"shard": 0})
        record_metrics(meter, GROUP, g=1.0, attributes={"shard": 1})  # not in flight
        release.set()
        collector.join(10)
        assert [entry[0] for _, entry in buffer.buffered_entries()] == [7.0]
        readers[0].get_metrics_data()
        assert sent == [(1, 1.0), (0, 5.0), (0, 7.0)]
    finally:
        release.set()
        provider.shutdown()


#: Series of the counter in the tests below.
FIRST, SECOND = {"a": 1}, {"a": 2}


@pytest.mark.parametrize(
    "sequence",
    [
        # The first series holds room it never spends; the second's last int fits only
        # with it: int64's maximum exactly, still an int sum, and one more is a float.
        [(FIRST, 1), (SECOND, 2**62), (SECOND, 2**62 - 2), ("collect",), (FIRST, 1)],
        # The same across a collection (which takes the held room back).
        [(FIRST, 1), ("collect",), (SECOND, 2**62), (SECOND, 2**62 - 2), ("collect",), (FIRST, 1)],
        # A float joining the first series' int sum gives its room back.
        [(FIRST, 1), (FIRST, 0.5), (SECOND, 2**62), (SECOND, 2**62 - 2), ("collect",), (SECOND, 1)],
        # Many small ints on one series, a few big ones on the other.
        [*[(FIRST, 3)] * 50, (SECOND, 2**62), (SECOND, 2**62 - 151), ("collect",), (FIRST, 1)],
    ],
    ids=["held-room", "across-a-collection", "a-float-joins", "many-small"],
)
def test_a_counters_ints_switch_to_floats_where_direct_recording_switches(
    sequence: list[tuple[Any, ...]],
) -> None:
    """A counter's buffered series holds int64 room of its own (its later ints cost one
    comparison); room it does not spend is taken back before an int could be refused, so
    with one thread the ints turn into floats at exactly the value direct recording turns
    them, whatever series holds room, and the points stay those of direct recording."""
    register_metric_group(GROUP, SPECS)
    direct_provider, direct_meter, direct_readers = build(("cumulative",), coalesced=False)
    lens_provider, lens_meter, lens_readers = build(("cumulative",), coalesced=True)
    try:
        for step in [*sequence, ("collect",)]:
            if step[0] == "collect":
                assert exported(lens_readers[0]) == exported(direct_readers[0])
                continue
            attributes, value = step
            record_metrics(direct_meter, GROUP, c=value, attributes=attributes)
            record_metrics(lens_meter, GROUP, c=value, attributes=attributes)
    finally:
        direct_provider.shutdown()
        lens_provider.shutdown()
