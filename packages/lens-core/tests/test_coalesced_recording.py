"""Coalesced recording on lens's own pipeline: what it buffers, when it flushes, and that
threads, fork, force_flush and shutdown lose nothing (issue 14)."""

from __future__ import annotations

import _thread
import logging
import math
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.metrics")

from lens_children import run_python
from lens_exporters import RecordingMetricExporter
from lens_fork import in_child
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import TracerProvider

from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    TelemetryHandle,
    record_metrics,
    register_metric_group,
    setup_telemetry,
)
from nemo.lens.instruments import _coalesce, _hand_over
from nemo.lens.testing import isolated_telemetry

GROUP = "coalesced"
SPECS = [
    MetricSpec("loss", "co.loss", "gauge"),
    MetricSpec("tokens", "co.tokens", "counter"),
    MetricSpec("queue", "co.queue", "up_down_counter"),
    MetricSpec("step_ms", "co.step_ms", "histogram", unit="ms"),
]
DELTA: dict[type, AggregationTemporality] = {
    Counter: AggregationTemporality.DELTA,
    UpDownCounter: AggregationTemporality.DELTA,
    Histogram: AggregationTemporality.DELTA,
}


def points_of(data: MetricsData | None, name: str) -> list[Any]:
    """Every point of metric `name` in one collection's data."""
    if data is None:
        return []
    return [
        point
        for resource_metrics in data.resource_metrics
        for scope in resource_metrics.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


def values_of(data: MetricsData | None, name: str) -> list[Any]:
    """Every point value of metric `name` in one collection's data."""
    return [getattr(point, "value", None) for point in points_of(data, name)]


def buffered(handle: TelemetryHandle) -> list[tuple[_coalesce.PendingInstrument, list[Any]]]:
    buffer = _coalesce.buffer_for(handle.meter)
    assert buffer is not None
    return buffer.buffered_entries()


def pending_series(handle: TelemetryHandle) -> int:
    return len(buffered(handle))


@pytest.fixture(autouse=True)
def _isolated() -> Iterator[None]:
    with isolated_telemetry():
        register_metric_group(GROUP, SPECS)
        yield


def in_memory_setup(**reader_options: Any) -> tuple[TelemetryHandle, InMemoryMetricReader]:
    reader = InMemoryMetricReader(**reader_options)
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, traces_enabled=False), metric_reader=reader
    )
    return handle, reader


def test_setup_meters_coalesce_and_other_meters_record_directly() -> None:
    """handle.meter and handle.get_meter() coalesce; a provider lens did not build does not."""
    handle, reader = in_memory_setup()
    own = MeterProvider(metric_readers=[InMemoryMetricReader()], shutdown_on_exit=False)
    try:
        assert _coalesce.buffer_for(handle.meter) is not None
        assert _coalesce.buffer_for(handle.get_meter("another.scope")) is not None
        assert _coalesce.buffer_for(own.get_meter("not.lens")) is None
        # New series get their first value at once, as direct recording sends it: the
        # counter's entry notes it (its next value is kept from it on), the histogram's
        # sends the rest of its first interval at once too.
        record_metrics(handle.meter, GROUP, loss=0.5, tokens=3, step_ms=2.0)
        kept = {pending.name: entry[:3] for pending, entry in buffered(handle)}
        assert kept == {
            "co.tokens": [_hand_over.HANDED_OVER, None, 3],
            "co.step_ms": [_hand_over.HANDED_OVER, None, 0],
        }
        assert values_of(reader.get_metrics_data(), "co.loss") == [0.5]
        # Series the SDK holds are buffered: the gauge, the counter and the histogram.
        record_metrics(handle.meter, GROUP, loss=0.25, tokens=3, step_ms=2.0)
        assert pending_series(handle) == 3
        # A reader sees the values right after record_metrics, as with direct recording.
        data = reader.get_metrics_data()
        assert values_of(data, "co.loss") == [0.25]
        assert values_of(data, "co.tokens") == [6]
        assert pending_series(handle) == 0
    finally:
        own.shutdown()
        handle.shutdown()


def test_a_collection_hands_over_the_last_gauge_value_and_the_interval_sum() -> None:
    """A gauge hands over its last value, a sum the sum of the interval, once."""
    handle, reader = in_memory_setup(preferred_temporality=DELTA)
    try:
        for step in range(5):
            record_metrics(handle.meter, GROUP, loss=float(step), tokens=10, queue=-1)
        data = reader.get_metrics_data()
        assert values_of(data, "co.loss") == [4.0]
        assert values_of(data, "co.tokens") == [50]
        assert values_of(data, "co.queue") == [-5]
        # Nothing recorded since: a delta reader reports no sum (and the buffer is empty).
        assert values_of(reader.get_metrics_data(), "co.tokens") == []
    finally:
        handle.shutdown()


def test_flushed_series_leave_the_buffer() -> None:
    """Memory stays bounded: after a collection the buffer holds no series at all, even
    for attribute sets that never come back."""
    handle, reader = in_memory_setup()
    try:
        for sample in range(200):
            # A new series' first value goes to the SDK at once; its second is buffered.
            for loss in (1.0, 2.0):
                record_metrics(handle.meter, GROUP, loss=loss, attributes={"sample": sample})
        assert pending_series(handle) == 200
        assert set(values_of(reader.get_metrics_data(), "co.loss")) == {2.0}
        assert pending_series(handle) == 0
    finally:
        handle.shutdown()


def test_invalid_values_are_refused_at_record_time(caplog: pytest.LogCaptureFixture) -> None:
    """Validation and its warnings happen in record_metrics, not at the collection."""
    handle, reader = in_memory_setup()
    try:
        with caplog.at_level(logging.WARNING, logger="nemo.lens"):
            record_metrics(handle.meter, GROUP, loss=math.nan, tokens=-3, queue=True)
        # Before any collection: the warnings are there and nothing was buffered.
        messages = " ".join(record.getMessage() for record in caplog.records)
        assert "'loss'" in messages
        assert "not finite" in messages
        assert "'tokens'" in messages
        assert ">= 0" in messages
        assert "'queue'" in messages
        assert "bool" in messages
        assert pending_series(handle) == 0
        assert values_of(reader.get_metrics_data(), "co.loss") == []
    finally:
        handle.shutdown()


def test_sixteen_threads_adding_to_one_counter_give_the_exact_sum() -> None:
    """While a reader collects (delta) all along, no add is lost or counted twice."""
    handle, reader = in_memory_setup(preferred_temporality=DELTA)
    threads_n, adds_n = 16, 2_000
    start = threading.Barrier(threads_n + 1)
    collected: list[int] = []
    done = threading.Event()

    def add() -> None:
        start.wait(10)
        for number in range(adds_n):
            record_metrics(handle.meter, GROUP, tokens=1, attributes={"part": "a"})
            if number % 100 == 0:
                # Threads no longer wait for each other to record, so one could do all its
                # adds in one hold of the interpreter lock: let the collector in.
                time.sleep(0)

    def collect() -> None:
        start.wait(10)
        while not done.is_set():
            collected.extend(values_of(reader.get_metrics_data(), "co.tokens"))

    workers = [threading.Thread(target=add) for _ in range(threads_n)]
    collector = threading.Thread(target=collect)
    try:
        for thread in [*workers, collector]:
            thread.start()
        for thread in workers:
            thread.join(60)
        done.set()
        collector.join(60)
        collected.extend(values_of(reader.get_metrics_data(), "co.tokens"))
        assert sum(collected) == threads_n * adds_n
        assert len(collected) > 1  # the collector did run in between
    finally:
        handle.shutdown()


def test_the_gauge_value_set_last_wins_whichever_thread_set_it() -> None:
    """Threads buffer apart; a gauge series several threads set hands over the value set
    last, and each thread's sum of one series is added in."""
    handle, reader = in_memory_setup(preferred_temporality=DELTA)
    turns = [threading.Event() for _ in range(4)]

    def first() -> None:
        record_metrics(handle.meter, GROUP, loss=1.0, tokens=1)
        turns[0].set()
        turns[1].wait(10)
        record_metrics(handle.meter, GROUP, loss=3.0, tokens=4)
        turns[2].set()

    def second() -> None:
        turns[0].wait(10)
        record_metrics(handle.meter, GROUP, loss=2.0, tokens=2)
        turns[1].set()

    try:
        for order in ((first, second), (second, first)):
            for turn in turns:
                turn.clear()
            threads = [threading.Thread(target=target) for target in order]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            record_metrics(handle.meter, GROUP, tokens=8)  # a third thread's values
            data = reader.get_metrics_data()
            assert values_of(data, "co.loss") == [3.0]
            assert values_of(data, "co.tokens") == [15]
    finally:
        handle.shutdown()


def test_a_gauge_value_set_again_and_again_still_wins_over_another_threads() -> None:
    """A thread that set a gauge series twice (its later values take the short path to
    the series' entry) and sets it once more after a second thread set it: its last
    value wins."""
    handle, reader = in_memory_setup()
    turns = [threading.Event() for _ in range(3)]

    def first() -> None:
        turns[0].wait(10)  # both threads keep values in the buffer from here on
        record_metrics(handle.meter, GROUP, loss=1.0)
        record_metrics(handle.meter, GROUP, loss=1.5)
        record_metrics(handle.meter, GROUP, loss=1.75)
        turns[1].set()
        turns[2].wait(10)
        record_metrics(handle.meter, GROUP, loss=3.0)

    def second() -> None:
        record_metrics(handle.meter, GROUP, tokens=1)
        turns[0].set()
        turns[1].wait(10)
        record_metrics(handle.meter, GROUP, loss=2.0)
        turns[2].set()

    try:
        threads = [threading.Thread(target=target) for target in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert values_of(reader.get_metrics_data(), "co.loss") == [3.0]
    finally:
        handle.shutdown()


def test_ints_several_threads_add_past_int64_export_as_one_float_sum(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each thread checks the int64 bound against a budget of its own; together they never
    let the SDK's int sum pass int64: the sum turns into a float, with one warning."""
    handle, reader = in_memory_setup()
    threads_n = 4

    def add() -> None:
        for _ in range(4):
            record_metrics(handle.meter, GROUP, tokens=2**60)

    try:
        threads = [threading.Thread(target=add) for _ in range(threads_n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        record_metrics(handle.meter, GROUP, tokens=1)
        [value] = values_of(reader.get_metrics_data(), "co.tokens")
        assert type(value) is float
        assert value == pytest.approx(threads_n * 4 * 2**60 + 1)
        warned = [r for r in caplog.records if "would pass int64" in r.getMessage()]
        assert len(warned) == 1
        record_metrics(handle.meter, GROUP, tokens=3)
        assert type(values_of(reader.get_metrics_data(), "co.tokens")[0]) is float
    finally:
        handle.shutdown()


def test_an_ended_thread_loses_no_value_and_leaves_no_shard() -> None:
    """Values buffered by a thread that has ended reach the next collection; then its
    shard goes, so a process that starts a thread per task keeps a bounded buffer."""
    handle, reader = in_memory_setup(preferred_temporality=DELTA)
    buffer = _coalesce.buffer_for(handle.meter)
    assert buffer is not None
    try:
        for number in range(50):
            thread = threading.Thread(
                target=record_metrics, args=(handle.meter, GROUP), kwargs={"tokens": number}
            )
            thread.start()
            thread.join(30)
        assert len(buffer._shards) == 50
        assert values_of(reader.get_metrics_data(), "co.tokens") == [sum(range(50))]
        assert buffer._shards == []
    finally:
        handle.shutdown()


def test_the_gauge_value_set_last_wins_over_one_set_before_a_second_thread_came() -> None:
    """A value set again before any other thread recorded is older than the first one a
    new thread sets (in a fresh interpreter: the order numbers are the process's)."""
    script = textwrap.dedent(
        """
        import threading
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from nemo.lens import (
            MetricSpec, NemoLensConfig, record_metrics, register_metric_group, setup_telemetry,
        )
        register_metric_group("g", [MetricSpec("loss", "t.loss", "gauge")])
        reader = InMemoryMetricReader()
        handle = setup_telemetry(
            NemoLensConfig(enabled=True, traces_enabled=False), metric_reader=reader
        )
        record_metrics(handle.meter, "g", loss=1.0)
        record_metrics(handle.meter, "g", loss=2.0)
        thread = threading.Thread(target=record_metrics, args=(handle.meter, "g"),
                                  kwargs={"loss": 3.0})
        thread.start()
        thread.join(30)
        data = reader.get_metrics_data()
        print([point.value for rm in data.resource_metrics for sm in rm.scope_metrics
               for metric in sm.metrics for point in metric.data.data_points])
        """
    )
    result = run_python("-c", script)
    assert (result.returncode, result.stdout.strip()) == (0, "[3.0]"), result.stderr


def test_a_failing_direct_value_is_warned_and_the_call_records_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A value that goes to the SDK at once (here a float sum past a float's range) and
    fails there is warned once; the call's other values still record."""
    handle, reader = in_memory_setup()
    try:
        record_metrics(handle.meter, GROUP, tokens=1e308, step_ms=1.0)
        buffer = _coalesce.buffer_for(handle.meter)
        assert buffer is not None
        [tokens] = [p for p in buffer._pending.values() if p.name == "co.tokens"]

        def failing_add(value: float, attributes: object = None) -> None:
            raise RuntimeError("instrument gone")

        tokens.record = failing_add
        record_metrics(handle.meter, GROUP, tokens=1e308, step_ms=2.0, loss=0.5)
        data = reader.get_metrics_data()
        assert values_of(data, "co.loss") == [0.5]
        assert [p.count for p in points_of(data, "co.step_ms")] == [2]
        warned = [r.getMessage() for r in caplog.records if "instrument gone" in r.getMessage()]
        assert len(warned) == 1
        assert "'co.tokens'" in warned[0]
    finally:
        handle.shutdown()


def test_ended_threads_give_back_the_int64_room_they_took() -> None:
    """Each thread checks the int64 bound against room it took from the instrument; a
    thread that ended gives back what it did not spend, so threads coming and going never
    turn a small counter into floats."""
    handle, reader = in_memory_setup()
    try:
        for _ in range(40):
            thread = threading.Thread(
                target=record_metrics, args=(handle.meter, GROUP), kwargs={"tokens": 1}
            )
            thread.start()
            thread.join(30)
        reader.get_metrics_data()
        buffer = _coalesce.buffer_for(handle.meter)
        assert buffer is not None
        [tokens] = buffer._pending.values()
        assert tokens._int64_left == 2**63 - 1 - 40
        record_metrics(handle.meter, GROUP, tokens=2)
        [value] = values_of(reader.get_metrics_data(), "co.tokens")
        assert (type(value), value) == (int, 42)
    finally:
        handle.shutdown()


def test_a_thread_python_never_started_leaves_no_shard_once_ended() -> None:
    """A thread started outside `threading` (a C extension's, `_thread`'s) is seen to end
    too: its values are taken, and its shard goes."""
    handle, reader = in_memory_setup(preferred_temporality=DELTA)
    buffer = _coalesce.buffer_for(handle.meter)
    assert buffer is not None
    done = threading.Event()

    def foreign() -> None:
        record_metrics(handle.meter, GROUP, tokens=5)
        done.set()

    try:
        _thread.start_new_thread(foreign, ())
        assert done.wait(30)
        deadline = time.monotonic() + 30
        while not buffer._shards[-1].ended and time.monotonic() < deadline:
            time.sleep(0.01)
        assert values_of(reader.get_metrics_data(), "co.tokens") == [5]
        assert buffer._shards == []
    finally:
        handle.shutdown()


def test_values_recorded_at_exit_after_a_collection_are_exported() -> None:
    """At interpreter exit the main thread counts as stopped for `threading`, yet atexit
    handlers still record: what they record after a collection reaches the next one."""
    script = textwrap.dedent(
        """
        import atexit
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from nemo.lens import (
            MetricSpec, NemoLensConfig, record_metrics, register_metric_group, setup_telemetry,
        )
        register_metric_group("g", [MetricSpec("tokens", "t.tokens", "counter")])
        reader = InMemoryMetricReader()
        handle = setup_telemetry(
            NemoLensConfig(enabled=True, traces_enabled=False), metric_reader=reader
        )

        def tokens():
            data = reader.get_metrics_data()
            return [point.value for rm in data.resource_metrics for sm in rm.scope_metrics
                    for metric in sm.metrics for point in metric.data.data_points]

        @atexit.register
        def at_exit():
            record_metrics(handle.meter, "g", tokens=10)
            first = tokens()
            record_metrics(handle.meter, "g", tokens=100)
            print(first, tokens())

        record_metrics(handle.meter, "g", tokens=1)
        tokens()
        """
    )
    result = run_python("-c", script)
    assert (result.returncode, result.stdout.strip()) == (0, "[11] [111]"), result.stderr


def test_a_thread_recording_during_a_hand_over_never_overtakes_an_older_value() -> None:
    """A new series goes to the SDK at once only while one thread keeps values: a new
    thread that sets a gauge series (new to the SDK) during the hand-over of an interval
    two threads filled (both ended since) waits for the next flush instead of overtaking
    the older value."""
    sent: list[float] = []
    during_hand_over: list[Any] = []

    class Gauge:
        def set(self, value: float, attributes: Any = None) -> None:
            if attributes and attributes.get("s") == "x":
                sent.append(value)
            if during_hand_over and attributes and attributes.get("s") == "first":
                during_hand_over.pop()()

    buffer = _coalesce.CoalescingBuffer(single_reader=True)
    pending = buffer.instrument(Gauge(), "set", "gauge")

    def in_thread(*values: tuple[float, str]) -> None:
        thread = threading.Thread(target=keep_each, args=values)
        thread.start()
        thread.join(30)

    def keep_each(*values: tuple[float, str]) -> None:
        for value, series in values:
            pending.keep(value, {"s": series})

    recorded, go_on = threading.Event(), threading.Event()

    def first_thread() -> None:
        keep_each(*[(0.0, f"n{number}") for number in range(150)])
        recorded.set()
        go_on.wait(30)
        keep_each((1.0, "first"), (1.0, "x"))

    first = threading.Thread(target=first_thread)
    first.start()
    assert recorded.wait(30)
    buffer.flush()
    assert len(pending.known) == 150  # each sent at once, by the one thread
    in_thread((0.5, "x"))  # a second thread: buffered from now on
    go_on.set()
    first.join(30)
    during_hand_over.append(lambda: in_thread((2.0, "x")))
    buffer.flush()
    buffer.flush()
    assert sent == [1.0, 2.0]


def test_a_gauge_set_later_on_another_thread_wins_over_the_first_threads_value() -> None:
    """The main thread's shard is taken first; the value a newer thread set after it wins."""
    handle, reader = in_memory_setup()
    try:
        record_metrics(handle.meter, GROUP, loss=1.0)
        thread = threading.Thread(
            target=record_metrics, args=(handle.meter, GROUP), kwargs={"loss": 2.0}
        )
        thread.start()
        thread.join(30)
        assert values_of(reader.get_metrics_data(), "co.loss") == [2.0]
    finally:
        handle.shutdown()


def test_an_unkeyable_sum_reaching_the_sdk_at_once_keeps_the_int64_guard() -> None:
    """A sum's int handed to the SDK at once (attributes no series key holds) counts
    towards the int64 bound too: past it, it and later ints go as floats."""
    added: list[object] = []

    class Counter:
        def add(self, value: float, attributes: object = None) -> None:
            added.append(value)

    buffer = _coalesce.CoalescingBuffer(single_reader=True)
    keep = buffer.instrument(Counter(), "add", "counter").keep
    for _ in range(3):
        keep(2**62, {"ids": [1, 2]})
    keep(1, {"ids": [3]})
    assert [type(value) for value in added] == [int, float, float, float]
    assert added[1:] == [float(2**62), float(2**62), 1.0]


def test_force_flush_and_shutdown_export_every_buffered_value() -> None:
    """force_flush and shutdown hand over every value recorded before them."""
    exporter = RecordingMetricExporter()
    # An interval that never elapses in the test: only force_flush and shutdown export.
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=600_000)
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, traces_enabled=False), metric_reader=reader
    )
    record_metrics(handle.meter, GROUP, loss=0.25, tokens=7)
    assert handle.force_flush()
    assert values_of(exporter.batches[-1], "co.tokens") == [7]
    assert values_of(exporter.batches[-1], "co.loss") == [0.25]
    record_metrics(handle.meter, GROUP, loss=0.75, tokens=5)
    handle.shutdown()
    assert values_of(exporter.batches[-1], "co.tokens") == [12]
    assert values_of(exporter.batches[-1], "co.loss") == [0.75]


def test_a_forked_child_starts_empty_and_never_flushes_the_parent_values() -> None:
    """A child has no buffer of its parent's, and the parent's pending value stays pending;
    what the child records reaches the parent's next collection beside it."""
    handle, reader = in_memory_setup(preferred_temporality=DELTA)
    try:
        record_metrics(handle.meter, GROUP, tokens=0)
        reader.get_metrics_data()  # the SDK holds the series: its next value is buffered
        record_metrics(handle.meter, GROUP, tokens=4)  # pending in the parent at the fork
        parent_buffer = _coalesce.buffer_for(handle.meter)
        assert parent_buffer is not None

        def child() -> dict[str, Any]:
            inherited_buffer = _coalesce.buffer_for(handle.meter)
            record_metrics(handle.meter, GROUP, tokens=100)  # into the child's region
            inherited_collect = reader.get_metrics_data()
            # The parent's pending value was neither flushed nor added to here.
            still_pending = [entry[0] for _, entry in parent_buffer.buffered_entries()]
            own_reader = InMemoryMetricReader()
            own = setup_telemetry(
                NemoLensConfig(enabled=True, traces_enabled=False), metric_reader=own_reader
            )
            record_metrics(own.meter, GROUP, tokens=1)
            own_buffer = _coalesce.buffer_for(own.meter)
            own_values = values_of(own_reader.get_metrics_data(), "co.tokens")
            own.shutdown()
            return {
                "inherited_buffer": inherited_buffer is not None,
                "inherited_collect": inherited_collect is not None,
                "own_buffer": own_buffer is not None,
                "own_values": own_values,
                "still_pending": still_pending,
            }

        assert in_child(child) == {
            "inherited_buffer": False,
            "inherited_collect": False,
            "own_buffer": True,
            "own_values": [1],
            "still_pending": [4],
        }
        # The parent's pending value is still the parent's, once, plus the child's 100.
        assert values_of(reader.get_metrics_data(), "co.tokens") == [104]
        assert values_of(reader.get_metrics_data(), "co.tokens") == []  # delta: no repeat
    finally:
        handle.shutdown()


def test_coalesced_values_get_no_exemplars_even_when_collected_inside_a_span() -> None:
    """With the default trace-based exemplar filter, coalesced values carry no exemplar."""
    handle, reader = in_memory_setup()
    tracer = TracerProvider().get_tracer("exemplars")
    try:
        record_metrics(handle.meter, GROUP, loss=0.5, tokens=1, step_ms=1.0)
        reader.get_metrics_data()  # the SDK holds the series: their values are buffered
        with tracer.start_as_current_span("step"):
            record_metrics(handle.meter, GROUP, loss=1.0, tokens=1, step_ms=5.0)
            data = reader.get_metrics_data()
        assert data is not None
        points = {
            metric.name: metric.data.data_points[0]
            for scope in data.resource_metrics[0].scope_metrics
            for metric in scope.metrics
        }
        if not hasattr(points["co.step_ms"], "exemplars"):
            pytest.skip("this SDK release samples no exemplars")
        assert not points["co.step_ms"].exemplars
        assert not points["co.loss"].exemplars
        assert not points["co.tokens"].exemplars
    finally:
        handle.shutdown()


def test_groups_sharing_an_instrument_share_its_buffer() -> None:
    """Two groups declaring one name record into one SDK instrument; its buffered series is
    one, so the last gauge value is the last one recorded, whichever group recorded it."""
    register_metric_group("other", [MetricSpec("loss_too", "co.loss", "gauge")])
    handle, reader = in_memory_setup()
    try:
        record_metrics(handle.meter, GROUP, loss=1.0)
        record_metrics(handle.meter, "other", loss_too=2.0)
        record_metrics(handle.meter, GROUP, loss=3.0)
        assert pending_series(handle) == 1
        assert values_of(reader.get_metrics_data(), "co.loss") == [3.0]
    finally:
        handle.shutdown()


def test_a_sum_that_overflows_reaches_the_sdk_value_by_value() -> None:
    """Finite values whose sum passes the float range are handed over one by one, so the
    SDK sums them (to infinity, as with direct recording) instead of refusing one infinite
    value; later values of the interval go straight to the SDK."""
    handle, reader = in_memory_setup()
    try:
        for _ in range(3):
            record_metrics(handle.meter, GROUP, queue=1e308)
        assert values_of(reader.get_metrics_data(), "co.queue") == [math.inf]
    finally:
        handle.shutdown()


def test_a_failing_hand_over_is_warned_once_and_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken:
        def set(self, value: float, attributes: object = None) -> None:
            raise RuntimeError("instrument gone")

    buffer = _coalesce.CoalescingBuffer(single_reader=True)
    record = buffer.instrument(Broken(), "set", "gauge").keep
    with caplog.at_level(logging.WARNING, logger="nemo.lens"):
        record(1.0, {"a": 1})  # new: sent at once (and warned)
        record(1.5, {"a": 1})  # buffered: handed over at the flush
        buffer.flush()
        record(2.0, None)
        record(2.5, None)
        buffer.flush()
    messages = [r.getMessage() for r in caplog.records if "instrument gone" in r.getMessage()]
    handing = [message for message in messages if "handing a buffered value" in message]
    assert len(handing) == 1  # two failing hand-overs, warned once
    assert "dropped" in handing[0]


def test_a_set_without_a_series_key_reaches_the_sdk_at_once() -> None:
    """Defensively (cleaned attributes are hashable): attributes that cannot be keyed are
    not buffered but handed to the instrument right away; keyable ones wait."""
    recorded: list[tuple[float, object]] = []

    class Recording:
        def set(self, value: float, attributes: object = None) -> None:
            recorded.append((value, attributes))

    buffer = _coalesce.CoalescingBuffer(single_reader=True)
    record = buffer.instrument(Recording(), "set", "gauge").keep
    record(1.0, {"ids": [1, 2]})
    record(2.0, {"ids": (1, 2)})  # a new series: at once too
    record(3.0, {"ids": (1, 2)})  # one the instrument holds: buffered
    record(4.0, {"ids": [1, 2]})  # never buffered
    assert recorded == [(1.0, {"ids": [1, 2]}), (2.0, {"ids": (1, 2)}), (4.0, {"ids": [1, 2]})]
    buffer.flush()
    assert recorded[3:] == [(3.0, {"ids": (1, 2)})]


def test_an_sdk_meter_without_a_consumer_is_recorded_directly() -> None:
    """A release that renamed the meter's consumer attribute: lens records directly."""
    handle, _ = in_memory_setup()
    try:
        meter = handle.get_meter("renamed.consumer")
        assert _coalesce.buffer_for(meter) is not None
        del meter._measurement_consumer  # type: ignore[attr-defined]
        assert _coalesce.buffer_for(meter) is None
    finally:
        handle.shutdown()


def test_the_fork_hook_forgets_every_buffer() -> None:
    """What a forked child runs (the fork test's child cannot report coverage)."""
    handle, _ = in_memory_setup()
    try:
        assert _coalesce.buffer_for(handle.meter) is not None
        _coalesce._forget_buffers_in_child()
        assert _coalesce.buffer_for(handle.meter) is None
    finally:
        handle.shutdown()


def test_the_cardinality_limit_bounds_what_the_buffer_holds() -> None:
    """With metric_cardinality_limit=5, a gauge and a counter recorded on 50 attribute sets
    keep at most 5 sets plus the overflow series each in the buffer, and export that much.

    The SDK's own per-instrument limit (opentelemetry-sdk 1.45.2 and newer) is lifted on
    lens's pipeline; this one is the limit, and it applies before a value is buffered."""
    reader = InMemoryMetricReader()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, traces_enabled=False, metric_cardinality_limit=5),
        metric_reader=reader,
    )
    try:
        # The first interval's series are new to the SDK and go to it at once; in the
        # second, the SDK holds them all and they are buffered.
        for interval in range(2):
            for rank in range(50):
                record_metrics(handle.meter, GROUP, loss=0.5, tokens=1, attributes={"rank": rank})
            if interval:
                assert pending_series(handle) == 2 * (5 + 1)
            data = reader.get_metrics_data()
        assert len(points_of(data, "co.loss")) == 6
        assert sorted(values_of(data, "co.tokens")) == [2, 2, 2, 2, 2, 90]
    finally:
        handle.shutdown()
