"""record_gym_metrics never raises an Exception into the Gym server or training loop."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nemo.lens.instruments._legacy_recorder
from lens_compat_gym import LEGACY_GYM_SPECS, record_gym_metrics

KEYWORDS = [spec.key for spec in LEGACY_GYM_SPECS]

ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**1100), max_value=2**1100),
    st.floats(allow_nan=True, allow_infinity=True),
    st.decimals(allow_nan=True, allow_infinity=True),
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


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.fixed_dictionaries({}, optional=dict.fromkeys(KEYWORDS, ANY_VALUE)))
def test_any_values_never_raise(pipeline: Any, values: dict[str, object]) -> None:
    """Whatever the values, including NaN, huge ints and non-numbers, no exception reaches
    the caller."""
    record_gym_metrics(pipeline.meter, **values)  # type: ignore[arg-type]  # any value, on purpose


@pytest.mark.parametrize(
    "meter",
    [None, object(), "meter", 42, ExplodingMeter()],
    ids=["none", "object", "str", "int", "exploding"],
)
def test_unusable_meters_never_raise(meter: object, caplog: pytest.LogCaptureFixture) -> None:
    """Something that is not a meter is skipped with one warning, never an exception."""
    caplog.set_level(logging.WARNING)

    record_gym_metrics(meter, rollout_duration_ms=1.0, active_servers=2)
    record_gym_metrics(meter, rollout_duration_ms=2.0)

    (warning,) = caplog.records
    assert warning.name.startswith("nemo.lens")
    assert f"of type {type(meter).__name__} cannot be used as a meter" in warning.getMessage()


def test_bad_values_cost_only_their_own_series(pipeline: Any) -> None:
    """A string, NaN, an arbitrary object or a negative duration is skipped; the valid
    values of the same call record."""
    record_gym_metrics(
        pipeline.meter,
        server_request_duration_ms="abc",  # type: ignore[arg-type]  # deliberately wrong
        rollout_duration_ms=float("nan"),
        verify_duration_ms=-5.0,
        verify_success_rate=object(),  # type: ignore[arg-type]  # deliberately wrong
        active_servers=3,
    )
    record_gym_metrics(pipeline.meter, verify_success_rate=0.5)

    assert pipeline.names() == {"gym.servers.active", "gym.verify.success_rate"}
    assert pipeline.points("gym.servers.active")[0].value == 3
    assert pipeline.points("gym.verify.success_rate")[0].value == 0.5


def test_a_broken_registry_is_swallowed_and_logged_once(
    pipeline: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """If lens-core fails underneath, each call is skipped, with one WARNING on the shim's
    logger however many calls fail."""

    def broken_registry(*args: object, **kwargs: object) -> None:
        raise RuntimeError("registry unavailable")

    monkeypatch.setattr(
        nemo.lens.instruments._legacy_recorder, "register_metric_group", broken_registry
    )
    caplog.set_level(logging.WARNING, logger="lens_compat_gym")

    for _ in range(3):
        record_gym_metrics(pipeline.meter, active_servers=1)

    shim_records = [r for r in caplog.records if r.name == "lens_compat_gym._record"]
    assert len(shim_records) == 1
    assert "RuntimeError" in shim_records[0].getMessage()
    assert "registry unavailable" in shim_records[0].getMessage()
    assert pipeline.names() == set()


def test_keyboard_interrupt_is_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only Exceptions are absorbed: Ctrl-C during a call still stops the program."""

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(
        nemo.lens.instruments._legacy_recorder, "register_metric_group", interrupted
    )

    with pytest.raises(KeyboardInterrupt):
        record_gym_metrics(object(), active_servers=1)
