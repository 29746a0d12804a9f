"""Each shim's legacy function records into its group through lens-core's registry, and never
raises an Exception into the training step or the server.

The tests record on `rollout_duration_ms`, a histogram both shims have (the series
`<shim>.rollout.duration_ms`); what only one shim has is tested in that shim's own tests.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lens_shims import EACH_SHIM, Shim

from nemo.lens.instruments import (
    MetricSpec,
    _legacy_recorder,
    record_metrics,
    register_metric_group,
    registered_metric_groups,
)

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


@EACH_SHIM
def test_import_registers_nothing_and_the_first_call_registers_the_legacy_group(
    shim: Shim, pipeline: Any
) -> None:
    """The legacy group, named after the shim, appears on the first call, not at import,
    and holds the shim's legacy specs."""
    importlib.import_module(shim.legacy_module)  # importing must not register
    assert getattr(importlib.import_module(shim.package), shim.group_attribute) == shim.name
    assert shim.name not in registered_metric_groups()

    shim.function()(pipeline.meter, rollout_duration_ms=1.0)

    assert registered_metric_groups()[shim.name] == shim.specs()


@EACH_SHIM
def test_none_values_are_skipped_without_creating_series(shim: Shim, pipeline: Any) -> None:
    """Keywords left at None, or passed as None, record nothing and create no instrument."""
    record = shim.function()
    record(pipeline.meter, rollout_duration_ms=5.0)
    record(pipeline.meter)
    record(pipeline.meter, rollout_duration_ms=None)

    series = f"{shim.name}.rollout.duration_ms"
    assert pipeline.names() == {series}
    assert pipeline.points(series)[0].count == 1


@EACH_SHIM
def test_a_consumer_group_registered_first_wins(
    shim: Shim, pipeline: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With a consumer's own group of the shim's name, values take the consumer's names and
    kinds under the keyword keys; each keyword it does not declare is skipped with one
    warning, however often it is passed."""
    keys = [spec.key for spec in shim.specs() if spec.key != "rollout_duration_ms"]
    other, *undeclared = keys[:3]
    consumer_specs = (
        MetricSpec("rollout_duration_ms", "consumer.rollout", "histogram", unit="ms"),
        MetricSpec(other, "consumer.other", "up_down_counter"),
    )
    register_metric_group(shim.name, consumer_specs)
    caplog.set_level(logging.WARNING)

    for _ in range(3):
        values = dict.fromkeys([other, *undeclared], 1.0)
        shim.function()(pipeline.meter, rollout_duration_ms=50.0, **values)

    assert pipeline.names() == {"consumer.rollout", "consumer.other"}
    assert pipeline.points("consumer.rollout")[0].count == 3
    assert pipeline.points("consumer.other")[0].value == 3
    assert registered_metric_groups()[shim.name] == consumer_specs
    skipped = [r.getMessage() for r in caplog.records if r.name.startswith("nemo.lens")]
    assert len(skipped) == len(undeclared) == 2
    for key in undeclared:
        assert any(f"'{key}'" in message for message in skipped), key


@EACH_SHIM
def test_registering_the_group_after_the_shim_needs_allow_override(
    shim: Shim, pipeline: Any
) -> None:
    """After the shim registered its group, a consumer's plain registration of that name is
    refused, and an override takes effect from the next call."""
    record = shim.function()
    record(pipeline.meter, rollout_duration_ms=10.0)
    consumer_specs = [MetricSpec("rollout_duration_ms", "consumer.rollout", "histogram")]

    with pytest.raises(ValueError, match="allow_override"):
        register_metric_group(shim.name, consumer_specs)
    register_metric_group(shim.name, consumer_specs, allow_override=True)
    record(pipeline.meter, rollout_duration_ms=50.0)

    assert pipeline.points("consumer.rollout")[0].sum == 50.0
    assert pipeline.points(f"{shim.name}.rollout.duration_ms")[0].sum == 10.0


@EACH_SHIM
def test_legacy_and_migrated_calls_share_the_legacy_series(shim: Shim, pipeline: Any) -> None:
    """Code already migrated to record_metrics(meter, "<group>", ...) writes the same series
    as the legacy calls in the same process."""
    shim.function()(pipeline.meter, rollout_duration_ms=100.0)
    record_metrics(pipeline.meter, shim.name, rollout_duration_ms=300.0)

    (point,) = pipeline.points(f"{shim.name}.rollout.duration_ms")
    assert (point.count, point.sum) == (2, 400.0)


@EACH_SHIM
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_values_never_raise(shim: Shim, pipeline: Any, data: st.DataObject) -> None:
    """Whatever the values, including bools, NaN, huge ints and non-numbers, no exception
    reaches the caller."""
    keys = [spec.key for spec in shim.specs()]
    values = data.draw(st.fixed_dictionaries({}, optional=dict.fromkeys(keys, ANY_VALUE)))

    shim.function()(pipeline.meter, **values)


@EACH_SHIM
@pytest.mark.parametrize(
    "meter",
    [None, object(), "meter", 42, ExplodingMeter()],
    ids=["none", "object", "str", "int", "exploding"],
)
def test_unusable_meters_never_raise(
    shim: Shim, meter: object, caplog: pytest.LogCaptureFixture
) -> None:
    """Something that is not a meter is skipped with one warning, however many calls pass
    it, never an exception."""
    caplog.set_level(logging.WARNING)
    record = shim.function()

    record(meter, rollout_duration_ms=1.0)
    record(meter, rollout_duration_ms=2.0)

    (warning,) = caplog.records
    assert warning.name.startswith("nemo.lens")
    assert f"of type {type(meter).__name__} cannot be used as a meter" in warning.getMessage()


@EACH_SHIM
def test_an_unexpected_failure_is_swallowed_and_logged_once(
    shim: Shim, pipeline: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """If lens-core itself fails underneath, each call is skipped, with one WARNING on the
    shim's logger however many calls fail."""

    def broken_registry(*args: object, **kwargs: object) -> None:
        raise RuntimeError("registry unavailable")

    monkeypatch.setattr(_legacy_recorder, "register_metric_group", broken_registry)
    caplog.set_level(logging.WARNING, logger=shim.package)

    for _ in range(3):
        shim.function()(pipeline.meter, rollout_duration_ms=1.0)

    shim_records = [r for r in caplog.records if r.name == shim.recording_module]
    assert len(shim_records) == 1
    assert "RuntimeError" in shim_records[0].getMessage()
    assert "registry unavailable" in shim_records[0].getMessage()
    assert pipeline.names() == set()


@EACH_SHIM
def test_keyboard_interrupt_is_not_swallowed(shim: Shim, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only Exceptions are absorbed: Ctrl-C during a call still stops the program."""

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_legacy_recorder, "register_metric_group", interrupted)

    with pytest.raises(KeyboardInterrupt):
        shim.function()(object(), rollout_duration_ms=1.0)
