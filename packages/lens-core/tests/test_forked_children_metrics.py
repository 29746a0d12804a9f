"""Forked children's metrics reach their parent's pipeline, exactly, however the children end.

Every test forks for real. The children record through lens only (no setup of their own);
the parent's collections must show what every child recorded, once, whether the child
still runs, left through `os._exit` (as `multiprocessing` children do) or was killed with
SIGKILL right after its last `record_metrics` returned.
"""

from __future__ import annotations

import bisect
import multiprocessing
import os
import select
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from lens_children import free_port
from lens_fork import wait_for_child
from lens_receivers import OtlpReceiver
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    MetricsData,
)

import nemo.lens
from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    TelemetryHandle,
    _forked_children,
    record_metrics,
    register_metric_group,
    setup_telemetry,
)
from nemo.lens._sdk._views import ADVISORY_SUFFICES
from nemo.lens.instruments._spec import SDK_DEFAULT_BUCKETS
from nemo.lens.testing import isolated_telemetry

pytestmark = [
    pytest.mark.fork,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
]

SERIES = 40
CHILDREN = 8
EXIT_WITH_OS_EXIT = range(3)  # leave through os._exit once they recorded
KILLED = range(3, 5)  # SIGKILLed right after their last record_metrics returned
# The rest stay alive, blocked, while the parent collects, and leave afterwards.
BOUNDS = (1.0, 10.0, 100.0)
GAUGE_MODES = {"g_last": None, "g_max": "max", "g_min": "min", "g_sum": "sum"}
SPECS = [
    MetricSpec("adds", "fc.adds", "counter"),
    MetricSpec("level", "fc.level", "up_down_counter"),
    MetricSpec("lat", "fc.lat", "histogram", unit="ms", buckets=BOUNDS),
    *(
        MetricSpec(key, f"fc.{key}", "gauge", multiprocess=mode)
        for key, mode in GAUGE_MODES.items()
    ),
]
#: How long a child may take to report, or to end once told.
CHILD_WAIT_S = 30.0


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    with isolated_telemetry(clear_span_registry=True):
        register_metric_group("fc", SPECS)
        yield


# --- the workload, and what it must add up to -------------------------------------------


def latencies(child: int, series: int) -> list[float]:
    """A child's histogram values on one series: a boundary, one either side, a spread."""
    return [10.0, 0.5 + child, float(child * series % 150), 1.0]


def gauge_value(child: int, series: int) -> int:
    # Child 0 sets the largest values, child 7 the last: "last" and "max" differ.
    return (CHILDREN - child) * 1000 + series


def record_child_workload(handle_meter: Any, child: int) -> None:
    for series in range(SERIES):
        attributes = {"series": series}
        for _ in range(3):
            record_metrics(handle_meter, "fc", adds=child + 1, attributes=attributes)
        record_metrics(handle_meter, "fc", level=child - 3, attributes=attributes)
        for value in latencies(child, series):
            record_metrics(handle_meter, "fc", lat=value, attributes=attributes)
        value = gauge_value(child, series)
        record_metrics(
            handle_meter,
            "fc",
            g_last=value,
            g_max=value,
            g_min=value,
            g_sum=value,
            attributes=attributes,
        )


def record_parent_workload(handle_meter: Any) -> None:
    """The parent's own values on series 0, before any fork."""
    record_metrics(handle_meter, "fc", adds=1000, level=7, lat=0.25, attributes={"series": 0})


def expected(children: range = range(CHILDREN)) -> dict[tuple[str, int], Any]:
    """Per (metric, series): a sum's value, a gauge's value, a histogram's (count, sum, min,
    max, bucket counts), for the parent's workload plus `children`'s."""
    totals: dict[tuple[str, int], Any] = {}
    for series in range(SERIES):
        adds = sum(3 * (child + 1) for child in children)
        level = sum(child - 3 for child in children)
        values = [value for child in children for value in latencies(child, series)]
        if series == 0:
            adds, level, values = adds + 1000, level + 7, [*values, 0.25]
        buckets = [0] * (len(BOUNDS) + 1)
        for value in values:
            buckets[bisect.bisect_left(BOUNDS, value)] += 1
        totals["fc.adds", series] = adds
        totals["fc.level", series] = level
        totals["fc.lat", series] = (len(values), sum(values), min(values), max(values), buckets)
        gauges = [gauge_value(child, series) for child in children]
        totals["fc.g_last", series] = gauges[-1]
        totals["fc.g_max", series] = max(gauges)
        totals["fc.g_min", series] = min(gauges)
        totals["fc.g_sum", series] = sum(gauges)
    return totals


def histogram_values(point: Any) -> tuple[Any, ...]:
    """A histogram point (the SDK's or OTLP's) in the shape `expected` gives."""
    return (point.count, point.sum, point.min, point.max, list(point.bucket_counts))


def sdk_points(data: MetricsData | None) -> dict[tuple[str, int], Any]:
    """A collection's fc.* points, in the shape `expected` gives."""
    found: dict[tuple[str, int], Any] = {}
    for resource_metrics in data.resource_metrics if data is not None else ():
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if not metric.name.startswith("fc."):
                    continue
                point: Any
                for point in metric.data.data_points:
                    key = (metric.name, point.attributes["series"])
                    assert key not in found, f"{key} exported twice in one collection"
                    if metric.name == "fc.lat":
                        found[key] = histogram_values(point)
                    else:
                        found[key] = point.value
    return found


# --- forking ------------------------------------------------------------------------------


class Children:
    """Forked children that run the workload one after another, each reporting through a
    pipe when its last `record_metrics` returned, and ending as the test says."""

    def __init__(self) -> None:
        self.live: dict[int, tuple[int, int]] = {}  # child -> (pid, release pipe's write end)
        self.ended: list[int] = []

    def fork(self, child: int, work: Callable[[int], None], end: str) -> None:
        done_read, done_write = os.pipe()
        release_read, release_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(done_read)
                os.close(release_write)
                work(child)
                os.write(done_write, b"1")
                if end == "killed":
                    os.kill(os.getpid(), signal.SIGKILL)
                if end == "live":
                    os.read(release_read, 1)  # until the parent lets go (or dies)
                code = 0
            finally:
                os._exit(code)
        os.close(done_write)
        os.close(release_read)
        try:
            assert _read_with_timeout(done_read) == b"1", f"child {child} did not record"
        finally:
            os.close(done_read)
        if end == "live":
            self.live[child] = (pid, release_write)
        else:
            os.close(release_write)
            self.ended.append(pid)

    def release(self) -> None:
        for pid, release_write in self.live.values():
            os.write(release_write, b"1")
            os.close(release_write)
            self.ended.append(pid)
        self.live.clear()

    def reap(self) -> list[int]:
        """Wait for every ended child (bounded); return their wait statuses' signals/codes."""
        outcomes = []
        for pid in self.ended:
            outcomes.append(wait_for_child(pid, CHILD_WAIT_S))
        self.ended.clear()
        return outcomes


def _read_with_timeout(fd: int) -> bytes:
    ready, _, _ = select.select([fd], [], [], CHILD_WAIT_S)
    return os.read(fd, 1) if ready else b""


def end_of(child: int) -> str:
    if child in EXIT_WITH_OS_EXIT:
        return "os._exit"
    return "killed" if child in KILLED else "live"


def run_children(handle: TelemetryHandle) -> Children:
    children = Children()
    for child in range(CHILDREN):
        children.fork(child, lambda n: record_child_workload(handle.meter, n), end_of(child))
    return children


# --- the acceptance scenario, through each kind of reader ---------------------------------


def in_memory_handle(**reader_options: Any) -> tuple[TelemetryHandle, InMemoryMetricReader]:
    reader = InMemoryMetricReader(**reader_options)
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="console", traces_enabled=False),
        metric_reader=reader,
    )
    return handle, reader


def test_every_childs_values_reach_one_collection_exactly_however_it_ended() -> None:
    """8 children x 40 series (counters, up-down counters, histograms, a gauge per mode):
    3 leave through os._exit, 2 are SIGKILLed, 3 still run; one collection shows the exact
    totals, and later ones (the children folded in and released) show the same."""
    handle, reader = in_memory_handle()
    record_parent_workload(handle.meter)
    children = run_children(handle)
    try:
        outcomes = sorted(children.reap())  # the ended ones, before the collection
        assert outcomes == sorted([0, 0, 0, -signal.SIGKILL, -signal.SIGKILL])
        assert sdk_points(reader.get_metrics_data()) == expected()
    finally:
        children.release()
        assert children.reap() == [0, 0, 0]
    assert sdk_points(reader.get_metrics_data()) == expected()  # folded, not counted twice
    assert _forked_children._children == []  # every region released once folded
    assert sdk_points(reader.get_metrics_data()) == expected()
    handle.shutdown()


def test_otlp_receives_the_childrens_totals(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same children through the OTLP exporter: the final export a real receiver
    decodes holds the exact totals."""
    with OtlpReceiver("http") as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")  # shutdown's export only
        handle = setup_telemetry(
            NemoLensConfig(enabled=True, exporter="otlp", traces_enabled=False)
        )
        record_parent_workload(handle.meter)
        children = run_children(handle)
        children.release()
        children.reap()
        handle.shutdown(timeout_ms=20_000)
        messages = receiver.received.metric_messages()
    assert len(messages) == 1
    assert otlp_points(messages[0]) == expected()


def otlp_points(request: Any) -> dict[tuple[str, int], Any]:
    found: dict[tuple[str, int], Any] = {}
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if not metric.name.startswith("fc."):
                    continue
                kind = metric.WhichOneof("data")
                for point in getattr(metric, kind).data_points:
                    attributes = {item.key: item.value for item in point.attributes}
                    key = (metric.name, attributes["series"].int_value)
                    assert key not in found
                    if kind == "histogram":
                        found[key] = histogram_values(point)
                    else:
                        found[key] = getattr(point, point.WhichOneof("value"))
    return found


def test_the_prometheus_endpoint_serves_the_merged_series(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same children through the Prometheus exporter: a scrape of the parent's
    endpoint serves each series with the parent's and every child's values merged."""
    from prometheus_client.parser import text_string_to_metric_families

    port = free_port()
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port))
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="prometheus", traces_enabled=False)
    )
    try:
        record_parent_workload(handle.meter)
        children = run_children(handle)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                text = answer.read().decode()
        finally:
            children.release()
            children.reap()
    finally:
        handle.shutdown()
    # Exporters add the unit to the name: fc_lat_milliseconds_count, or fc_lat_ms_count.
    samples = {
        (
            sample.name.replace("_milliseconds", "").replace("_ms", ""),
            sample.labels.get("series"),
            sample.labels.get("le"),
        ): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    for (name, series), value in expected().items():
        label = str(series)
        if name == "fc.lat":
            count, total, _, _, buckets = value
            assert samples["fc_lat_count", label, None] == count
            assert samples["fc_lat_sum", label, None] == pytest.approx(total)
            cumulative = [sum(buckets[: at + 1]) for at in range(len(buckets))]
            for bound, expected_count in zip([*BOUNDS, "+Inf"], cumulative, strict=True):
                le = bound if bound == "+Inf" else str(bound)
                assert samples["fc_lat_bucket", label, le] == expected_count
        elif name == "fc.adds":
            assert samples["fc_adds_total", label, None] == value
        else:
            assert samples[name.replace(".", "_"), label, None] == value


# --- other ways children come and go ------------------------------------------------------


def pool_task(item: int) -> int:
    """A pool worker's task: it records on the meter the parent set up (nothing else)."""
    meter = nemo.lens.get_meter("pool")
    record_metrics(meter, "fc", adds=item, lat=float(item), attributes={"series": item % 4})
    return os.getpid()


def test_a_fork_pool_reports_every_task_however_its_workers_end() -> None:
    """multiprocessing.Pool (fork context) workers end through os._exit; every task's
    values reach the parent through nemo.lens.get_meter(), exactly, with no setup."""
    handle, reader = in_memory_handle()
    items = range(1, 201)
    with multiprocessing.get_context("fork").Pool(4, maxtasksperchild=2) as pool:
        pids = set(pool.map_async(pool_task, items, chunksize=5).get(60))  # bounded
        pool.close()
        pool.join()
    assert len(pids) >= 20  # 40 chunks, 2 per worker: workers came and went
    points = sdk_points(reader.get_metrics_data())
    for series in range(4):
        mine = [item for item in items if item % 4 == series]
        assert points["fc.adds", series] == sum(mine)
        count, total, low, high, _ = points["fc.lat", series]
        assert (count, total, low, high) == (len(mine), float(sum(mine)), min(mine), max(mine))
    handle.shutdown()
    assert _forked_children._children == []


def test_delta_readers_get_each_childs_values_once() -> None:
    """Under delta temporality, a collection carries what children added since the
    previous one, and nothing when they added nothing."""
    handle, reader = in_memory_handle(
        preferred_temporality=dict.fromkeys(_sdk_instrument_classes(), AggregationTemporality.DELTA)
    )
    to_child, from_child = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            record_metrics(handle.meter, "fc", adds=5, attributes={"series": 0})
            os.write(from_child[1], b"a")
            os.read(to_child[0], 1)
            record_metrics(handle.meter, "fc", adds=3, attributes={"series": 0})
            os.write(from_child[1], b"b")
        finally:
            os._exit(0)
    try:
        assert _read_with_timeout(from_child[0]) == b"a"
        assert sdk_points(reader.get_metrics_data())["fc.adds", 0] == 5
        assert ("fc.adds", 0) not in sdk_points(reader.get_metrics_data())
        os.write(to_child[1], b"go")
        assert _read_with_timeout(from_child[0]) == b"b"
        assert sdk_points(reader.get_metrics_data())["fc.adds", 0] == 3
    finally:
        assert wait_for_child(pid, CHILD_WAIT_S) == 0
        for fd in (*to_child, *from_child):
            os.close(fd)
    assert ("fc.adds", 0) not in sdk_points(reader.get_metrics_data())  # folded: not again
    handle.shutdown()


def _sdk_instrument_classes() -> list[type]:
    from opentelemetry.sdk.metrics import Counter, Histogram, UpDownCounter

    return [Counter, Histogram, UpDownCounter]


def test_a_childs_storage_grows_with_series_not_records() -> None:
    """10,000 records on one series take one slot; a new series takes one more."""
    handle, reader = in_memory_handle()
    children = Children()

    def record_many(child: int) -> None:
        record_metrics(handle.meter, "fc", adds=1, attributes={"series": 1})
        assert _forked_children._writer is not None
        words = _forked_children._writer._words
        first = int(words[3])
        for _ in range(10_000):
            record_metrics(handle.meter, "fc", adds=1, attributes={"series": 1})
        assert int(words[3]) == first
        record_metrics(handle.meter, "fc", adds=1, attributes={"series": 2})
        assert int(words[3]) > first

    children.fork(0, record_many, "os._exit")
    assert children.reap() == [0]
    points = sdk_points(reader.get_metrics_data())
    assert (points["fc.adds", 1], points["fc.adds", 2]) == (10_001, 1)
    handle.shutdown()


@pytest.mark.skipif(
    not ADVISORY_SUFFICES,
    reason="the bucket conflict needs the advisory buckets the SDK honours (1.32+); "
    "before, lens's views bucket the name by one spec, the children's included",
)
def test_other_parent_buckets_leave_the_childrens_values_out_once_warned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Children bucket a histogram by its spec; where the parent's pipeline aggregates it
    otherwise (another group made the instrument with other boundaries first), their
    values cannot be added, so they are left out with one warning."""
    register_metric_group("other", [MetricSpec("lat", "fc.lat", "histogram", buckets=(5.0,))])
    handle, reader = in_memory_handle()
    record_metrics(handle.meter, "other", lat=1.0, attributes={"series": 0})
    children = Children()
    children.fork(0, lambda _: record_child_workload(handle.meter, 0), "os._exit")
    children.reap()
    with caplog.at_level("WARNING", logger="nemo.lens"):
        reader.get_metrics_data()
        reader.get_metrics_data()
    warnings = [r for r in caplog.records if "forked children's values" in r.getMessage()]
    assert len(warnings) == 1
    handle.shutdown()


def test_series_beyond_a_full_region_are_dropped_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A child that records more series than its region holds keeps the ones that fit,
    exactly, and the parent warns once that the rest were not exported."""
    handle, reader = in_memory_handle()
    children = Children()

    def many_series(child: int) -> None:
        for series in range(40_000):
            record_metrics(handle.meter, "fc", adds=1, attributes={"series": series})

    children.fork(0, many_series, "os._exit")
    assert children.reap() == [0]
    with caplog.at_level("WARNING", logger="nemo.lens"):
        points = sdk_points(reader.get_metrics_data())
        reader.get_metrics_data()
    kept = sorted(series for name, series in points if name == "fc.adds")
    assert 10_000 < len(kept) < 40_000
    assert kept == list(range(len(kept)))  # the first ones, each exactly once
    assert all(points["fc.adds", series] == 1 for series in kept)
    full = [r for r in caplog.records if "more series than its shared region" in r.getMessage()]
    assert len(full) == 1
    handle.shutdown()


def test_instruments_only_children_recorded_share_their_scope() -> None:
    """Two instruments only children recorded, on one meter (no version, no schema URL):
    one scope holds both in the collection, as the SDK would give them (an encoder keyed
    by scope keeps one entry per scope: a second one would replace the first)."""
    handle, reader = in_memory_handle()
    children = Children()

    def record(child: int) -> None:
        record_metrics(nemo.lens.get_meter("loader.scope"), "fc", adds=2, lat=3.0)

    children.fork(0, record, "os._exit")
    assert children.reap() == [0]
    data = reader.get_metrics_data()
    assert data is not None
    scopes = [
        (scope_metrics.scope.name, sorted(metric.name for metric in scope_metrics.metrics))
        for resource_metrics in data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        if scope_metrics.scope.name == "loader.scope"
    ]
    assert scopes == [("loader.scope", ["fc.adds", "fc.lat"])]
    handle.shutdown()


def test_children_bucket_by_the_sdks_own_default_boundaries() -> None:
    """A histogram declared without buckets: the boundaries children bucket by are the
    ones the SDK collects the parent's values with (else they could never be merged)."""
    register_metric_group("plain", [MetricSpec("h", "plain.h", "histogram")])
    handle, reader = in_memory_handle()
    record_metrics(handle.meter, "plain", h=1.0)
    data = reader.get_metrics_data()
    assert data is not None
    bounds = [
        list(point.explicit_bounds)  # type: ignore[union-attr]
        for resource_metrics in data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
        if metric.name == "plain.h"
        for point in metric.data.data_points
    ]
    assert bounds == [list(SDK_DEFAULT_BUCKETS)]
    handle.shutdown()


def test_children_bucketing_one_histogram_differently_leave_the_rest_merged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two groups declare fc.lat with other buckets; a child keeps one instrument per name
    (its first declaration's buckets), and children whose first declarations differ
    cannot be added: the later one's fc.lat is left out with one warning, and every
    other series of every child is still merged."""
    register_metric_group("other", [MetricSpec("lat", "fc.lat", "histogram", buckets=(5.0,))])
    handle, reader = in_memory_handle()
    children = Children()

    def first_fc(child: int) -> None:
        record_metrics(handle.meter, "fc", lat=2.0, adds=1)
        record_metrics(handle.meter, "other", lat=7.0)  # same instrument: the first's buckets

    def first_other(child: int) -> None:
        record_metrics(handle.meter, "other", lat=7.0)
        record_metrics(handle.meter, "fc", adds=1)

    children.fork(0, first_fc, "os._exit")
    children.fork(1, first_other, "os._exit")
    assert children.reap() == [0, 0]
    with caplog.at_level("WARNING", logger="nemo.lens"):
        data = reader.get_metrics_data()
        reader.get_metrics_data()
    found: dict[str, Any] = {}
    for resource_metrics in data.resource_metrics if data is not None else ():
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for point in metric.data.data_points:
                    found[metric.name] = point
    assert found["fc.adds"].value == 2
    assert (found["fc.lat"].count, list(found["fc.lat"].explicit_bounds)) == (2, list(BOUNDS))
    warned = [r for r in caplog.records if "'fc.lat' were not exported" in r.getMessage()]
    assert len(warned) == 1
    handle.shutdown()


def test_concurrent_delta_collections_never_report_a_negative_delta() -> None:
    """Two threads collect a delta reader while a child adds nonstop: every point is
    positive and the points add up to the child's total."""
    handle, reader = in_memory_handle(
        preferred_temporality=dict.fromkeys(_sdk_instrument_classes(), AggregationTemporality.DELTA)
    )
    children = Children()

    def add_nonstop(child: int) -> None:
        for _ in range(20_000):
            record_metrics(handle.meter, "fc", adds=1, attributes={"series": 0})

    seen: list[int] = []
    stop = threading.Event()

    def collect_nonstop() -> None:
        while not stop.is_set():
            value = sdk_points(reader.get_metrics_data()).get(("fc.adds", 0))
            if value is not None:
                seen.append(value)

    threads = [threading.Thread(target=collect_nonstop) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        children.fork(0, add_nonstop, "os._exit")
        assert children.reap() == [0]
        time.sleep(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    value = sdk_points(reader.get_metrics_data()).get(("fc.adds", 0))
    if value is not None:
        seen.append(value)
    assert [value for value in seen if value <= 0] == []
    assert sum(seen) == 20_000
    handle.shutdown()


def test_a_region_whose_fork_failed_is_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPython runs the after-fork hooks in the parent when fork() fails: the region made
    for the child that never came is released once UNSTARTED_CHILD_S passed."""
    handle, reader = in_memory_handle()
    _forked_children._before_fork()
    _forked_children._after_fork_in_parent()  # as after a failed fork: no child writes
    assert len(_forked_children._children) == 1
    reader.get_metrics_data()
    assert len(_forked_children._children) == 1  # not yet: a child may be starting
    monkeypatch.setattr(_forked_children, "UNSTARTED_CHILD_S", 0.0)
    reader.get_metrics_data()
    assert _forked_children._children == []
    handle.shutdown()


@pytest.mark.parametrize(
    "module",
    ["_shared_region", "_forked_children", "_sdk._children_metrics", "_sdk._children_spans"],
)
def test_each_new_module_imports_first(module: str) -> None:
    """Imported before anything else of nemo.lens (an import cycle would fail here)."""
    from lens_children import run_python

    result = run_python("-c", f"import nemo.lens.{module}")
    assert result.returncode == 0, result.stderr
