"""record_rl_metrics through lens-core's registry: its tokens_per_sec gauge, ints, a no-op
meter, a steady call without the registry lock, and the legacy group's life beside a
consumer's "rl" group and registry resets.

What every shim does alike (the legacy table, signature and series, None values, a
consumer's group registered first, the deprecation, never raising) is tested once per shim
in the root tests/.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from opentelemetry.metrics import NoOpMeter

from lens_compat_rl import LEGACY_RL_SPECS, record_rl_metrics
from nemo.lens.instruments import (
    MetricSpec,
    _registry,
    register_metric_group,
    registered_metric_groups,
    unregister_metric_group,
)
from nemo.lens.testing import reset_metric_registry


def test_tokens_per_sec_records_the_legacy_gauge_rl_tokens_per_sec(
    pipeline: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The keyword of the first registry revision records that revision's own gauge,
    rl.tokens_per_sec in {token}/s, without a warning (RL's tee test asks for this series)."""
    caplog.set_level(logging.WARNING)

    record_rl_metrics(pipeline.meter, tokens_per_sec=4000.0)

    metrics = pipeline.metrics()
    assert set(metrics) == {"rl.tokens_per_sec"}
    assert metrics["rl.tokens_per_sec"].unit == "{token}/s"
    assert [point.value for point in pipeline.points("rl.tokens_per_sec")] == [4000.0]
    assert caplog.records == []


def test_given_both_throughput_keywords_both_series_are_recorded(
    pipeline: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """throughput_tokens_per_sec keeps its series and tokens_per_sec keeps its own: one call
    with both records both values, each under its name, with no warning."""
    caplog.set_level(logging.WARNING)

    record_rl_metrics(pipeline.meter, throughput_tokens_per_sec=800.0, tokens_per_sec=5.0)

    assert pipeline.names() == {"rl.throughput.tokens_per_sec", "rl.tokens_per_sec"}
    assert pipeline.points("rl.throughput.tokens_per_sec")[0].value == 800.0
    assert pipeline.points("rl.tokens_per_sec")[0].value == 5.0
    assert caplog.records == []


def test_tokens_per_sec_goes_to_a_consumer_group_under_its_own_key(pipeline: Any) -> None:
    """A consumer's "rl" group receives tokens_per_sec under that key, so the consumer's
    spec names the series."""
    register_metric_group("rl", [MetricSpec("tokens_per_sec", "nemo_rl.tokens_per_sec", "gauge")])

    record_rl_metrics(pipeline.meter, tokens_per_sec=321.0)

    assert pipeline.names() == {"nemo_rl.tokens_per_sec"}
    assert pipeline.points("nemo_rl.tokens_per_sec")[0].value == 321.0


def test_an_unregistered_group_is_registered_again_on_the_next_call(pipeline: Any) -> None:
    """When a consumer's test fixture drops "rl", the shim brings the legacy group back."""
    register_metric_group("rl", [MetricSpec("grad_norm", "nemo_rl.grad_norm", "gauge")])
    record_rl_metrics(pipeline.meter, grad_norm=3.0)
    unregister_metric_group("rl")

    record_rl_metrics(pipeline.meter, grad_norm=4.0)

    assert registered_metric_groups()["rl"] == LEGACY_RL_SPECS
    assert pipeline.points("rl.grad_norm")[0].value == 4.0
    assert pipeline.points("nemo_rl.grad_norm")[0].value == 3.0


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
