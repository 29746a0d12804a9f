"""record_rl_metrics never raises an Exception into the training step: a bad value or a
failing instrument costs only its own field.

What every shim does alike (unusable meters, any values, failures inside lens-core, Ctrl-C)
is tested once per shim in the root tests/test_shim_recording.py.
"""

from __future__ import annotations

import decimal
import fractions
from typing import Any

from lens_compat_rl import record_rl_metrics
from nemo.lens.instruments import MetricSpec, register_metric_group


class FailingCreateMeter:
    """Wraps a real meter; creating any instrument raises."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("create_"):

            def fail(*args: object, **kwargs: object) -> Any:
                raise RuntimeError("the SDK is having a bad day")

            return fail
        return getattr(self._real, attribute)


def test_a_failing_sdk_call_costs_only_its_own_field(pipeline: Any) -> None:
    """A refused value or a failing instrument creation skips that field; the others record."""
    record_rl_metrics(
        pipeline.meter,
        reward_mean=float("nan"),
        kl_divergence=True,
        rollout_duration_ms=-5.0,
        entropy=decimal.Decimal("1.5"),  # type: ignore[arg-type]  # not a numbers.Real
        value_loss=fractions.Fraction(1, 4),  # type: ignore[arg-type]  # deliberately wrong
    )
    record_rl_metrics(FailingCreateMeter(pipeline.meter), grad_norm=1.0)

    assert pipeline.names() == {"rl.value_loss"}
    assert pipeline.points("rl.value_loss")[0].value == 0.25


def test_a_consumer_group_with_another_kind_still_never_raises(pipeline: Any) -> None:
    """A consumer may declare a legacy key as a counter; a negative value is then skipped."""
    register_metric_group("rl", [MetricSpec("policy_loss", "nemo_rl.policy_loss", "counter")])

    record_rl_metrics(pipeline.meter, policy_loss=-0.5)
    record_rl_metrics(pipeline.meter, policy_loss=0.5)

    assert pipeline.points("nemo_rl.policy_loss")[0].value == 0.5
