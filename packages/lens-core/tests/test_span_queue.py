"""The batch span queue: sized for training-loop bursts, sized by `OTEL_BSP_*`, drops counted.

A burst of 8 threads x 750 spans overflowed the SDK's default 2,048-span queue and lost
7-40 % of the spans with a reachable collector. lens sizes the queue for bursts, honours
the standard variables, refuses bad ones at setup, and counts every span it still has to
drop: in the `nemo.lens.spans.dropped` counter and in one warning at shutdown.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from lens_children import MARKER, otlp_env, run_child
from lens_receivers import OtlpReceiver
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from nemo.lens import NemoLensConfig, _otel_env, setup_telemetry
from nemo.lens.errors import LensValueError
from nemo.lens.testing import isolated_telemetry

DROPPED = "nemo.lens.spans.dropped"
CHILD_TIMEOUT_S = 120.0
COLLECTOR_LATENCY_S = 0.1


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    with isolated_telemetry(clear_span_registry=True):
        yield


class RecordingExporter(SpanExporter):
    """Keeps every span it is given; blocks its first export until released."""

    def __init__(self, *, block_first: bool = False) -> None:
        self.spans: list[ReadableSpan] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self._block = block_first

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._block:
            self._block = False
            self.entered.set()
            self.release.wait(30)
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def dropped_counter(reader: InMemoryMetricReader) -> list[Any]:
    data = reader.get_metrics_data()
    return [
        (scope.scope.name, metric)
        for resource in (data.resource_metrics if data is not None else [])
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == DROPPED
    ]


BURST_CHILD = f"""
import threading
from nemo.lens import NemoLensConfig, setup_telemetry

handle = setup_telemetry(NemoLensConfig(enabled=True))
start = threading.Barrier(8)

def burst(index):
    start.wait(30)
    for step in range(750):
        with handle.tracer.start_as_current_span("burst", attributes={{"t": index}}) as span:
            span.set_attribute("step", step)

threads = [threading.Thread(target=burst, args=(index,)) for index in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(60)
handle.shutdown(timeout_ms=60000)
print("{MARKER}", flush=True)
"""


@pytest.mark.e2e
@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_eight_threads_ending_750_spans_each_all_reach_the_collector(transport: str) -> None:
    """A burst of 6,000 spans from 8 threads reaches a real collector in full (it lost 7-57 %)."""
    # The collector answers each request after 100 ms, as one across a network would.
    with OtlpReceiver(transport, latency_s=COLLECTOR_LATENCY_S) as receiver:
        run = run_child(
            BURST_CHILD, otlp_env(transport, receiver.endpoint, receiver.endpoint), CHILD_TIMEOUT_S
        )
        assert not run.timed_out, run.stderr
        assert run.returncode == 0, run.stderr
        assert receiver.received.span_count() == 8 * 750
    assert "dropped" not in run.stderr, run.stderr


def test_bsp_variables_size_the_queue_and_every_drop_is_counted_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """OTEL_BSP_* sizes the queue; 15 spans dropped behind a stuck export are counted once."""
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "10")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "5")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
    caplog.set_level(logging.INFO)
    exporter = RecordingExporter(block_first=True)
    reader = InMemoryMetricReader()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True), span_exporter=exporter, metric_reader=reader
    )
    for index in range(5):
        handle.tracer.start_span(f"first-{index}").end()
    assert exporter.entered.wait(10), "the batch of 5 was never exported"
    for index in range(25):
        handle.tracer.start_span(f"later-{index}").end()
    [(scope, metric)] = dropped_counter(reader)
    assert scope == "nemo.lens"
    assert metric.unit == "{span}"
    assert [point.value for point in metric.data.data_points] == [15]
    assert not any("span(s) were dropped" in r.getMessage() for r in caplog.records)

    exporter.release.set()
    handle.shutdown(timeout_ms=10000)
    handle.shutdown(timeout_ms=10000)
    assert len(exporter.spans) == 15
    assert [span.name for span in exporter.spans[:5]] == [f"first-{i}" for i in range(5)]
    reports = [r for r in caplog.records if "span(s) were dropped" in r.getMessage()]
    assert len(reports) == 1
    assert reports[0].levelno == logging.WARNING
    assert "15 span(s)" in reports[0].getMessage()
    assert "(10 spans)" in reports[0].getMessage()
    # The SDK's own per-span "queue full" warnings never fire: lens refused them first.
    assert not any(
        "ueue" in r.getMessage() and "full" in r.getMessage()
        for r in caplog.records
        if r.name.startswith("opentelemetry")
    )


def test_no_drop_means_no_warning_and_no_counter(caplog: pytest.LogCaptureFixture) -> None:
    """Without drops, shutdown warns about nothing and the counter has no point."""
    exporter = RecordingExporter()
    reader = InMemoryMetricReader()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True), span_exporter=exporter, metric_reader=reader
    )
    caplog.set_level(logging.WARNING)
    for index in range(100):
        handle.tracer.start_span(f"s{index}").end()
    assert dropped_counter(reader) == []
    handle.shutdown()
    assert len(exporter.spans) == 100
    assert not any("dropped" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, (65536, 2048, 5000, 30000)),
        (
            {
                "OTEL_BSP_MAX_QUEUE_SIZE": " 4096 ",
                "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "256",
                "OTEL_BSP_SCHEDULE_DELAY": "250",
                "OTEL_BSP_EXPORT_TIMEOUT": "0",
            },
            (4096, 256, 250, 0),
        ),
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "1000"}, (1000, 1000, 5000, 30000)),
        ({"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "100000"}, (100000, 100000, 5000, 30000)),
        ({"OTEL_BSP_MAX_QUEUE_SIZE": ""}, (65536, 2048, 5000, 30000)),
    ],
)
def test_batch_span_settings_follow_the_variables(
    environ: dict[str, str], expected: tuple[int, int, int, int]
) -> None:
    """lens's defaults (65536 / 2048 / 5000 ms / 30000 ms), and each variable where set."""
    settings = _otel_env.batch_span_settings(environ)
    assert (
        settings.max_queue_size,
        settings.max_export_batch_size,
        settings.schedule_delay_ms,
        settings.export_timeout_ms,
    ) == expected
    defaults = (
        _otel_env.DEFAULT_BSP_MAX_QUEUE_SIZE,
        _otel_env.DEFAULT_BSP_MAX_EXPORT_BATCH_SIZE,
        _otel_env.DEFAULT_BSP_SCHEDULE_DELAY_MS,
        _otel_env.DEFAULT_BSP_EXPORT_TIMEOUT_MS,
    )
    assert defaults == (65536, 2048, 5000, 30000)


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0", "a positive integer"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "lots", "a positive integer"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "-3", "a positive integer"),
        ("OTEL_BSP_SCHEDULE_DELAY", "5.5", "a positive integer"),
        ("OTEL_BSP_EXPORT_TIMEOUT", "-1", "an integer in [0, "),
    ],
)
def test_a_bad_bsp_value_fails_setup_naming_the_variable(
    name: str, value: str, accepted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A malformed OTEL_BSP_* value is a LensValueError at setup, naming it and what it accepts."""
    monkeypatch.setenv(name, value)
    with pytest.raises(LensValueError, match=name) as raised:
        setup_telemetry(NemoLensConfig(enabled=True), metric_reader=InMemoryMetricReader())
    assert accepted in str(raised.value)
    assert repr(value) in str(raised.value)


def test_a_batch_larger_than_the_queue_fails_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both sizes set and the batch larger than the queue: the message names both variables."""
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "200")
    with pytest.raises(LensValueError, match="OTEL_BSP_MAX_EXPORT_BATCH_SIZE") as raised:
        setup_telemetry(NemoLensConfig(enabled=True), metric_reader=InMemoryMetricReader())
    assert "OTEL_BSP_MAX_QUEUE_SIZE (100)" in str(raised.value)


def test_a_bad_bsp_value_fails_on_a_rank_that_does_not_export(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check runs before the export decision, so a typo fails on every rank."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "soon")
    with pytest.raises(LensValueError, match="OTEL_BSP_SCHEDULE_DELAY"):
        setup_telemetry(
            NemoLensConfig(enabled=True, export_strategy="single_rank"), rank=1, world_size=2
        )
