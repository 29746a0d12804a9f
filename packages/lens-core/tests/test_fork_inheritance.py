"""A forked child never records through its parent's SDK objects, whatever meter it uses.

Data-loader workers are forked while the parent's threads record and its periodic reader
collects; an SDK lock held at that moment stays held in the child for good. These tests
fork for real, many times, with exactly that going on in the parent.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
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
    """A real SDK exporter that only counts what it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.exports = 0

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        self.exports += 1
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
def busy_parent() -> Iterator[TelemetryHandle]:
    """An exporting setup with a 5 ms periodic reader and four threads recording nonstop.

    Without lens's fork rule, about 1 child in 20 of this parent hangs for good."""
    register_metric_group("loader", LOADER_SPECS)
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="console", traces_enabled=False),
        metric_reader=PeriodicExportingMetricReader(CountingExporter(), export_interval_millis=5),
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
def test_data_loader_forks_never_hang(busy_parent: TelemetryHandle, forks: int) -> None:
    """Children forked mid-recording record a fresh group on handle.meter and on global
    meters without hanging; each is a warned no-op (the parent's locks may be held)."""
    for index in range(forks):
        report = in_child(functools.partial(child_records_everywhere, busy_parent, index))
        assert report["no_op_global"] == "NoOpMeter"
        assert any(
            "forked from one that had this meter's provider" in m for m in report["messages"]
        )
    record_metrics(busy_parent.meter, "loader", batches=1)  # the parent records on, unharmed


def test_a_child_that_sets_up_records_into_its_own_pipeline(busy_parent: TelemetryHandle) -> None:
    """After setup_telemetry in the child, its handle and nemo.lens.get_meter() record
    there, while the inherited handle.meter stays a no-op."""

    def child() -> dict[str, Any]:
        reader = InMemoryMetricReader()
        own = setup_telemetry(
            NemoLensConfig(enabled=True, exporter="console", traces_enabled=False),
            metric_reader=reader,
        )
        register_metric_group("mine", [MetricSpec("items", "mine.items", "counter")])
        record_metrics(own.meter, "mine", items=2)
        record_metrics(nemo.lens.get_meter("mine.scope"), "mine", items=3)
        record_metrics(busy_parent.meter, "mine", items=100)  # inherited: skipped
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


def test_get_meter_in_a_child_without_setup_is_a_warned_no_op(
    busy_parent: TelemetryHandle,
) -> None:
    """nemo.lens.get_meter() in a child of an exporting parent gives a no-op meter, once
    warned, instead of a meter of the inherited global provider."""

    def child() -> dict[str, Any]:
        messages: list[str] = []

        class Collect(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                messages.append(record.getMessage())

        logging.getLogger("nemo.lens").addHandler(Collect())
        kinds = {type(nemo.lens.get_meter(name)).__name__ for name in ("a", "b", "c")}
        return {"kinds": sorted(kinds), "warnings": len(messages)}

    assert in_child(child) == {"kinds": ["NoOpMeter"], "warnings": 1}
    assert type(nemo.lens.get_meter()).__name__ != "NoOpMeter"  # the parent is unaffected


def test_the_inherited_handle_never_calls_into_the_parents_providers(
    busy_parent: TelemetryHandle,
) -> None:
    """handle.get_meter()/get_tracer() in a child give no-ops, even while the parent's
    provider locks are held across the fork (they stay held in the child for good)."""
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
    assert kinds == ["NoOpMeter", "NoOpTracer"]
    assert type(busy_parent.get_meter("framework")).__name__ != "NoOpMeter"  # the parent's
