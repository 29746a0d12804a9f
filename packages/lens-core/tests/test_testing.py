"""nemo.lens.testing: every reset, and the in-memory pipelines."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from lens_children import python_stdout
from opentelemetry import metrics, propagate, trace
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import nemo.lens.handle
from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    SpanRegistry,
    enabled_span_groups,
    pending_span_groups,
    record_metrics,
    register_export_strategy,
    register_metric_group,
    registered_metric_groups,
    registered_strategies,
    set_enabled_span_groups,
    setup_telemetry,
)
from nemo.lens import testing as lens_testing
from nemo.lens.state import get_pp_trace_carrier, set_pp_trace_carrier, set_span_group_spec
from nemo.lens.strategies import BUILTIN_STRATEGIES


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    with lens_testing.isolated_telemetry(clear_span_registry=True):
        yield


def guard_set() -> bool:
    """Read the init guard (a call, so mypy does not narrow it)."""
    return nemo.lens.handle._INITIALIZED


def test_reset_metric_registry_drops_every_group() -> None:
    """Every registered group, lens's own included, is gone after the reset."""
    register_metric_group("a", [MetricSpec("x", "a.x")])
    register_metric_group("nemo.lens.inference", [MetricSpec("y", "lens.y")])
    lens_testing.reset_metric_registry()
    assert registered_metric_groups() == {}


def test_reset_span_state_keeps_registrations_unless_asked() -> None:
    """Groups turn off and the carrier clears; SpanRegistry survives unless cleared."""
    SpanRegistry.register("trainer", ["step"])
    set_span_group_spec("step,unknown")
    set_pp_trace_carrier({"traceparent": "00-x"})
    assert enabled_span_groups() == frozenset({"step"})
    lens_testing.reset_span_state()
    assert enabled_span_groups() == frozenset()
    assert pending_span_groups() == frozenset()
    assert get_pp_trace_carrier() is None
    assert SpanRegistry.namespaces() == ["trainer"]
    lens_testing.reset_span_state(clear_registry=True)
    assert SpanRegistry.namespaces() == []


def test_reset_export_strategies_leaves_the_builtins() -> None:
    """Custom strategies are gone after the reset."""
    register_export_strategy("custom", lambda config, rank, world_size: True)
    lens_testing.reset_export_strategies()
    assert registered_strategies() == sorted(BUILTIN_STRATEGIES)


def test_reset_init_guard_allows_another_setup() -> None:
    """After reset_init_guard an enabled setup no longer raises."""
    nemo.lens.handle._INITIALIZED = True
    lens_testing.reset_init_guard()
    assert nemo.lens.handle._INITIALIZED is False


def test_reset_otel_globals_shuts_down_and_forgets_the_providers() -> None:
    """The old providers are shut down; the next set_*_provider takes effect."""
    first_spans = lens_testing.in_memory_spans(install=True)
    first_metrics = lens_testing.in_memory_metrics(install=True)
    propagate.set_global_textmap(CompositePropagator([]))
    lens_testing.reset_otel_globals()
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert isinstance(metrics.get_meter_provider(), metrics_internal._ProxyMeterProvider)
    first_spans.tracer.start_span("after-reset").end()
    assert first_spans.names() == []
    second = lens_testing.in_memory_spans()
    trace.set_tracer_provider(second.provider)
    assert trace.get_tracer_provider() is second.provider
    fields = propagate.get_global_textmap().fields
    assert {"traceparent", "baggage"} <= set(fields)
    first_metrics.shutdown()


def test_a_setups_providers_are_freed_once_reset_otel_globals_forgets_them(
    tmp_path: Path,
) -> None:
    """Nothing in lens keeps a finished setup's providers alive past the reset: each one
    left alive would restart its processors' threads in every later fork."""
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="console", console_path=str(tmp_path / "out.jsonl"))
    )
    pipeline = handle._pipeline
    assert pipeline is not None
    providers = [
        weakref.ref(provider)
        for provider in (pipeline.tracer_provider, pipeline.meter_provider)
        if provider is not None
    ]
    assert len(providers) == 2
    handle.shutdown()
    lens_testing.reset_otel_globals()
    del handle, pipeline
    gc.collect()
    assert [ref() for ref in providers] == [None, None]


def test_a_meter_fetched_after_reset_does_not_reach_the_old_provider() -> None:
    """get_meter() after a reset does not record into the provider installed before it."""
    old = lens_testing.in_memory_metrics(install=True)
    register_metric_group("g", [MetricSpec("c", "g.count", "counter")])
    lens_testing.reset_otel_globals()
    record_metrics(metrics.get_meter("late"), "g", c=1)
    assert old.names() == set()


def test_reset_all_runs_every_reset() -> None:
    """reset_all clears registry, span state, strategies, guard and globals together."""
    register_metric_group("a", [MetricSpec("x", "a.x")])
    set_enabled_span_groups(frozenset({"job"}))
    register_export_strategy("custom", lambda config, rank, world_size: True)
    nemo.lens.handle._INITIALIZED = True
    lens_testing.in_memory_spans(install=True)
    lens_testing.reset_all()
    assert registered_metric_groups() == {}
    assert enabled_span_groups() == frozenset()
    assert "custom" not in registered_strategies()
    assert nemo.lens.handle._INITIALIZED is False
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def test_isolated_telemetry_resets_on_entry_and_exit() -> None:
    """State set inside the block is gone after it; state before it is gone inside."""
    set_enabled_span_groups(frozenset({"job"}))
    with lens_testing.isolated_telemetry():
        assert enabled_span_groups() == frozenset()
        setup_telemetry(
            NemoLensConfig(enabled=True, traces_enabled=False),
            metric_reader=InMemoryMetricReader(),
        )
        assert guard_set() is True
    assert guard_set() is False
    assert isinstance(metrics.get_meter_provider(), metrics_internal._ProxyMeterProvider)


def test_in_memory_metrics_collects_points_by_name() -> None:
    """points(name) and names() read what was recorded; unknown names give []."""
    pipeline = lens_testing.in_memory_metrics()
    register_metric_group("g", [MetricSpec("loss", "g.loss"), MetricSpec("n", "g.n", "counter")])
    record_metrics(pipeline.meter, "g", loss=0.5, n=2)
    assert pipeline.names() == {"g.loss", "g.n"}
    assert [point.value for point in pipeline.points("g.loss")] == [0.5]
    assert pipeline.points("missing") == []
    pipeline.shutdown()


def test_in_memory_metrics_install_makes_it_global() -> None:
    """install=True makes get_meter() record into the pipeline."""
    pipeline = lens_testing.in_memory_metrics(install=True)
    register_metric_group("g", [MetricSpec("n", "g.n", "counter")])
    record_metrics(metrics.get_meter("any"), "g", n=4)
    assert [point.value for point in pipeline.points("g.n")] == [4]


def test_in_memory_spans_finished_names_and_clear() -> None:
    """Spans are listed in end order; clear() forgets them."""
    spans = lens_testing.in_memory_spans()
    outer = spans.tracer.start_span("outer")
    with spans.tracer.start_as_current_span("inner"):
        pass
    outer.end()
    assert spans.names() == ["inner", "outer"]
    assert [span.name for span in spans.finished()] == ["inner", "outer"]
    spans.clear()
    assert spans.names() == []
    spans.shutdown()


def test_in_memory_spans_install_makes_it_global() -> None:
    """install=True makes trace.get_tracer() record into the pipeline."""
    spans = lens_testing.in_memory_spans(install=True)
    trace.get_tracer("any").start_span("global").end()
    assert spans.names() == ["global"]


def test_builders_name_the_extra_without_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the SDK, the builders raise ImportError naming lens-core[sdk]."""
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.metrics", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(ImportError, match=r"lens-core\[sdk\]"):
        lens_testing.in_memory_metrics()
    with pytest.raises(ImportError, match=r"lens-core\[sdk\]"):
        lens_testing.in_memory_spans()


def test_consumer_style_private_resets_still_work() -> None:
    """Resetting `_INITIALIZED` and the API globals by hand, as consumers do, allows a setup."""
    from opentelemetry.util._once import Once

    reader = InMemoryMetricReader()
    setup_telemetry(NemoLensConfig(enabled=True, traces_enabled=False), metric_reader=reader)
    nemo.lens.handle._INITIALIZED = False
    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER = None
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    second = InMemoryMetricReader()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, traces_enabled=False), metric_reader=second
    )
    assert metrics.get_meter_provider() is handle._pipeline.meter_provider  # type: ignore[union-attr]


def test_nemo_lens_does_not_import_testing() -> None:
    """The package root never imports nemo.lens.testing (checked in a fresh interpreter)."""
    code = "import sys, nemo.lens; print('nemo.lens.testing' in sys.modules)"
    assert python_stdout("-c", code).strip() == "False"


class _BrokenSpan:
    """A span whose every call raises, as a broken tracer's would."""

    def is_recording(self) -> bool:
        raise RuntimeError("broken span")


def _warn_on_every_recording_path() -> None:
    """Trigger one warn-once warning on each recording path lens has."""
    if "g" not in registered_metric_groups():
        register_metric_group("g", [MetricSpec("loss", "g.loss")])
    pipeline = lens_testing.in_memory_metrics()
    record_metrics(pipeline.meter, "g", lsos=1.0)  # an undeclared key
    record_metrics(pipeline.meter, "nope", loss=1.0)  # an unregistered group
    pipeline.shutdown()
    from nemo.lens.helpers import safe_set_span_attributes
    from nemo.lens.propagation import inject_context

    safe_set_span_attributes(_BrokenSpan(), {"a": 1})  # type: ignore[arg-type]
    spans = lens_testing.in_memory_spans()
    with spans.tracer.start_as_current_span("s"):
        inject_context(())  # type: ignore[arg-type]  # a carrier that cannot be written
    spans.shutdown()
    set_span_group_spec("nothing_registered")  # the span-group spec names nothing known
    # Registered after groups were chosen (again: replacing the namespace).
    SpanRegistry.register("late", ["late_group"], allow_override=True)


def test_reset_all_forgets_every_warning_memory(caplog: pytest.LogCaptureFixture) -> None:
    """Each recording path warns once; after reset_all() each warns again."""
    _warn_on_every_recording_path()
    first = [record.getMessage() for record in caplog.records]
    assert any("'lsos' is not declared" in message for message in first)
    assert any("'nope' is not registered" in message for message in first)
    assert any("safe_set_span_attributes failed" in message for message in first)
    assert any("inject_context failed" in message for message in first)
    assert any("selects no span group" in message for message in first)
    assert any("'late' registered after" in message for message in first)
    caplog.clear()
    _warn_on_every_recording_path()
    assert caplog.records == []  # every memory still holds its key: silence
    caplog.clear()
    lens_testing.reset_all(clear_span_registry=True)
    _warn_on_every_recording_path()
    assert sorted(record.getMessage() for record in caplog.records) == sorted(first)
