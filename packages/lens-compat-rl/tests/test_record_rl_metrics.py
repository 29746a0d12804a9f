"""record_rl_metrics records every legacy field through lens-core's registry."""

from __future__ import annotations

import inspect
import logging
import threading
from typing import Any

import pytest
from opentelemetry.metrics import NoOpMeter
from opentelemetry.sdk.metrics.export import Gauge, Histogram

from lens_compat_rl import LEGACY_RL_GROUP, LEGACY_RL_SPECS, record_rl_metrics
from nemo.lens.instruments import (
    MetricSpec,
    _registry,
    record_metrics,
    register_metric_group,
    registered_metric_groups,
    unregister_metric_group,
)
from nemo.lens.testing import reset_metric_registry

# The legacy series, written out from the legacy table (not read from the shim's specs).
LEGACY_SERIES = [
    ("reward_mean", "rl.reward.mean", Gauge, ""),
    ("kl_divergence", "rl.kl_divergence", Gauge, ""),
    ("policy_loss", "rl.policy_loss", Gauge, ""),
    ("value_loss", "rl.value_loss", Gauge, ""),
    ("entropy", "rl.entropy", Gauge, ""),
    ("response_length_mean", "rl.response_length.mean", Gauge, ""),
    ("grad_norm", "rl.grad_norm", Gauge, ""),
    ("learning_rate", "rl.learning_rate", Gauge, ""),
    ("throughput_tokens_per_sec", "rl.throughput.tokens_per_sec", Gauge, "{token}/s"),
    ("generation_duration_ms", "rl.generation.duration_ms", Histogram, "ms"),
    ("rollout_duration_ms", "rl.rollout.duration_ms", Histogram, "ms"),
]


@pytest.mark.parametrize(
    ("field", "series", "data_type", "unit"),
    LEGACY_SERIES,
    ids=[row[0] for row in LEGACY_SERIES],
)
def test_each_legacy_field_lands_on_its_series(
    pipeline: Any, field: str, series: str, data_type: type[Any], unit: str
) -> None:
    """A legacy keyword creates exactly its legacy series, with the legacy kind and unit."""
    record_rl_metrics(pipeline.meter, **{field: 42.5})
    record_rl_metrics(pipeline.meter, **{field: 7.5})

    metrics = pipeline.metrics()
    assert set(metrics) == {series}
    metric = metrics[series]
    assert isinstance(metric.data, data_type)
    assert metric.unit == unit
    (point,) = metric.data.data_points
    if data_type is Gauge:
        assert point.value == 7.5  # a gauge keeps the last value
    else:
        assert (point.count, point.sum, point.min, point.max) == (2, 50.0, 7.5, 42.5)


def test_positional_arguments_follow_the_legacy_order(pipeline: Any) -> None:
    """Positional values after the meter map onto the legacy fields in signature order."""
    values = [float(index + 1) for index in range(len(LEGACY_SERIES))]
    record_rl_metrics(pipeline.meter, *values)

    for (_field, series, data_type, _unit), value in zip(LEGACY_SERIES, values, strict=True):
        (point,) = pipeline.points(series)
        recorded = point.value if data_type is Gauge else point.sum
        assert recorded == value, series


def test_tokens_per_sec_is_an_alias_of_throughput_tokens_per_sec(
    pipeline: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The older trees' tokens_per_sec records rl.throughput.tokens_per_sec, the series the
    explicit keyword writes, without a warning."""
    caplog.set_level(logging.WARNING)

    record_rl_metrics(pipeline.meter, tokens_per_sec=1200.0)
    assert pipeline.points("rl.throughput.tokens_per_sec")[0].value == 1200.0
    record_rl_metrics(pipeline.meter, throughput_tokens_per_sec=900.0)

    metrics = pipeline.metrics()
    assert set(metrics) == {"rl.throughput.tokens_per_sec"}
    assert metrics["rl.throughput.tokens_per_sec"].unit == "{token}/s"
    assert pipeline.points("rl.throughput.tokens_per_sec")[0].value == 900.0
    assert caplog.records == []


def test_given_both_throughput_tokens_per_sec_wins_with_one_warning(
    pipeline: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With both keywords the explicit one is recorded and tokens_per_sec dropped; one
    warning on the shim's logger says so, however many calls pass both."""
    caplog.set_level(logging.WARNING)

    record_rl_metrics(pipeline.meter, throughput_tokens_per_sec=800.0, tokens_per_sec=5.0)
    assert pipeline.points("rl.throughput.tokens_per_sec")[0].value == 800.0
    record_rl_metrics(pipeline.meter, throughput_tokens_per_sec=700.0, tokens_per_sec=6.0)

    assert pipeline.points("rl.throughput.tokens_per_sec")[0].value == 700.0
    (warning,) = caplog.records
    assert warning.name == "lens_compat_rl._record"
    assert warning.levelno == logging.WARNING
    message = warning.getMessage()
    assert "throughput_tokens_per_sec" in message
    assert "dropping tokens_per_sec" in message


def test_tokens_per_sec_goes_to_a_consumer_group_under_the_explicit_key(pipeline: Any) -> None:
    """The alias becomes the throughput_tokens_per_sec key, so a consumer's "rl" group
    receives it under its own series name."""
    register_metric_group(
        "rl", [MetricSpec("throughput_tokens_per_sec", "nemo_rl.tokens_per_sec", "gauge")]
    )

    record_rl_metrics(pipeline.meter, tokens_per_sec=321.0)

    assert pipeline.names() == {"nemo_rl.tokens_per_sec"}
    assert pipeline.points("nemo_rl.tokens_per_sec")[0].value == 321.0


def test_signature_keeps_the_legacy_order_and_appends_tokens_per_sec() -> None:
    """meter, the eleven legacy keywords in their order, then tokens_per_sec: all
    positional-or-keyword, every value defaulting to None, no **kwargs."""
    parameters = list(inspect.signature(record_rl_metrics).parameters.values())

    legacy_order = [row[0] for row in LEGACY_SERIES]
    assert [p.name for p in parameters] == ["meter", *legacy_order, "tokens_per_sec"]
    assert {p.kind for p in parameters} == {inspect.Parameter.POSITIONAL_OR_KEYWORD}
    assert parameters[0].default is inspect.Parameter.empty
    assert all(p.default is None for p in parameters[1:])


def test_none_values_are_skipped_without_creating_series(pipeline: Any) -> None:
    """Fields left at None record nothing and create no instrument."""
    record_rl_metrics(pipeline.meter, reward_mean=0.25)

    assert pipeline.names() == {"rl.reward.mean"}


def test_import_registers_nothing_and_the_first_call_registers_the_legacy_group(
    pipeline: Any,
) -> None:
    """The legacy group appears on the first call, not at import, and equals LEGACY_RL_SPECS."""
    import nemo.lens.instruments.rl  # noqa: F401  (importing must not register)

    assert LEGACY_RL_GROUP == "rl"
    assert "rl" not in registered_metric_groups()

    record_rl_metrics(pipeline.meter, entropy=1.5)

    assert registered_metric_groups()["rl"] == LEGACY_RL_SPECS


def test_consumer_group_wins_and_undeclared_fields_warn_once_each(
    pipeline: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With a consumer's "rl" group, values take the consumer's names; fields it lacks
    are skipped with one warning per field, however often they are passed."""
    consumer_specs = (
        MetricSpec("reward_mean", "nemo_rl.reward", "gauge"),
        MetricSpec("generation_duration_ms", "nemo_rl.generation.time", "histogram", unit="ms"),
    )
    register_metric_group("rl", consumer_specs)
    caplog.set_level(logging.WARNING)

    for _ in range(3):
        record_rl_metrics(
            pipeline.meter,
            reward_mean=0.9,
            generation_duration_ms=250.0,
            kl_divergence=0.01,
            entropy=2.0,
        )

    metrics = pipeline.metrics()
    assert set(metrics) == {"nemo_rl.reward", "nemo_rl.generation.time"}
    assert metrics["nemo_rl.reward"].data.data_points[0].value == 0.9
    assert metrics["nemo_rl.generation.time"].data.data_points[0].count == 3
    assert registered_metric_groups()["rl"] == consumer_specs
    skipped = [r.getMessage() for r in caplog.records if r.name.startswith("nemo.lens")]
    assert len(skipped) == 2
    assert any("'kl_divergence'" in message for message in skipped)
    assert any("'entropy'" in message for message in skipped)


def test_consumer_replacing_the_shim_group_needs_allow_override(pipeline: Any) -> None:
    """After the shim registered "rl", a consumer's plain registration is refused and an
    override takes effect from the next call."""
    record_rl_metrics(pipeline.meter, reward_mean=0.1)
    consumer_specs = [MetricSpec("reward_mean", "nemo_rl.reward", "gauge")]

    with pytest.raises(ValueError, match="allow_override"):
        register_metric_group("rl", consumer_specs)
    register_metric_group("rl", consumer_specs, allow_override=True)
    record_rl_metrics(pipeline.meter, reward_mean=0.2)

    assert pipeline.points("nemo_rl.reward")[0].value == 0.2
    assert pipeline.points("rl.reward.mean")[0].value == 0.1


def test_an_unregistered_group_is_registered_again_on_the_next_call(pipeline: Any) -> None:
    """When a consumer's test fixture drops "rl", the shim brings the legacy group back."""
    register_metric_group("rl", [MetricSpec("grad_norm", "nemo_rl.grad_norm", "gauge")])
    record_rl_metrics(pipeline.meter, grad_norm=3.0)
    unregister_metric_group("rl")

    record_rl_metrics(pipeline.meter, grad_norm=4.0)

    assert registered_metric_groups()["rl"] == LEGACY_RL_SPECS
    assert pipeline.points("rl.grad_norm")[0].value == 4.0
    assert pipeline.points("nemo_rl.grad_norm")[0].value == 3.0


def test_shim_and_record_metrics_share_the_legacy_series(pipeline: Any) -> None:
    """Code already migrated to record_metrics(meter, "rl", ...) writes the same series
    as legacy calls in the same process."""
    record_rl_metrics(pipeline.meter, rollout_duration_ms=100.0)
    record_metrics(pipeline.meter, "rl", rollout_duration_ms=300.0)

    (point,) = pipeline.points("rl.rollout.duration_ms")
    assert (point.count, point.sum) == (2, 400.0)


def test_integers_are_accepted_like_the_legacy_call(pipeline: Any) -> None:
    """Legacy callers pass ints (token counts, milliseconds); they record as numbers."""
    record_rl_metrics(pipeline.meter, response_length_mean=512, rollout_duration_ms=40)

    assert pipeline.points("rl.response_length.mean")[0].value == 512
    assert pipeline.points("rl.rollout.duration_ms")[0].sum == 40


def test_noop_meter_records_nothing_and_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """A disabled handle's no-op meter is accepted silently."""
    caplog.set_level(logging.DEBUG)

    record_rl_metrics(NoOpMeter("disabled"), reward_mean=1.0, generation_duration_ms=5.0)

    assert caplog.records == []


class _CountingLock:
    """Stands in for the registry lock and counts how often it is taken."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.taken = 0

    def __enter__(self) -> bool:
        self.taken += 1
        return self._lock.__enter__()

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self.taken += 1
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()


def test_a_steady_call_never_takes_the_registry_lock(
    pipeline: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the group and its instruments exist, a call costs no registry copy under the lock."""
    record_rl_metrics(pipeline.meter, reward_mean=0.1, grad_norm=1.0)
    counting = _CountingLock()
    monkeypatch.setattr(_registry, "lock", counting)

    for step in range(50):
        record_rl_metrics(pipeline.meter, reward_mean=float(step), grad_norm=1.0)

    assert counting.taken == 0
    assert pipeline.points("rl.reward.mean")[0].value == 49.0


def test_a_registry_reset_brings_the_legacy_group_back(pipeline: Any) -> None:
    """After a test's registry reset drops "rl", the next call registers it and records."""
    record_rl_metrics(pipeline.meter, entropy=1.0)
    reset_metric_registry()
    assert "rl" not in registered_metric_groups()

    record_rl_metrics(pipeline.meter, entropy=2.0)

    assert registered_metric_groups()["rl"] == LEGACY_RL_SPECS
    assert pipeline.points("rl.entropy")[0].value == 2.0


def test_a_consumer_group_registered_after_the_shim_ran_wins(pipeline: Any) -> None:
    """A consumer's own "rl", registered after a reset dropped the shim's, takes the next call."""
    record_rl_metrics(pipeline.meter, reward_mean=0.1)
    reset_metric_registry()
    consumer_specs = (MetricSpec("reward_mean", "nemo_rl.reward", "gauge"),)
    register_metric_group("rl", consumer_specs)

    record_rl_metrics(pipeline.meter, reward_mean=0.7)

    assert registered_metric_groups()["rl"] == consumer_specs
    assert pipeline.points("nemo_rl.reward")[0].value == 0.7
    assert pipeline.points("rl.reward.mean")[0].value == 0.1
