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

import logging
import threading
import time
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.metrics")

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from lens_exact import exact
from lens_meters import sdk_forgets_delta_series
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.resources import Resource

from nemo.lens import MetricSpec, _otel_internals, record_metrics, register_metric_group
from nemo.lens._process import BuiltHere
from nemo.lens._sdk import _coalescing
from nemo.lens.instruments import _cardinality, _coalesce, _hand_over

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


def test_values_of_series_the_sdk_holds_wait_in_the_buffer() -> None:
    """New series reach the SDK at once; once it holds them, the gauge's, the counter's
    and the histogram's values wait in lens's buffer until a collection (what makes the
    equivalence above a test of coalescing)."""
    register_metric_group(GROUP, SPECS)
    provider, meter, readers = build(("cumulative",), coalesced=True)
    try:
        record_metrics(meter, GROUP, g=1.5, c=2, h=3.0)
        buffer = _coalesce.buffer_for(meter)
        assert buffer is not None
        # The counter and the histogram keep their interval from the value sent at once.
        kept = sorted(pending.name for pending, _ in buffer.buffered_entries())
        assert kept == ["eq.counter", "eq.histogram"]
        exported(readers[0])
        record_metrics(meter, GROUP, g=1.5, c=2, h=3.0)
        pending = {id(instrument) for instrument, _ in buffer.buffered_entries()}
        assert len(pending) == 3
        names = set(exported(readers[0]))
        assert names == {"eq.gauge", "eq.counter", "eq.histogram"}
        assert buffer.buffered_entries() == []
    finally:
        provider.shutdown()


def test_with_two_readers_only_gauges_are_buffered() -> None:
    """A second reader collecting at other moments would sum buffered floats in another
    grouping than direct recording, so sums stay direct there."""
    register_metric_group(GROUP, SPECS)
    provider, meter, readers = build(("cumulative", "delta"), coalesced=True)
    try:
        record_metrics(meter, GROUP, g=1.5, c=2, u=1, h=3.0)
        for reader in readers:
            exported(reader)
        record_metrics(meter, GROUP, g=1.5, c=2, u=1, h=3.0)
        buffer = _coalesce.buffer_for(meter)
        assert buffer is not None
        assert len(buffer.buffered_entries()) == 1
    finally:
        provider.shutdown()


def gauge_values(reader: InMemoryMetricReader, into: dict[int, float]) -> None:
    """Collect; note each exported point of `eq.gauge` as its shard's latest value."""
    data = reader.get_metrics_data()
    for resource_metrics in () if data is None else data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name == "eq.gauge":
                    for point in metric.data.data_points:
                        shard = (point.attributes or {}).get("shard")
                        if isinstance(shard, int) and isinstance(point, NumberDataPoint):
                            into[shard] = float(point.value)


@pytest.mark.parametrize("setup", [("cumulative",), ("delta",)], ids=["cumulative", "delta"])
def test_new_series_reach_the_sdk_at_once_and_held_ones_go_into_their_aggregations(
    setup: tuple[str, ...],
) -> None:
    """A series new to the SDK gets its first value at once (the SDK makes it at record
    time, as without lens); its later values and those of series it holds are buffered
    and handed into its aggregation at the collection, without an SDK call. The points
    stay those of direct recording with old and new series each interval, one value
    each or three."""
    register_metric_group(GROUP, SPECS)
    direct_provider, direct_meter, direct_readers = build(setup, coalesced=False)
    lens_provider, lens_meter, lens_readers = build(setup, coalesced=True)
    buffer = _coalesce.buffer_for(lens_meter)
    assert buffer is not None
    forgotten = setup == ("delta",) and sdk_forgets_delta_series()
    first = {"g": 0.5, "c": 1, "h": 1.0}
    record_metrics(direct_meter, GROUP, first, attributes={"shard": -1})
    record_metrics(lens_meter, GROUP, first, attributes={"shard": -1})
    calls: dict[str, int] = {}
    sdk_record = {pending.name: pending.record for pending in buffer._pending.values()}
    for pending in buffer._pending.values():

        def counted(value: Any, attributes: Any = None, *, name: str = pending.name) -> None:
            calls[name] = calls.get(name, 0) + 1
            sdk_record[name](value, attributes)

        pending.record = counted
    held: set[int] = set()
    held_sums: set[int] = set()
    try:
        for interval in range(12):
            repeats = 3 if interval >= 6 else 1
            calls.clear()
            shards = [(shard + 40 * interval) % 400 for shard in range(150)]
            for shard in shards:
                for repeat in range(repeats):
                    recorded = {"g": shard * 0.1 + repeat, "c": interval + repeat, "h": 1.5}
                    record_metrics(direct_meter, GROUP, recorded, attributes={"shard": shard})
                    record_metrics(lens_meter, GROUP, recorded, attributes={"shard": shard})
            for direct_reader, lens_reader in zip(direct_readers, lens_readers, strict=True):
                assert exported(lens_reader) == exported(direct_reader)
            new = len([shard for shard in shards if shard not in held])
            # Where the SDK forgets (never a gauge's series), lens counts only the last
            # interval's series as held, and each is made again by one value.
            new_sums = len([shard for shard in shards if shard not in held_sums])
            again = len(shards) - new_sums if forgotten else 0
            # A new gauge's or sum's first value only (the next ones are buffered); a new
            # histogram's every value of its first interval.
            expected = {
                "eq.gauge": new,
                "eq.counter": new_sums + again,
                "eq.histogram": new_sums * repeats + again,
            }
            assert {name: calls.get(name, 0) for name in expected} == expected
            held |= set(shards)
            held_sums = set(shards) if forgotten else held
    finally:
        direct_provider.shutdown()
        lens_provider.shutdown()


def test_the_series_lens_counts_as_held_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `KNOWN_MAX` series an instrument remembers no more: the others count as new
    every interval (their first value goes to the SDK at once), and the points stay
    those of direct recording."""
    monkeypatch.setattr(_hand_over, "KNOWN_MAX", 10)
    monkeypatch.setattr(_coalesce, "KNOWN_MAX", 10)
    register_metric_group(GROUP, SPECS)
    direct_provider, direct_meter, direct_readers = build(("cumulative",), coalesced=False)
    lens_provider, lens_meter, lens_readers = build(("cumulative",), coalesced=True)
    buffer = _coalesce.buffer_for(lens_meter)
    assert buffer is not None
    try:
        for interval in range(3):
            for shard in range(30):
                for repeat in range(2):
                    recorded = {"g": shard + repeat * 0.5, "c": repeat + 1}
                    record_metrics(direct_meter, GROUP, recorded, attributes={"shard": shard})
                    record_metrics(lens_meter, GROUP, recorded, attributes={"shard": shard})
            entries = buffer.buffered_entries()
            sent = [entry[2] is not None for p, entry in entries if p.name == "eq.counter"]
            if interval:  # 10 series of each held; the counter's other 20 sent first
                assert (sent.count(False), sent.count(True)) == (10, 20)
                assert len(entries) == 10 + 30
            assert exported(lens_readers[0]) == exported(direct_readers[0])
            assert all(len(pending.known) == 10 for pending in buffer._pending.values())
    finally:
        direct_provider.shutdown()
        lens_provider.shutdown()


def test_where_the_sdk_forgets_delta_series_lens_remembers_only_the_last_intervals() -> None:
    """A release forgetting delta series at each collection keeps only the live ones;
    lens's memory of held series follows them (the last interval's), instead of
    growing with every series ever seen. Elsewhere it follows the SDK's, which keeps all."""
    register_metric_group(GROUP, SPECS)
    provider, meter, readers = build(("delta",), coalesced=True)
    buffer = _coalesce.buffer_for(meter)
    assert buffer is not None
    forgotten = sdk_forgets_delta_series()
    try:
        for interval in range(6):
            for shard in range(50):
                attributes = {"shard": interval * 50 + shard}  # new series every interval
                record_metrics(meter, GROUP, {"c": 1}, attributes=attributes)
                record_metrics(meter, GROUP, {"c": 2}, attributes=attributes)
            exported(readers[0])
        [pending] = buffer._pending.values()
        assert pending.forgets is forgotten
        assert len(pending.known) == (50 if forgotten else 300)
    finally:
        provider.shutdown()


def test_the_value_exported_last_is_the_one_recorded_last() -> None:
    """A thread sets many gauge series, new ones and ones the SDK holds, while another
    collects all along: a value sent at once never lands before an older one of its
    series still being handed over, nor a handed-over one after a newer one, so the
    value exported last for each series is the one recorded last."""
    register_metric_group(GROUP, SPECS)
    provider, meter, readers = build(("cumulative",), coalesced=True)
    exported_last: dict[int, float] = {}
    last: dict[int, float] = {}
    done = threading.Event()

    def record() -> None:
        for step in range(40):
            for index in range(100):
                shard = index if index % 2 else step * 100 + index  # half new each step
                if (shard + step) % 3:  # most series once, some skipped, each step
                    value = float(step * 1000 + index)
                    record_metrics(meter, GROUP, {"g": value}, attributes={"shard": shard})
                    last[shard] = value
            time.sleep(0)

    def collect() -> None:
        while not done.is_set():
            gauge_values(readers[0], exported_last)

    recorder = threading.Thread(target=record)
    collector = threading.Thread(target=collect)
    try:
        collector.start()
        recorder.start()
        recorder.join(60)
        done.set()
        collector.join(60)
        gauge_values(readers[0], exported_last)
        assert exported_last == last
    finally:
        provider.shutdown()


def test_a_series_being_handed_over_is_buffered_even_with_one_thread() -> None:
    """A new value of a series whose older value a flush is still handing over waits in
    the buffer, though one thread records and the SDK holds no series of it: sent at
    once, it would reach the SDK first, and the older value would overwrite it."""
    register_metric_group(GROUP, SPECS)
    provider, meter, readers = build(("cumulative",), coalesced=True)
    buffer = _coalesce.buffer_for(meter)
    assert buffer is not None
    handing_over, release = threading.Event(), threading.Event()
    sent: list[tuple[int, float]] = []
    try:
        # Buffered, new to the SDK: a second thread kept a value meanwhile.
        other = threading.Thread(target=record_metrics, args=(meter, GROUP), kwargs={"g": 0.0})
        other.start()
        other.join(10)
        record_metrics(meter, GROUP, g=5.0, attributes={"shard": 0})
        [pending] = buffer._pending.values()
        sdk_set = pending.record

        def set_and_note(value: float, attributes: Any = None) -> None:
            if attributes:
                sent.append((attributes["shard"], value))
            sdk_set(value, attributes)

        def slow_set(value: float, attributes: Any = None) -> None:
            if attributes:
                handing_over.set()
                release.wait(10)
            set_and_note(value, attributes)

        pending.record = slow_set
        collector = threading.Thread(target=readers[0].get_metrics_data)
        collector.start()
        assert handing_over.wait(10)
        pending.record = set_and_note  # the hand-over under way keeps the slow one
        buffer.threaded = False  # as at the end of that flush, once threads are counted
        record_metrics(meter, GROUP, g=7.0, attributes={"shard": 0})
        record_metrics(meter, GROUP, g=1.0, attributes={"shard": 1})  # not in flight
        release.set()
        collector.join(10)
        assert [entry[0] for _, entry in buffer.buffered_entries()] == [7.0]
        values: dict[int, float] = {}
        gauge_values(readers[0], values)
        assert sent == [(1, 1.0), (0, 5.0)]  # 7.0 went into the series' aggregation
        assert values[0] == 7.0
    finally:
        release.set()
        provider.shutdown()


#: A new series' values whose sum, split after the first and added back, differs in the
#: last bit: the hand-over must replace the value the SDK got at once, not add to it.
SPLIT_AFTER_THE_FIRST = (
    0.5047204674288633,
    0.48492511222773416,
    0.3567899645449557,
    0.3460779190181549,
)


@pytest.mark.parametrize("setup", [("cumulative",), ("delta",)], ids=["cumulative", "delta"])
def test_a_new_sums_interval_after_its_first_value_keeps_the_sums_bits(
    setup: tuple[str, ...],
) -> None:
    """A new counter series and up-down counter series get their first value at once and
    buffer the rest; the exported sum has the bits of adding each value in order, in
    its first interval and in the next."""
    first = 0 + SPLIT_AFTER_THE_FIRST[0]
    total = sum(SPLIT_AFTER_THE_FIRST[1:], first)
    assert first + (total - first) != total  # the values do what the test needs
    register_metric_group(GROUP, SPECS)
    direct_provider, direct_meter, direct_readers = build(setup, coalesced=False)
    lens_provider, lens_meter, lens_readers = build(setup, coalesced=True)
    try:
        for interval in range(2):
            for value in SPLIT_AFTER_THE_FIRST:
                attributes = {"rank": interval}  # a new series each interval
                for meter in (direct_meter, lens_meter):
                    record_metrics(meter, GROUP, {"c": value, "u": value}, attributes=attributes)
            assert exported(lens_readers[0]) == exported(direct_readers[0])
    finally:
        direct_provider.shutdown()
        lens_provider.shutdown()


def test_a_sums_first_value_collected_before_the_rest_is_counted_once() -> None:
    """A collection can export a new series' first value (sent at once) before its
    buffered rest is handed over (a flush that had taken the buffer already): the rest is
    then added to what the SDK holds, so every value is counted once."""
    register_metric_group(GROUP, SPECS)
    provider, meter, readers = build(("cumulative",), coalesced=True)
    try:
        record_metrics(meter, GROUP, c=1, attributes={"rank": -1})  # lens finds the SDK's
        exported(readers[0])
        record_metrics(meter, GROUP, c=5, attributes={"rank": 0})  # new: sent at once
        # A collection the buffer does not see first, as when it had been flushed already.
        _otel_internals.meter_consumer(meter).collect(readers[0])
        record_metrics(meter, GROUP, c=7, attributes={"rank": 0})
        points = dict(exported(readers[0])["eq.counter"][-1])
        assert points[(("rank", "int", "0"),)] == ("number", ("int", 12))
    finally:
        provider.shutdown()


def test_values_recorded_while_another_thread_collects_are_each_exported_once() -> None:
    """Delta collections on one thread, records and flushes on another: the sum of every
    exported point is the sum recorded (on releases that discard delta aggregations at a
    collection, a hand-over writes under the SDK's lock, as its own recording does)."""
    register_metric_group(GROUP, SPECS)
    provider, meter, readers = build(("delta",), coalesced=True)
    totals: list[int] = []
    done = threading.Event()

    def collect() -> None:
        while not done.is_set():
            totals.append(counter_total(readers[0]))

    collector = threading.Thread(target=collect)
    try:
        collector.start()
        for step in range(3000):
            record_metrics(meter, GROUP, c=1, attributes={"rank": step % 4})
            if step % 50 == 0:
                totals.append(counter_total(readers[0]))
        done.set()
        collector.join(60)
        totals.append(counter_total(readers[0]))
        assert sum(totals) == 3000
    finally:
        done.set()
        provider.shutdown()


@pytest.mark.parametrize("locked", [False, True], ids=["unlocked", "locked"])
def test_series_another_thread_makes_are_handed_over_as_direct_recording_exports(
    locked: bool,
) -> None:
    """A second thread's new series are buffered (never sent at once with two threads),
    so the hand-over makes them in the SDK by recording; with the main thread's held and
    new series, every interval's points are direct recording's. `locked` hands over as on
    releases that discard delta aggregations at a collection (opentelemetry-sdk 1.45.2
    and newer): under the SDK's lock, remembering only the last interval's series; it
    is forced here so every release runs that path (1.45.2 and newer run it for real)."""
    register_metric_group(GROUP, SPECS)
    direct_provider, direct_meter, direct_readers = build(("delta",), coalesced=False)
    lens_provider, lens_meter, lens_readers = build(("delta",), coalesced=True)
    buffer = _coalesce.buffer_for(lens_meter)
    assert buffer is not None
    first = {"g": 0.5, "c": 1, "h": 1.0}
    for meter in (direct_meter, lens_meter):
        record_metrics(meter, GROUP, first, attributes={"main": -1})
    assert exported(lens_readers[0]) == exported(direct_readers[0])
    for pending in buffer._pending.values():
        assert pending.match is not None
        if locked:
            pending.match.lock = threading.Lock()
            pending.forgets = True
    try:
        for interval in range(4):
            for shard in (0, 1, interval + 2):  # two series held, one new each interval
                for repeat in range(2):
                    recorded = {"g": shard + repeat * 0.25, "c": repeat + 1, "h": 2.0 + repeat}
                    for meter in (direct_meter, lens_meter):
                        record_metrics(meter, GROUP, recorded, attributes={"main": shard})
            for meter in (direct_meter, lens_meter):  # a new series of one value
                record_metrics(meter, GROUP, {"c": 4}, attributes={"once": interval})
            thread_values = {"g": 0.1 * interval, "c": 3, "h": 0.1 + interval}
            for values in (thread_values, {**thread_values, "h": 7.5}):
                record_metrics(direct_meter, GROUP, values, attributes={"thread": interval})
                other = threading.Thread(
                    target=record_metrics,
                    args=(lens_meter, GROUP, values),
                    kwargs={"attributes": {"thread": interval}},
                )
                other.start()
                other.join(10)
            assert exported(lens_readers[0]) == exported(direct_readers[0])
        if locked:  # only the last interval's series count as held
            assert all(len(pending.known) <= 5 for pending in buffer._pending.values())
    finally:
        direct_provider.shutdown()
        lens_provider.shutdown()


@pytest.mark.parametrize("locked", [False, True], ids=["unlocked", "locked"])
def test_an_sdk_call_failing_at_the_hand_over_drops_that_series_only(
    locked: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK refusing a series the hand-over makes by recording (a second thread's new
    series) drops that series, warned; the collection and every other series go on."""
    register_metric_group(GROUP, SPECS)
    provider, meter, readers = build(("delta",), coalesced=True)
    buffer = _coalesce.buffer_for(meter)
    assert buffer is not None
    record_metrics(meter, GROUP, {"g": 0.5, "c": 1, "h": 1.0}, attributes={"main": 0})
    exported(readers[0])
    for pending in buffer._pending.values():
        assert pending.match is not None
        if locked:
            pending.match.lock = threading.Lock()
            pending.forgets = True

        def refusing(value: Any, attributes: Any = None, *, sdk: Any = pending.record) -> None:
            if attributes and "refused" in attributes:
                raise RuntimeError("refused by the SDK")
            sdk(value, attributes)

        pending.record = refusing
    try:
        values = {"g": 0.25, "c": 2, "h": 3.0}
        other = threading.Thread(
            target=record_metrics,
            args=(meter, GROUP, values),
            kwargs={"attributes": {"refused": 1}},
        )
        other.start()
        other.join(10)
        record_metrics(meter, GROUP, values, attributes={"main": 0})
        with caplog.at_level(logging.WARNING, logger="nemo.lens"):
            points = exported(readers[0])
        assert {name: len(metric[-1]) for name, metric in points.items()} == {
            "eq.gauge": 1,
            "eq.counter": 1,
            "eq.histogram": 1,
        }
        assert any("refused by the SDK" in record.getMessage() for record in caplog.records)
    finally:
        provider.shutdown()


def test_a_release_that_replaces_its_series_mapping_is_followed() -> None:
    """A release that replaces an instrument's mapping of series to aggregations at a
    collection (as 1.45.2 does for delta) is noticed at the next hand-over: nothing is
    written into the discarded aggregations, and the points stay direct recording's."""
    register_metric_group(GROUP, SPECS)
    direct_provider, direct_meter, direct_readers = build(("cumulative",), coalesced=False)
    lens_provider, lens_meter, lens_readers = build(("cumulative",), coalesced=True)
    buffer = _coalesce.buffer_for(lens_meter)
    assert buffer is not None
    try:
        for interval in range(3):
            for value in (1.5, 2.5):
                for meter in (direct_meter, lens_meter):
                    record_metrics(meter, GROUP, {"g": value}, attributes={"r": 0})
            assert exported(lens_readers[0]) == exported(direct_readers[0])
            [pending] = buffer._pending.values()
            assert pending.match is not None
            assert pending.forgets is (interval == 2)
            if interval == 1:  # as a forgetting release does at its collection
                for provider in (direct_provider, lens_provider):
                    consumer = _otel_internals.provider_consumer(provider)
                    for storage in consumer._reader_storages.values():
                        for matches in storage._instrument_view_instrument_matches.values():
                            for match in matches:
                                match._attributes_aggregation = {}
    finally:
        direct_provider.shutdown()
        lens_provider.shutdown()


def test_an_sdk_match_that_resets_on_collect_hands_over_under_its_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the SDK's view match says it discards delta aggregations at collections
    (`_reset_on_collect`, opentelemetry-sdk 1.45.2 and newer), lens hands over under that
    match's lock and remembers only the last interval's series; the points stay direct
    recording's. Set on the installed SDK's class here, so every release runs it."""
    from opentelemetry.sdk.metrics._internal import _view_instrument_match

    matches = _view_instrument_match._ViewInstrumentMatch
    monkeypatch.setattr(matches, "_reset_on_collect", True, raising=False)
    register_metric_group(GROUP, SPECS)
    direct_provider, direct_meter, direct_readers = build(("delta",), coalesced=False)
    lens_provider, lens_meter, lens_readers = build(("delta",), coalesced=True)
    buffer = _coalesce.buffer_for(lens_meter)
    assert buffer is not None
    try:
        for interval in range(3):
            for value in (1.5, 2.5):
                recorded = {"g": value, "c": 2, "h": value}
                for meter in (direct_meter, lens_meter):
                    record_metrics(meter, GROUP, recorded, attributes={"r": interval % 2})
            assert exported(lens_readers[0]) == exported(direct_readers[0])
        # The delta ones (1.45.2 and newer set the flag per match, for delta kinds).
        sums = [p for p in buffer._pending.values() if p.name != "eq.gauge"]
        assert [pending.forgets for pending in sums] == [True, True]
        assert all(pending.match and pending.match.lock is not None for pending in sums)
    finally:
        direct_provider.shutdown()
        lens_provider.shutdown()


def test_an_sdk_lens_cannot_search_is_recorded_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Looking for the SDK's aggregations failing in an unexpected way leaves the
    instrument without a hand-over into them; recording goes on, points unchanged."""

    def failing(instrument: object, kind: str) -> None:
        raise KeyError("an SDK lens does not know")

    monkeypatch.setattr(_otel_internals, "series_match", failing)
    register_metric_group(GROUP, SPECS)
    direct_provider, direct_meter, direct_readers = build(("cumulative",), coalesced=False)
    lens_provider, lens_meter, lens_readers = build(("cumulative",), coalesced=True)
    try:
        for _ in range(2):
            for meter in (direct_meter, lens_meter):
                record_metrics(meter, GROUP, {"g": 1.5, "c": 2}, attributes={"r": 0})
                record_metrics(meter, GROUP, {"g": 2.5, "c": 3}, attributes={"r": 0})
            assert exported(lens_readers[0]) == exported(direct_readers[0])
    finally:
        direct_provider.shutdown()
        lens_provider.shutdown()


def test_a_release_whose_aggregations_lens_cannot_read_gets_each_series_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If reading the SDK's aggregations fails at a flush, that failure is warned and each
    buffered series is recorded by one SDK call instead: the points stay the same."""
    register_metric_group(GROUP, SPECS)
    direct_provider, direct_meter, direct_readers = build(("cumulative",), coalesced=False)
    lens_provider, lens_meter, lens_readers = build(("cumulative",), coalesced=True)
    buffer = _coalesce.buffer_for(lens_meter)
    assert buffer is not None

    def unreadable(pending: object, match: object) -> None:
        raise AttributeError("_attributes_aggregation")

    try:
        for interval in range(3):
            if interval == 1:
                monkeypatch.setattr(_coalesce.PendingInstrument, "current_aggregations", unreadable)
            for value in (1.5, 2.5):
                for meter in (direct_meter, lens_meter):
                    record_metrics(meter, GROUP, {"g": value, "c": 2}, attributes={"r": 0})
            assert exported(lens_readers[0]) == exported(direct_readers[0])
    finally:
        direct_provider.shutdown()
        lens_provider.shutdown()


def counter_total(reader: InMemoryMetricReader) -> int:
    """Collect; the sum of `eq.counter`'s points."""
    points = exported(reader).get("eq.counter")
    return sum(value for _, (_, (_, value)) in points[-1]) if points else 0


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
