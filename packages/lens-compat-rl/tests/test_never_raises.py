"""record_rl_metrics never raises an Exception into the training step."""

from __future__ import annotations

import decimal
import fractions
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lens_compat_rl import LEGACY_RL_SPECS, record_rl_metrics
from nemo.lens.instruments import MetricSpec, _legacy_recorder, register_metric_group

FIELDS = [spec.key for spec in LEGACY_RL_SPECS]

ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**1100), max_value=2**1100),
    st.floats(allow_nan=True, allow_infinity=True),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.fractions(),
    st.complex_numbers(),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.lists(st.floats(), max_size=3),
    st.builds(object),
)


class ExplodingMeter:
    """A meter whose every attribute access raises."""

    def __getattr__(self, attribute: str) -> Any:
        raise RuntimeError(f"no {attribute} today")


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


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.fixed_dictionaries({}, optional=dict.fromkeys(FIELDS, ANY_VALUE)))
def test_any_values_never_raise(pipeline: Any, values: dict[str, object]) -> None:
    """Whatever the values, including bools, NaN, huge ints and non-numbers, no exception
    reaches the caller."""
    record_rl_metrics(pipeline.meter, **values)  # type: ignore[arg-type]  # any value, on purpose


@pytest.mark.parametrize(
    "meter",
    [None, object(), "meter", 42, ExplodingMeter()],
    ids=["none", "object", "str", "int", "exploding"],
)
def test_unusable_meters_never_raise(meter: object, caplog: pytest.LogCaptureFixture) -> None:
    """Something that is not a meter is skipped with one warning, never an exception."""
    caplog.set_level(logging.WARNING)

    record_rl_metrics(meter, reward_mean=1.0, generation_duration_ms=2.0)

    (warning,) = caplog.records
    assert warning.name.startswith("nemo.lens")
    assert f"of type {type(meter).__name__} cannot be used as a meter" in warning.getMessage()


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


def test_an_unexpected_failure_is_swallowed_and_logged_once(
    pipeline: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """If lens-core itself fails underneath, the call is skipped with one WARNING, however
    many calls fail."""

    def broken_registry(*args: object, **kwargs: object) -> None:
        raise RuntimeError("registry unavailable")

    monkeypatch.setattr(_legacy_recorder, "register_metric_group", broken_registry)
    caplog.set_level(logging.WARNING, logger="lens_compat_rl")

    for _ in range(3):
        record_rl_metrics(pipeline.meter, reward_mean=1.0)

    shim_records = [r for r in caplog.records if r.name == "lens_compat_rl._record"]
    assert len(shim_records) == 1
    assert "RuntimeError" in shim_records[0].getMessage()
    assert pipeline.names() == set()


def test_keyboard_interrupt_is_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only Exceptions are absorbed: Ctrl-C during a step still stops the program."""

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_legacy_recorder, "register_metric_group", interrupted)

    with pytest.raises(KeyboardInterrupt):
        record_rl_metrics(object(), reward_mean=1.0)
