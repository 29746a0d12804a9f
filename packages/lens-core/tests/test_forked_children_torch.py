"""A real CPU `torch.utils.data.DataLoader` with 4 forked workers: what its dataset records
per item reaches the parent's pipeline, exactly, with nothing set up in the workers.

Run by the opt-in `integrations-torch` session, which installs torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from lens_integrations import require
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import nemo.lens
from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    record_metrics,
    register_metric_group,
    setup_telemetry,
)
from nemo.lens.testing import isolated_telemetry

pytestmark = [
    pytest.mark.integration,
    pytest.mark.fork,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
    # torch advises fewer workers than 4 on a 2-core machine: the test wants 4 anyway.
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    # Python 3.12+ warns that forking a threaded process may deadlock (lens's is safe).
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]

ITEMS = 64
SPECS = [
    MetricSpec("items", "loader.items", "counter"),
    MetricSpec("item_ms", "loader.item_time", "histogram", unit="ms", buckets=(1.0, 10.0)),
    MetricSpec("worker_id", "loader.last_worker", "gauge", multiprocess="max"),
]


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    with isolated_telemetry(clear_span_registry=True):
        register_metric_group("loader", SPECS)
        yield


def test_a_dataloaders_workers_report_every_item_to_the_parent() -> None:
    torch = require("torch")
    data = require("torch.utils.data")

    class Recording(data.Dataset):  # type: ignore[misc,name-defined]
        def __len__(self) -> int:
            return ITEMS

        def __getitem__(self, index: int) -> Any:
            info = data.get_worker_info()
            with handle.tracer.start_as_current_span("loader.item", attributes={"index": index}):
                record_metrics(
                    nemo.lens.get_meter(),
                    "loader",
                    items=1,
                    item_ms=float(index % 20),
                    worker_id=info.id,
                    attributes={"split": "train"},
                )
            return torch.tensor([index])

    reader = InMemoryMetricReader()
    spans = InMemorySpanExporter()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="console"),
        metric_reader=reader,
        span_exporter=spans,
    )
    loader = data.DataLoader(
        Recording(), batch_size=4, num_workers=4, multiprocessing_context="fork"
    )
    seen = sorted(int(value) for batch in loader for value in batch)
    assert seen == list(range(ITEMS))
    del loader  # the workers end (through os._exit)
    assert handle.force_flush()
    collected = reader.get_metrics_data()
    assert collected is not None
    points = {
        metric.name: point
        for resource_metrics in collected.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
        if metric.name.startswith("loader.")
        for point in metric.data.data_points
    }
    assert points["loader.items"].value == ITEMS  # type: ignore[union-attr]
    histogram: Any = points["loader.item_time"]
    assert (histogram.count, histogram.sum) == (ITEMS, float(sum(i % 20 for i in range(ITEMS))))
    assert (histogram.min, histogram.max) == (0.0, 19.0)
    assert points["loader.last_worker"].value == 3  # type: ignore[union-attr]
    item_spans = [
        dict(span.attributes or {})
        for span in spans.get_finished_spans()
        if span.name == "loader.item"
    ]
    assert sorted(int(str(found["index"])) for found in item_spans) == list(range(ITEMS))
    assert len({found["process.pid"] for found in item_spans}) == 4  # one per worker
    handle.shutdown()
