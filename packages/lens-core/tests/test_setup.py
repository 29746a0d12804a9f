"""setup_telemetry: the guard, the export decision, the providers it builds and installs."""

from __future__ import annotations

import logging
import random
import sys
from collections.abc import Iterator
from typing import Any

import lens_otlp_json
import pytest
from lens_env import clear_settings
from opentelemetry import metrics, propagate, trace
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import nemo.lens
import nemo.lens.handle
from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    SpanGroup,
    SpanRegistry,
    enabled_span_groups,
    is_span_group_enabled,
    record_metrics,
    register_metric_group,
    registered_strategies,
    setup_telemetry,
)
from nemo.lens.testing import in_memory_metrics, isolated_telemetry


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Setup also reads the run id and the local rank from the environment.
    clear_settings(monkeypatch, also_strip=("SLURM_JOB_ID", "LOCAL_RANK"))
    with isolated_telemetry(clear_span_registry=True):
        yield


def enabled(**fields: Any) -> NemoLensConfig:
    return NemoLensConfig(enabled=True, **fields)


def collected(reader: InMemoryMetricReader) -> dict[str, Any]:
    """Metric name -> SDK metric, plus the resource under the key "<resource>"."""
    data = reader.get_metrics_data()
    found: dict[str, Any] = {}
    if data is None:
        return found
    for resource_metrics in data.resource_metrics:
        found["<resource>"] = resource_metrics.resource
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                found[metric.name] = metric
    return found


STEP_SPECS = [
    MetricSpec("loss", "trainer.loss", "gauge"),
    MetricSpec("tokens", "trainer.tokens", "counter", unit="{token}"),
]


# --- the init guard -------------------------------------------------------------------


def test_second_enabled_setup_raises_with_the_british_message() -> None:
    """A second enabled setup raises RuntimeError ("has already been initialised ...")."""
    setup_telemetry(enabled(), metric_reader=InMemoryMetricReader())
    with pytest.raises(RuntimeError, match="has already been initialised for this process"):
        setup_telemetry(enabled(), metric_reader=InMemoryMetricReader())


def test_allow_reinit_and_the_consumer_reset_both_allow_another_setup() -> None:
    """`_allow_reinit=True`, or resetting `nemo.lens.handle._INITIALIZED`, allows a re-setup."""
    setup_telemetry(enabled(), metric_reader=InMemoryMetricReader())
    assert setup_telemetry(
        enabled(), metric_reader=InMemoryMetricReader(), _allow_reinit=True
    ).is_exporting
    nemo.lens.handle._INITIALIZED = False
    assert setup_telemetry(enabled(), metric_reader=InMemoryMetricReader()).is_exporting


def test_disabled_configs_may_be_set_up_repeatedly() -> None:
    """Disabled setups neither trip nor set the guard."""
    for _ in range(3):
        handle = setup_telemetry(NemoLensConfig())
        assert handle.is_exporting is False
    assert nemo.lens.handle._INITIALIZED is False


def test_non_exporting_enabled_setup_sets_the_guard() -> None:
    """An enabled process the strategy does not select still counts as initialised."""
    setup_telemetry(enabled(), rank=0, world_size=2)
    assert nemo.lens.handle._INITIALIZED is True


def test_a_failed_setup_leaves_the_guard_unchanged() -> None:
    """An error (here an unknown exporter) does not set the guard."""
    with pytest.raises(ValueError, match="Unknown exporter"):
        setup_telemetry(enabled(exporter="zipkin"))
    assert nemo.lens.handle._INITIALIZED is False


# --- rank, run id and the export decision -------------------------------------------


@pytest.mark.parametrize(
    ("rank", "world_size", "match"),
    [
        (0, None, "together"),
        (None, 2, "together"),
        (True, 2, "bool"),
        (0, False, "bool"),
        (2, 2, "0 <= rank < world_size"),
        (-1, 2, "0 <= rank < world_size"),
        (0, 0, "world_size must be an integer >= 1"),
        ("0", 2, "str"),
        (0.0, 2, "float"),
    ],
)
def test_bad_rank_or_world_size_raises_value_error(rank: Any, world_size: Any, match: str) -> None:
    """Rank and world size come together, are ints (not bools) and 0 <= rank < world_size."""
    with pytest.raises(ValueError, match=match):
        setup_telemetry(NemoLensConfig(), rank=rank, world_size=world_size)


def test_empty_run_id_is_filled_from_slurm_even_when_disabled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An empty run id becomes SLURM_JOB_ID, in place, on a disabled config too."""
    monkeypatch.setenv("SLURM_JOB_ID", "777")
    config = NemoLensConfig()
    setup_telemetry(config)
    assert config.run_id == "777"


def test_empty_run_id_without_slurm_is_twelve_hex_chars() -> None:
    """Without SLURM_JOB_ID the run id is 12 random hex characters; a set one is kept."""
    config = NemoLensConfig()
    setup_telemetry(config)
    assert len(config.run_id) == 12
    int(config.run_id, 16)
    kept = NemoLensConfig(run_id="mine")
    setup_telemetry(kept)
    assert kept.run_id == "mine"


def test_unknown_strategy_lists_registered_ones_even_when_disabled() -> None:
    """The decision is computed when disabled too, so a bad strategy name fails."""
    with pytest.raises(ValueError, match=r"Unknown export_strategy 'nope'\. Registered"):
        setup_telemetry(NemoLensConfig(export_strategy="nope"))


def test_custom_strategy_sees_rank_0_of_1_when_omitted_and_result_is_read_as_bool() -> None:
    """A callable strategy gets (config, 0, 1) without rank, and a truthy result exports."""
    calls: list[tuple[Any, int, int]] = []

    def truthy(config: NemoLensConfig, rank: int, world_size: int) -> Any:
        calls.append((config, rank, world_size))
        return 1

    config = enabled()
    handle = setup_telemetry(config, export_strategy=truthy, metric_reader=InMemoryMetricReader())
    assert calls == [(config, 0, 1)]
    assert handle.is_exporting is True


def test_strategy_exceptions_propagate() -> None:
    """A custom strategy's own exception reaches the caller."""

    def broken(config: NemoLensConfig, rank: int, world_size: int) -> bool:
        raise KeyError("strategy bug")

    with pytest.raises(KeyError, match="strategy bug"):
        setup_telemetry(enabled(), export_strategy=broken)


def test_unselected_rank_gets_a_no_op_handle_and_no_span_groups() -> None:
    """Gym: single_rank, export_rank=0, rank 3 of 4 -> not exporting, no-op, no groups."""
    config = enabled(export_rank=0, span_groups="all")
    handle = setup_telemetry(config, rank=3, world_size=4)
    assert handle.is_exporting is False
    assert isinstance(handle.tracer, trace.NoOpTracer)
    assert isinstance(handle.meter, metrics.NoOpMeter)
    assert enabled_span_groups() == frozenset()
    assert not handle.tracer.start_span("x").is_recording()


def test_disabled_setup_installs_no_op_providers_when_none_is_installed() -> None:
    """A disabled setup makes the API's no-op providers global."""
    setup_telemetry(NemoLensConfig())
    assert isinstance(trace.get_tracer_provider(), trace.NoOpTracerProvider)
    assert isinstance(metrics.get_meter_provider(), metrics.NoOpMeterProvider)


def test_exporter_typo_fails_on_a_non_exporting_rank_before_globals_change() -> None:
    """The exporter name is checked on every enabled rank, before anything is installed."""
    with pytest.raises(ValueError, match=r"'otpl'.*\['otlp', 'console', 'prometheus'\]"):
        setup_telemetry(enabled(exporter="otpl"), rank=0, world_size=4)
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def test_setup_errors_name_the_variable_the_value_came_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A bad value read by from_env is reported under its real variable, whichever prefix
    it came from; the same value set in code names the field alone."""
    monkeypatch.setenv("MY_TRAINER_OTEL_ENABLED", "1")
    monkeypatch.setenv("MY_TRAINER_OTEL_EXPORTER", "zipkin")
    monkeypatch.setenv("NEMO_LENS_CONSOLE_PATH", str(tmp_path / "missing" / "out.jsonl"))
    config = NemoLensConfig.from_env(prefix="MY_TRAINER_OTEL", fallback_prefix="NEMO_LENS")

    with pytest.raises(ValueError) as unknown:
        setup_telemetry(config)
    assert "(NemoLensConfig.exporter read from MY_TRAINER_OTEL_EXPORTER)" in str(unknown.value)

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "prometheus")
    config.exporter = "console"  # assigned in code: the variable no longer speaks for it
    with pytest.raises(ValueError) as per_signal:
        setup_telemetry(config)
    assert "(unset: NemoLensConfig.exporter decides)" in str(per_signal.value)

    monkeypatch.delenv("OTEL_TRACES_EXPORTER")
    with pytest.raises(ValueError) as unopenable:
        setup_telemetry(config)
    message = str(unopenable.value)
    assert "Cannot open NemoLensConfig.console_path read from NEMO_LENS_CONSOLE_PATH" in message
    assert "<PREFIX>" not in message + str(unknown.value) + str(per_signal.value)


def test_strict_span_group_typo_fails_on_every_rank() -> None:
    """With the strict resolver a typo raises ValueError even where nothing exports."""
    with pytest.raises(ValueError, match="Unknown span group or preset: 'per_stp'"):
        setup_telemetry(enabled(span_groups="per_stp"), rank=0, world_size=4)
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def test_bad_metric_interval_fails_and_is_ignored_with_an_injected_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A non-integer OTEL_METRIC_EXPORT_INTERVAL raises, unless a reader is injected."""
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "ten")
    with pytest.raises(ValueError, match="OTEL_METRIC_EXPORT_INTERVAL: 'ten'"):
        setup_telemetry(enabled(exporter="console"))
    assert setup_telemetry(enabled(), metric_reader=InMemoryMetricReader()).is_exporting


def test_span_group_class_must_be_a_span_group() -> None:
    """A `_span_group_cls` that is not a SpanGroup subclass is refused by name."""
    with pytest.raises(TypeError, match="_span_group_cls"):
        setup_telemetry(enabled(_span_group_cls=dict))


# --- what an exporting process gets -------------------------------------------------


def test_generation_a_call_shape_reaches_the_injected_reader() -> None:
    """`setup_telemetry(cfg, rank=0, world_size=1, metric_reader=r)` + record_metrics works."""
    reader = InMemoryMetricReader()
    handle = setup_telemetry(enabled(), rank=0, world_size=1, metric_reader=reader)
    register_metric_group("trainer", STEP_SPECS)
    record_metrics(handle.meter, "trainer", {"loss": 0.5, "tokens": 128})
    found = collected(reader)
    assert [p.value for p in found["trainer.loss"].data.data_points] == [0.5]
    assert [p.value for p in found["trainer.tokens"].data.data_points] == [128]
    resource = found["<resource>"].attributes
    assert (resource["dl.rank"], resource["dl.world_size"]) == (0, 1)
    assert resource["service.instance.id"].endswith("-rank0")


def test_generation_b_call_shape_reaches_the_injected_reader() -> None:
    """`setup_telemetry(cfg, resource_attributes={...}, metric_reader=r)` exports and keeps keys."""
    reader = InMemoryMetricReader()
    config = enabled(run_id="r3")
    handle = setup_telemetry(
        config, resource_attributes={"nv.dl.rank": 2, "nv.dl.world_size": 8}, metric_reader=reader
    )
    assert handle.is_exporting is True
    register_metric_group("trainer", STEP_SPECS)
    record_metrics(handle.meter, "trainer", loss=1.25, tokens=3)
    found = collected(reader)
    assert [p.value for p in found["trainer.loss"].data.data_points] == [1.25]
    resource = found["<resource>"].attributes
    assert resource["nv.dl.rank"] == 2
    assert resource["nv.dl.world_size"] == 8
    assert "dl.rank" not in resource
    assert resource["service.instance.id"] == "r3-rank2"


def test_handle_records_through_its_own_providers_when_globals_are_taken(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Injected reader/exporter receive everything via the handle, though the globals were set."""
    earlier = in_memory_metrics(install=True)
    earlier_tracer_provider = trace.get_tracer_provider()
    trace.set_tracer_provider(trace.NoOpTracerProvider())
    caplog.set_level(logging.WARNING)
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    handle = setup_telemetry(enabled(), metric_reader=reader, span_exporter=exporter)
    register_metric_group("trainer", STEP_SPECS)
    record_metrics(handle.meter, "trainer", loss=2.0)
    with handle.tracer.start_as_current_span("step"):
        pass
    handle.force_flush()
    assert [p.value for p in collected(reader)["trainer.loss"].data.data_points] == [2.0]
    assert [span.name for span in exporter.get_finished_spans()] == ["step"]
    assert earlier.names() == set()
    assert metrics.get_meter_provider() is earlier.provider
    assert trace.get_tracer_provider() is not earlier_tracer_provider
    assert "already set and cannot be replaced" in caplog.text
    handle.shutdown()
    earlier.shutdown()


def test_globals_are_set_when_free_so_get_meter_reaches_the_reader() -> None:
    """With free globals, nemo.lens.get_meter()/get_tracer() record into this setup."""
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    handle = setup_telemetry(enabled(), metric_reader=reader, span_exporter=exporter)
    register_metric_group("trainer", STEP_SPECS)
    record_metrics(nemo.lens.get_meter(), "trainer", tokens=9)
    with nemo.lens.get_tracer().start_as_current_span("global-span"):
        pass
    handle.shutdown()
    assert [p.value for p in collected(reader)["trainer.tokens"].data.data_points] == [9]
    assert [span.name for span in exporter.get_finished_spans()] == ["global-span"]


def test_handle_tracer_supports_the_consumer_span_calls() -> None:
    """start_span with start_time / context+links and start_as_current_span all export."""
    from opentelemetry.context import Context

    exporter = InMemorySpanExporter()
    handle = setup_telemetry(
        enabled(), span_exporter=exporter, metric_reader=InMemoryMetricReader()
    )
    first = handle.tracer.start_span("timed", start_time=1_000_000_000)
    first.end(end_time=2_000_000_000)
    link = trace.Link(first.get_span_context())
    handle.tracer.start_span("linked", context=Context(), links=[link]).end()
    with handle.tracer.start_as_current_span("current"):
        pass
    handle.shutdown()
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert spans["timed"].start_time == 1_000_000_000
    assert spans["linked"].links[0].context == first.get_span_context()
    assert spans["linked"].parent is None
    assert set(spans) == {"timed", "linked", "current"}


def test_default_span_groups_are_pinned_by_span_group() -> None:
    """With no class and an empty registry, SpanGroup resolves the spec and pins it."""
    setup_telemetry(enabled(span_groups="default"), metric_reader=InMemoryMetricReader())
    assert enabled_span_groups() == SpanGroup.resolve("default")
    assert is_span_group_enabled("job")
    assert not is_span_group_enabled("step")


def test_span_group_class_resolves_strictly() -> None:
    """A configured SpanGroup subclass decides the enabled set."""

    class RLSpanGroup(SpanGroup):
        ALL_GROUPS = frozenset({"rollout", "train"})
        _PRESETS = {"all": ALL_GROUPS}  # noqa: RUF012

    setup_telemetry(
        enabled(span_groups="all", _span_group_cls=RLSpanGroup),
        metric_reader=InMemoryMetricReader(),
    )
    assert enabled_span_groups() == frozenset({"rollout", "train"})


def test_registry_path_is_lenient_and_warns_about_the_typo(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """RL3: with a registry, span_groups="per_stp" does not raise and the warning names it."""
    SpanRegistry.register("nemo_rl", ["step", "rollout"], {"per_step": ["step"]})
    caplog.set_level(logging.WARNING)
    setup_telemetry(enabled(span_groups="per_stp,rollout"), metric_reader=InMemoryMetricReader())
    assert enabled_span_groups() == frozenset({"rollout"})
    assert "per_stp" in caplog.text


def test_traces_disabled_leaves_the_global_tracer_provider_alone() -> None:
    """traces_enabled=False builds no tracer provider; metrics still export."""
    reader = InMemoryMetricReader()
    handle = setup_telemetry(enabled(traces_enabled=False), metric_reader=reader)
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert handle.is_exporting is True
    register_metric_group("trainer", STEP_SPECS)
    record_metrics(handle.meter, "trainer", loss=1.0)
    assert "trainer.loss" in collected(reader)


def test_metrics_disabled_leaves_the_global_meter_provider_alone() -> None:
    """metrics_enabled=False builds no meter provider; the injected reader stays unused."""
    exporter = InMemorySpanExporter()
    handle = setup_telemetry(enabled(metrics_enabled=False), span_exporter=exporter)
    assert not isinstance(metrics.get_meter_provider(), metrics.NoOpMeterProvider)
    with handle.tracer.start_as_current_span("only-traces"):
        pass
    handle.shutdown()
    assert [span.name for span in exporter.get_finished_spans()] == ["only-traces"]


def test_exporting_setup_installs_w3c_propagation() -> None:
    """After an exporting setup, inject writes traceparent and baggage."""
    from opentelemetry import baggage, context

    handle = setup_telemetry(
        enabled(), metric_reader=InMemoryMetricReader(), span_exporter=InMemorySpanExporter()
    )
    carrier: dict[str, str] = {}
    token = context.attach(baggage.set_baggage("team", "ml"))
    try:
        with handle.tracer.start_as_current_span("outgoing"):
            propagate.inject(carrier)
    finally:
        context.detach(token)
    assert carrier["traceparent"].startswith("00-")
    assert carrier["baggage"] == "team=ml"


def test_ids_are_unique_across_identically_seeded_ranks() -> None:
    """Seeding `random` identically does not repeat trace or span ids."""
    exporter = InMemorySpanExporter()
    handle = setup_telemetry(
        enabled(), span_exporter=exporter, metric_reader=InMemoryMetricReader()
    )
    contexts = []
    for _ in range(2):
        random.seed(1234)  # what every rank of a reproducible job does
        span = handle.tracer.start_span("step")
        contexts.append(span.get_span_context())
        span.end()
    assert contexts[0].trace_id != contexts[1].trace_id
    assert contexts[0].span_id != contexts[1].span_id
    flags = trace.TraceFlags
    if hasattr(flags, "RANDOM_TRACE_ID"):  # SDKs that know the W3C random flag set it
        assert contexts[0].trace_flags & flags.RANDOM_TRACE_ID


def test_missing_sdk_raises_import_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the SDK an exporting setup raises ImportError naming lens-core[sdk].

    The SDK is hidden, and the pipeline module forgotten (if an earlier test loaded it) so
    setup imports it again, as a process without the SDK would (tests/test_api_only.py
    checks a real API-only install).
    """
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    monkeypatch.delitem(sys.modules, "nemo.lens._sdk._pipeline", raising=False)
    with pytest.raises(ImportError, match=r"lens-core\[sdk\]"):
        setup_telemetry(enabled())
    assert nemo.lens.handle._INITIALIZED is False
    assert setup_telemetry(enabled(), rank=0, world_size=2).is_exporting is False


def test_strategy_name_check_matches_registered_strategies() -> None:
    """RL2 checks `config.export_strategy in registered_strategies()`; the default is there."""
    assert NemoLensConfig().export_strategy in registered_strategies()


def test_console_exporter_writes_one_compact_json_object_per_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """exporter="console" writes spans and metrics to stdout, one JSON object per line."""
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")
    handle = setup_telemetry(enabled(exporter="console", run_id="c1"))
    register_metric_group("trainer", STEP_SPECS)
    record_metrics(handle.meter, "trainer", loss=0.75)
    with handle.tracer.start_as_current_span("console-span"):
        pass
    handle.shutdown()
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line]
    assert all(", " not in line and ": " not in line for line in lines)
    assert lens_otlp_json.span_names(out) == ["console-span"]
    gauges = lens_otlp_json.metric_values(out, "trainer.loss")
    assert gauges
    assert set(gauges) == {0.75}


def test_one_thousand_increments_then_shutdown_export_exactly_one_thousand(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acceptance: 1,000 counter increments and shutdown() export a total of exactly 1,000."""
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")
    handle = setup_telemetry(enabled(exporter="console", traces_enabled=False))
    register_metric_group("trainer", STEP_SPECS)
    for _ in range(1000):
        record_metrics(handle.meter, "trainer", tokens=1)
    handle.shutdown()
    totals = lens_otlp_json.metric_values(capsys.readouterr().out, "trainer.tokens")
    # Cumulative temporality: every export carries the running total, the last one final.
    assert totals
    assert totals[-1] == 1000
