"""A forked child never records through its parent's SDK objects, whatever meter it uses,
and what it records on them reaches the parent's pipeline all the same.

Data-loader workers are forked while the parent's threads record and its periodic reader
collects; an SDK lock held at that moment stays held in the child for good. These tests
fork for real, many times, with exactly that going on in the parent.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from lens_fork import in_child
from opentelemetry import metrics
from opentelemetry.sdk.metrics.export import (
    InMemoryMetricReader,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)

import nemo.lens
from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    TelemetryHandle,
    record_metrics,
    register_metric_group,
    setup_telemetry,
)
from nemo.lens.testing import isolated_telemetry

pytestmark = [
    pytest.mark.fork,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
    # Python 3.12+ warns that forking a threaded process may deadlock: that is the point.
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]

LOADER_SPECS = [
    MetricSpec("batches", "loader.batches", "counter"),
    MetricSpec("wait_ms", "loader.wait", "histogram", unit="ms"),
    MetricSpec("depth", "loader.depth", "gauge"),
]


class CountingExporter(MetricExporter):
    """A real SDK exporter that counts what it is given and keeps the latest batch."""

    def __init__(self) -> None:
        super().__init__()
        self.exports = 0
        self.latest: MetricsData | None = None

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        self.exports += 1
        self.latest = metrics_data
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


@pytest.fixture(autouse=True)
def _isolated() -> Iterator[None]:
    with isolated_telemetry(clear_span_registry=True):
        yield


@pytest.fixture
def busy_exporter() -> CountingExporter:
    return CountingExporter()


@pytest.fixture
def busy_parent(busy_exporter: CountingExporter) -> Iterator[TelemetryHandle]:
    """An exporting setup with a 5 ms periodic reader and four threads recording nonstop.

    Without lens's fork rule, about 1 child in 20 of this parent hangs for good."""
    register_metric_group("loader", LOADER_SPECS)
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="console", traces_enabled=False),
        metric_reader=PeriodicExportingMetricReader(busy_exporter, export_interval_millis=5),
    )
    stop = threading.Event()

    def record_nonstop(worker: int) -> None:
        # Nonstop aggregation (histograms recorded directly, gauges and sums handed over at
        # each collection): the SDK holds its aggregation locks all the time, so a fork
        # regularly lands while one is held. New series (the first 100 steps) and new
        # instruments (every 50 steps, for the first 2,500) add its storage and instrument
        # locks early on. Both are bounded, so each 5 ms collection (which fork() waits
        # for) stays short however long the test runs; disabling lens's fork rule still
        # hangs children here.
        step = 0
        while not stop.is_set():
            step += 1
            record_metrics(
                handle.meter,
                "loader",
                batches=1,
                wait_ms=float(step % 7),
                depth=step % 5,
                attributes={"worker": worker, "step": step % 100},
            )
            if step % 50 == 0 and step <= 2_500:
                group = f"parent_{worker}_{step}"
                register_metric_group(
                    group, [MetricSpec("v", f"parent.{worker}.{step}", "counter")]
                )
                record_metrics(handle.meter, group, v=1)

    threads = [threading.Thread(target=record_nonstop, args=(n,), daemon=True) for n in range(4)]
    for thread in threads:
        thread.start()
    try:
        yield handle
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        handle.shutdown()


def child_records_everywhere(handle: TelemetryHandle, index: int) -> dict[str, Any]:
    """What a data-loader worker does: a fresh group and key, on every meter it can find."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logging.getLogger("nemo.lens").addHandler(Collect())
    group = f"worker_{index}"
    register_metric_group(group, [MetricSpec("items", f"worker.items.{index}", "counter")])
    for meter in (handle.meter, metrics.get_meter("x"), nemo.lens.get_meter()):
        record_metrics(meter, group, items=1)
        record_metrics(meter, "loader", batches=1, depth=3)
    return {"no_op_global": type(nemo.lens.get_meter()).__name__, "messages": messages}


@pytest.mark.parametrize(
    "forks",
    # Every matrix cell forks 20 times; the soak session (once per CI run) forks 200.
    [pytest.param(20, id="20"), pytest.param(200, id="200", marks=pytest.mark.soak)],
)
def test_data_loader_forks_never_hang(
    busy_parent: TelemetryHandle, busy_exporter: CountingExporter, forks: int
) -> None:
    """Children forked mid-recording record a fresh group on handle.meter and on global
    meters without hanging and without a warning, and the parent's exports carry every
    child's values (the parent's locks may be held, so none goes through the SDK there)."""
    for index in range(forks):
        report = in_child(functools.partial(child_records_everywhere, busy_parent, index))
        assert report["no_op_global"] == "ParentsMeter"
        assert report["messages"] == []
    record_metrics(busy_parent.meter, "loader", batches=1)  # the parent records on, unharmed
    exporter = busy_exporter
    exported = exporter.exports
    deadline = time.monotonic() + 10
    while exporter.exports < exported + 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # two more 5 ms exports: the last one began after every child ended
    assert exporter.latest is not None
    totals: dict[str, Any] = {}
    point: Any
    for resource_metrics in exporter.latest.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name.startswith("worker.items."):
                    for point in metric.data.data_points:
                        totals[metric.name] = totals.get(metric.name, 0) + point.value
    # One add on each of the child's three meters: handle.meter, the global provider's
    # and nemo.lens.get_meter()'s.
    assert totals == {f"worker.items.{index}": 3 for index in range(forks)}


def test_a_child_that_sets_up_records_into_its_own_pipeline(busy_parent: TelemetryHandle) -> None:
    """After setup_telemetry in the child, its handle and nemo.lens.get_meter() record
    there, while the inherited handle.meter still reports to the parent."""

    def child() -> dict[str, Any]:
        reader = InMemoryMetricReader()
        own = setup_telemetry(
            NemoLensConfig(enabled=True, exporter="console", traces_enabled=False),
            metric_reader=reader,
        )
        register_metric_group("mine", [MetricSpec("items", "mine.items", "counter")])
        record_metrics(own.meter, "mine", items=2)
        record_metrics(nemo.lens.get_meter("mine.scope"), "mine", items=3)
        record_metrics(busy_parent.meter, "mine", items=100)  # inherited: the parent's
        data = reader.get_metrics_data()
        assert data is not None
        points = [
            getattr(point, "value", None)
            for resource_metrics in data.resource_metrics
            for scope_metrics in resource_metrics.scope_metrics
            for metric in scope_metrics.metrics
            if metric.name == "mine.items"
            for point in metric.data.data_points
        ]
        own.shutdown()
        return {"points": sorted(value for value in points if value is not None)}

    assert in_child(child) == {"points": [2, 3]}


def test_get_meter_in_a_child_without_setup_reports_to_the_parent(
    busy_parent: TelemetryHandle,
) -> None:
    """nemo.lens.get_meter() in a child of an exporting parent gives a meter whose own
    instruments are no-ops (never the inherited global provider's) and through which
    record_metrics reports to the parent, unwarned; in a grandchild, whose values no
    pipeline takes, it warns once."""

    def kinds_and_warnings() -> dict[str, Any]:
        messages: list[str] = []

        class Collect(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                messages.append(record.getMessage())

        logging.getLogger("nemo.lens").addHandler(Collect())
        meters = [nemo.lens.get_meter(name) for name in ("a", "b", "c")]
        meters[0].create_counter("direct").add(1)  # a no-op, not the inherited SDK's
        return {
            "kinds": sorted({type(meter).__name__ for meter in meters}),
            "warnings": len(messages),
        }

    def child() -> dict[str, Any]:
        return {"child": kinds_and_warnings(), "grandchild": in_child(kinds_and_warnings)}

    assert in_child(child) == {
        "child": {"kinds": ["ParentsMeter"], "warnings": 0},
        "grandchild": {"kinds": ["ParentsMeter"], "warnings": 1},
    }
    assert type(nemo.lens.get_meter()).__name__ != "ParentsMeter"  # the parent is unaffected


def test_the_inherited_handle_never_calls_into_the_parents_providers(
    busy_parent: TelemetryHandle,
) -> None:
    """handle.get_meter()/get_tracer() in a child never call the parent's providers, even
    while their locks are held across the fork (they stay held in the child for good): the
    meter reports to the parent through the child's region, the tracer is a no-op."""
    pipeline = busy_parent._pipeline
    assert pipeline is not None
    assert pipeline.meter_provider is not None
    meter_lock = pipeline.meter_provider._meter_lock  # the SDK's, taken by get_meter

    def child() -> list[str]:
        return [
            type(busy_parent.get_meter("framework", "1.0")).__name__,
            type(busy_parent.get_tracer("framework", "1.0")).__name__,
        ]

    with meter_lock:  # held at the fork, as by a parent thread creating a meter
        kinds = in_child(child, timeout_s=20.0)
    assert kinds == ["ParentsMeter", "NoOpTracer"]
    assert type(busy_parent.get_meter("framework")).__name__ == "Meter"  # the parent's SDK one
