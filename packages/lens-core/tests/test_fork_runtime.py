"""Forking a process with telemetry running: the child never deadlocks and exports nothing
itself (what it records, its parent exports).

Every test forks for real. The child reports back through a pipe and always leaves with
`os._exit`; a child that does not answer within the bound is killed and the test fails.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from lens_children import free_port
from lens_exporters import RecordingMetricExporter
from lens_fork import in_child
from opentelemetry.sdk.metrics.export import (
    InMemoryMetricReader,
    MetricExporter,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    TelemetryHandle,
    record_metrics,
    register_metric_group,
    setup_telemetry,
)
from nemo.lens._sdk._prometheus import _live_endpoints
from nemo.lens.testing import isolated_telemetry

pytestmark = [
    pytest.mark.fork,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
    # Python 3.12+ warns that forking a threaded process may deadlock: that is the point.
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]

SPECS = [MetricSpec("steps", "fork.steps", "counter"), MetricSpec("loss", "fork.loss", "gauge")]


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    with isolated_telemetry(clear_span_registry=True):
        yield


class RecordingSpanExporter(SpanExporter):
    """Keeps every span it is asked to export."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def total(batches: Sequence[MetricsData], name: str) -> list[Any]:
    """Every data-point value of series `name`, across batches in export order."""
    return [
        getattr(point, "value", None)
        for batch in batches
        for resource_metrics in batch.resource_metrics
        for scope in resource_metrics.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


def periodic_setup(
    metric_exporter: MetricExporter, span_exporter: SpanExporter, **config: Any
) -> TelemetryHandle:
    reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=20)
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, **config),
        rank=0,
        world_size=1,
        metric_reader=reader,
        span_exporter=span_exporter,
    )
    register_metric_group("fork", SPECS)
    return handle


def test_child_exports_nothing_while_the_parent_keeps_exporting() -> None:
    """With the periodic reader running, a child's flushes and ticks export nothing; its
    values and spans reach the parent's exports instead, once."""
    metric_exporter = RecordingMetricExporter()
    span_exporter = RecordingSpanExporter()
    handle = periodic_setup(metric_exporter, span_exporter)
    record_metrics(handle.meter, "fork", steps=5, loss=0.5)
    with handle.tracer.start_as_current_span("parent-span"):
        pass
    assert handle.force_flush()

    def child() -> dict[str, Any]:
        metric_batches = len(metric_exporter.batches)
        spans = len(span_exporter.spans)
        record_metrics(handle.meter, "fork", steps=1, loss=9.0)
        with handle.tracer.start_as_current_span("child-span"):
            pass
        handle.force_flush()
        # Give the periodic thread the SDK restarted in the child time to tick.
        threading.Event().wait(0.2)
        ticking = any(
            t.name.startswith("OtelPeriodicExportingMetricReader") for t in threading.enumerate()
        )
        handle.shutdown()
        return {
            "new_metric_batches": len(metric_exporter.batches) - metric_batches,
            "new_spans": len(span_exporter.spans) - spans,
            "reader_thread_alive": ticking,
        }

    report = in_child(child)
    assert report == {"new_metric_batches": 0, "new_spans": 0, "reader_thread_alive": True}
    record_metrics(handle.meter, "fork", steps=2)
    assert handle.force_flush()
    # Cumulative and monotonic: 8 is the parent's 5 + 2 and the child's 1, which the
    # parent exported (the child itself sent no batch). (max, because the reader thread
    # may export an older collection after the flush.)
    assert max(total(metric_exporter.batches, "fork.steps")) == 8
    handle.shutdown()
    # The child exported nothing itself; its span reached the parent's exporter, once.
    assert sorted(span.name for span in span_exporter.spans) == ["child-span", "parent-span"]


def test_child_never_deadlocks_when_forked_during_a_collection() -> None:
    """fork() waits out an in-flight collection, so the child can record and register."""
    reader = InMemoryMetricReader()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, traces_enabled=False), metric_reader=reader
    )
    register_metric_group("fork", SPECS)
    entered = threading.Event()

    def slow_callback(options: Any) -> list[Any]:
        entered.set()
        threading.Event().wait(0.3)  # a slow observable callback, inside the SDK's lock
        return []

    handle.meter.create_observable_gauge("fork.slow", callbacks=[slow_callback])
    collector = threading.Thread(target=reader.get_metrics_data, daemon=True)
    collector.start()
    assert entered.wait(10)

    def child() -> dict[str, Any]:
        # Both need the locks the collecting thread held in the parent.
        handle.meter.create_observable_gauge("fork.child", callbacks=[lambda options: []])
        record_metrics(handle.meter, "fork", steps=1)
        return {"recorded": True}

    assert in_child(child) == {"recorded": True}
    collector.join(10)
    handle.shutdown()


def test_repeated_forks_under_a_busy_reader_never_hang() -> None:
    """Twenty forks while the reader collects every few ms: every child finishes."""
    metric_exporter = RecordingMetricExporter()
    handle = periodic_setup(metric_exporter, RecordingSpanExporter(), traces_enabled=False)
    stop = threading.Event()

    def record_forever() -> None:
        while not stop.is_set():
            record_metrics(handle.meter, "fork", steps=1, loss=1.0)

    recorder = threading.Thread(target=record_forever, daemon=True)
    recorder.start()
    try:
        for index in range(20):

            def child(index: int = index) -> dict[str, Any]:
                record_metrics(handle.meter, "fork", steps=1, loss=float(index))
                handle.force_flush()
                return {"index": index}

            assert in_child(child) == {"index": index}
    finally:
        stop.set()
        recorder.join(10)
    handle.shutdown()


def test_child_may_set_up_its_own_pipeline_under_its_own_instance_id() -> None:
    """The guard is per process; a child's setup exports under `<run>-rank<r>-pid<pid>`."""
    handle = periodic_setup(RecordingMetricExporter(), RecordingSpanExporter(), run_id="runf")

    def child() -> dict[str, Any]:
        reader = InMemoryMetricReader()
        own = setup_telemetry(
            NemoLensConfig(enabled=True, run_id="runf", traces_enabled=False),
            rank=0,
            world_size=1,
            metric_reader=reader,
        )
        record_metrics(own.meter, "fork", steps=3)
        data = reader.get_metrics_data()
        assert data is not None
        resource = data.resource_metrics[0].resource.attributes
        return {
            "instance": resource["service.instance.id"],
            "pid": os.getpid(),
            "steps": total([data], "fork.steps"),
        }

    report = in_child(child)
    assert report["instance"] == f"runf-rank0-pid{report['pid']}"
    assert report["steps"] == [3]
    handle.shutdown()


def test_child_drops_inherited_open_spans_and_draws_fresh_ids() -> None:
    """A child does not end its parent's open spans, and its span ids differ from the
    parent's; the span it ends is the parent's to export."""
    span_exporter = RecordingSpanExporter()
    handle = periodic_setup(RecordingMetricExporter(), span_exporter)
    parent_open = handle.tracer.start_span("parent-open")
    pipeline = handle._pipeline
    assert pipeline is not None
    assert pipeline.open_spans is not None
    tracker = pipeline.open_spans

    def child() -> dict[str, Any]:
        open_in_child = tracker.open_count()
        span = handle.tracer.start_span("child-first")
        span_id = span.get_span_context().span_id
        span.end()
        handle.shutdown()
        return {"open": open_in_child, "span_id": span_id}

    report = in_child(child)
    parent_next = handle.tracer.start_span("parent-next")
    assert report["open"] == 0
    assert tracker.open_count() == 2
    assert report["span_id"] != parent_next.get_span_context().span_id
    parent_next.end()
    handle.shutdown()
    assert not parent_open.is_recording()
    # The child's span reaches the parent's exporter (once); its inherited open one never.
    assert sorted(span.name for span in span_exporter.spans) == [
        "child-first",
        "parent-next",
        "parent-open",
    ]


def test_child_releases_the_prometheus_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child's copy of the Prometheus listening socket is closed; the parent keeps serving."""
    port = free_port()
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port))
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="prometheus"), span_exporter=RecordingSpanExporter()
    )
    endpoints = [endpoint for endpoint in _live_endpoints if endpoint.port == port]
    assert len(endpoints) == 1

    def child() -> dict[str, Any]:
        return {"fileno": endpoints[0]._server.socket.fileno()}

    assert in_child(child) == {"fileno": -1}
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    handle.shutdown()


def test_child_closes_its_copies_of_the_scrapes_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scrape served at fork time is closed in the child and still answered by the parent."""
    port = free_port()
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port))
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="prometheus"), span_exporter=RecordingSpanExporter()
    )
    (endpoint,) = [endpoint for endpoint in _live_endpoints if endpoint.port == port]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        deadline = time.monotonic() + 10
        while not endpoint._server._connections and time.monotonic() < deadline:
            time.sleep(0.01)
        in_flight = list(endpoint._server._connections)
        assert len(in_flight) == 1

        def child() -> dict[str, Any]:
            return {"filenos": [connection.fileno() for connection in in_flight]}

        assert in_child(child) == {"filenos": [-1]}
        client.sendall(b"\r\n")
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 200")
    handle.shutdown()
