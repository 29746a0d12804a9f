"""Forked children that call `setup_telemetry` themselves, as lens used to advise.

A `multiprocessing` worker ends through `os._exit` (no `atexit`), so its own pipeline must
be shut down by a `multiprocessing` finaliser; with a Prometheus exporter it must never
bind its parent's port (a pool would respawn the worker forever), and its metrics reach
the parent's endpoint instead. Every test runs real pools with the fork context.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lens_children import free_port
from lens_otlp_json import metric_values
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

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
]

SPECS = [MetricSpec("items", "worker.items", "counter")]
POOL_TIMEOUT_S = 60

# The worker's own handle, set by the pool's initializer (one per worker process).
_worker_handle: TelemetryHandle | None = None


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    with isolated_telemetry(clear_span_registry=True):
        register_metric_group("worker", SPECS)
        yield


def set_up_in_worker(config: dict[str, Any]) -> None:
    global _worker_handle
    settings = dict(config)
    if "console_dir" in settings:
        settings["console_path"] = str(Path(settings.pop("console_dir")) / f"{os.getpid()}.jsonl")
    _worker_handle = setup_telemetry(NemoLensConfig(enabled=True, traces_enabled=False, **settings))


def record_on_own_handle(item: int) -> int:
    assert _worker_handle is not None
    record_metrics(_worker_handle.meter, "worker", items=item)
    return os.getpid()


def run_pool(config: dict[str, Any], items: range) -> set[int]:
    context = multiprocessing.get_context("fork")
    pool = context.Pool(2, initializer=set_up_in_worker, initargs=(config,), maxtasksperchild=10)
    try:
        pids = set(pool.map_async(record_on_own_handle, items, chunksize=1).get(POOL_TIMEOUT_S))
        pool.close()  # workers leave through os._exit once their tasks are done
        pool.join()
    finally:
        pool.terminate()
    return pids


def test_a_pool_worker_with_its_own_setup_exports_at_its_end(tmp_path: Path) -> None:
    """Each worker's own console pipeline is shut down by lens's multiprocessing
    finaliser before os._exit, so every task's value is in the workers' files."""
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, traces_enabled=False), metric_reader=InMemoryMetricReader()
    )
    items = range(1, 41)
    pids = run_pool({"exporter": "console", "console_dir": str(tmp_path)}, items)
    handle.shutdown()
    # A worker the pool started after the last task ran none, but wrote its file too.
    files = {int(path.stem): path for path in tmp_path.glob("*.jsonl")}
    assert pids <= files.keys()
    per_worker = {pid: metric_values(files[pid].read_text(), "worker.items") for pid in pids}
    assert all(per_worker.values()), per_worker  # every worker that ran a task exported
    # Cumulative: a worker's last export holds its total.
    assert sum(values[-1] for values in per_worker.values()) == sum(items)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def test_a_prometheus_worker_joins_the_parents_endpoint(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Workers set up with the parent's Prometheus settings: none tries to bind the port
    (no error, no respawn), and the parent's endpoint serves every task's value."""
    from prometheus_client.parser import text_string_to_metric_families

    port = free_port()
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port))
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="prometheus", traces_enabled=False)
    )
    try:
        items = range(1, 41)
        with caplog.at_level(logging.WARNING):
            pids = run_pool({"exporter": "prometheus"}, items)
        assert len(pids) >= 4  # 40 tasks, 10 per worker
        text = scrape(port)
    finally:
        handle.shutdown()
    totals = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "worker_items_total"
    ]
    assert totals == [sum(items)]
    assert not [r for r in caplog.records if "Address already in use" in r.getMessage()]


def test_a_grandchild_never_binds_the_port_and_says_why_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child of a child cannot report to the process serving the port: its setup binds
    nothing, exports no metrics and says why in one warning."""
    from lens_fork import in_child

    port = free_port()
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port))
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="prometheus", traces_enabled=False)
    )

    def grandchild() -> dict[str, Any]:
        messages: list[str] = []

        class Collect(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                messages.append(record.getMessage())

        logging.getLogger("nemo.lens").addHandler(Collect())
        own = setup_telemetry(
            NemoLensConfig(enabled=True, exporter="prometheus", traces_enabled=False)
        )
        exporting = own.is_exporting
        own.shutdown()
        return {"exporting": exporting, "why": [m for m in messages if "cannot bind" in m]}

    try:
        report = in_child(lambda: in_child(grandchild))
    finally:
        handle.shutdown()
    assert report["exporting"] is True  # its traces and logs would still export
    assert len(report["why"]) == 1
    assert f":{port}" in report["why"][0]


def test_the_parents_handle_get_meter_reports_from_a_child() -> None:
    """handle.get_meter(name) of the parent's handle, in a child, is a meter record_metrics
    reports to the parent through, under the caller's scope."""
    from lens_fork import in_child

    reader = InMemoryMetricReader()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, traces_enabled=False), metric_reader=reader
    )

    def child() -> str:
        meter = handle.get_meter("framework", "2.0")
        record_metrics(meter, "worker", items=7)
        return type(meter).__name__

    assert in_child(child) == "ParentsMeter"
    data = reader.get_metrics_data()
    assert data is not None
    found = [
        (scope_metrics.scope.name, scope_metrics.scope.version, getattr(point, "value", None))
        for resource_metrics in data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
        if metric.name == "worker.items"
        for point in metric.data.data_points
    ]
    assert found == [("framework", "2.0", 7)]
    handle.shutdown()
