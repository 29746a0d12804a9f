"""Setup after shutdown: notebooks and sweeps may set lens up again in one process."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import nemo.lens
import nemo.lens.handle
from nemo.lens import NemoLensConfig, managed_span, setup_telemetry
from nemo.lens.testing import isolated_telemetry, reset_init_guard


@pytest.fixture(autouse=True)
def _isolated() -> Iterator[None]:
    with isolated_telemetry():
        yield


def _config() -> NemoLensConfig:
    return NemoLensConfig(enabled=True, traces_enabled=False, run_id="again")


def _total(reader: InMemoryMetricReader, name: str) -> list[float]:
    data = reader.get_metrics_data()
    if data is None:
        return []
    return [
        point.value
        for resource_metrics in data.resource_metrics
        for scope in resource_metrics.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
        if isinstance(point, NumberDataPoint)
    ]


def test_a_setup_after_shutdown_needs_no_reinit_flag_and_records_anew() -> None:
    """setup, shutdown, setup again: the second setup works and records through its reader."""
    first_reader = InMemoryMetricReader()
    first = setup_telemetry(_config(), metric_reader=first_reader)
    first.meter.create_counter("sweep.trials").add(1)
    first.shutdown(timeout_ms=2000)
    second_reader = InMemoryMetricReader()
    second = setup_telemetry(_config(), metric_reader=second_reader)
    assert second.is_exporting is True
    second.meter.create_counter("sweep.trials").add(2)
    assert _total(second_reader, "sweep.trials") == [2]
    second.shutdown(timeout_ms=2000)


def test_a_second_setup_while_one_is_live_still_raises_naming_the_testing_reset() -> None:
    """A live setup refuses another; the message names nemo.lens.testing.reset_init_guard()."""
    live = setup_telemetry(_config(), metric_reader=InMemoryMetricReader())
    with pytest.raises(RuntimeError) as raised:
        setup_telemetry(_config(), metric_reader=InMemoryMetricReader())
    message = str(raised.value)
    assert "has already been initialised for this process" in message
    assert "nemo.lens.testing.reset_init_guard()" in message
    assert "_allow_reinit=True" in message
    live.shutdown(timeout_ms=2000)


def test_shutting_down_an_older_handle_leaves_the_live_setup_guarded() -> None:
    """After reset_init_guard and a new setup, the old handle's shutdown frees nothing."""
    old = setup_telemetry(_config(), metric_reader=InMemoryMetricReader())
    reset_init_guard()
    live = setup_telemetry(_config(), metric_reader=InMemoryMetricReader())
    old.shutdown(timeout_ms=2000)
    assert nemo.lens.handle._INITIALIZED is True
    with pytest.raises(RuntimeError, match="already been initialised"):
        setup_telemetry(_config(), metric_reader=InMemoryMetricReader())
    live.shutdown(timeout_ms=2000)
    assert nemo.lens.handle._INITIALIZED is False


def test_a_non_exporting_enabled_setup_is_released_by_its_shutdown_too() -> None:
    """An enabled rank the strategy does not select may set up again after its shutdown."""
    config = NemoLensConfig(enabled=True, export_strategy="single_rank", export_rank=0)
    idle = setup_telemetry(config, rank=1, world_size=2)
    assert idle.is_exporting is False
    idle.shutdown()
    again = setup_telemetry(config, rank=1, world_size=2)
    assert again.is_exporting is False
    again.shutdown()


def _sweep_setup(
    config: NemoLensConfig,
) -> tuple[nemo.lens.TelemetryHandle, InMemorySpanExporter, InMemoryMetricReader]:
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    configured = dataclasses.replace(config, span_groups="all")
    return (
        setup_telemetry(configured, span_exporter=exporter, metric_reader=reader),
        exporter,
        reader,
    )


@pytest.mark.parametrize(
    "first_config",
    [
        pytest.param(NemoLensConfig(enabled=True, run_id="first"), id="after-an-exporting-setup"),
        pytest.param(NemoLensConfig(enabled=False), id="after-a-disabled-setup"),
    ],
)
def test_the_next_setup_owns_the_globals_the_span_helpers_and_get_meter_use(
    first_config: NemoLensConfig,
) -> None:
    """OpenTelemetry's globals are set once: the setup after a finished one still becomes
    what managed_span's default tracer and nemo.lens.get_meter() record through."""
    first_exporter, first_reader = InMemorySpanExporter(), InMemoryMetricReader()
    first = setup_telemetry(first_config, span_exporter=first_exporter, metric_reader=first_reader)
    first.shutdown(timeout_ms=2000)

    second, exporter, reader = _sweep_setup(NemoLensConfig(enabled=True, run_id="second"))
    with managed_span("step", "sweep.trial"):
        pass
    nemo.lens.get_meter("sweep").create_counter("sweep.trials").add(3)
    second.shutdown(timeout_ms=2000)

    assert [span.name for span in exporter.get_finished_spans()] == ["sweep.trial"]
    assert first_exporter.get_finished_spans() == ()
    assert _total(reader, "sweep.trials") == [3]


def test_a_shutdown_never_waits_for_ever_on_a_setup_stuck_in_another_thread() -> None:
    """A setup stuck on another thread (holding the setup lock) cannot stall a shutdown:
    it exports and returns, and only the guard stays set."""
    reader = InMemoryMetricReader()
    live = setup_telemetry(_config(), metric_reader=reader)
    live.meter.create_counter("sweep.trials").add(1)
    holding, release = threading.Event(), threading.Event()

    def stuck_setup() -> None:
        with nemo.lens.handle._setup_lock:
            holding.set()
            release.wait(30)

    thread = threading.Thread(target=stuck_setup, daemon=True)
    thread.start()
    assert holding.wait(10)
    try:
        finished = threading.Event()

        def shut_down() -> None:
            live.shutdown(timeout_ms=2000)
            finished.set()

        threading.Thread(target=shut_down, daemon=True).start()
        assert finished.wait(15), "shutdown waited on the stuck setup"
        assert nemo.lens.handle._INITIALIZED is True  # the guard could not be released
    finally:
        release.set()
        thread.join(10)
    reset_init_guard()
