"""LegacyRecorder: what every deprecation shim's legacy record call does.

`record_demo_metrics` below plays a shim's legacy function: it hands its keyword values to
its recorder, as lens-compat-rl's `record_rl_metrics` does.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Mapping
from typing import Any

import pytest
from lens_meters import FailingCreateMeter

from nemo.lens.instruments import (
    MetricSpec,
    _legacy_recorder,
    record_metrics,
    register_metric_group,
    registered_metric_groups,
)
from nemo.lens.instruments._legacy_recorder import LegacyRecorder
from nemo.lens.testing import InMemoryMetrics, reset_metric_registry, reset_warning_memory

SHIM_LOGGER = "lens_demo_shim._record"
DEPRECATION = "record_demo_metrics() is deprecated; use record_metrics(meter, 'demo', ...)"
DEMO_SPECS = (
    MetricSpec("loss", "demo.loss", "gauge"),
    MetricSpec("step_time_ms", "demo.step_time", "histogram", unit="ms"),
)


def record_demo_metrics(
    recorder: LegacyRecorder,
    meter: Any,
    loss: float | None = None,
    step_time_ms: float | None = None,
) -> None:
    """A shim's legacy function: it leaves out the Nones and hands the rest over."""
    values: dict[str, float] = {}
    if loss is not None:
        values["loss"] = loss
    if step_time_ms is not None:
        values["step_time_ms"] = step_time_ms
    recorder.record(meter, values)


class ExplodingMeter:
    """A meter whose every attribute access raises."""

    def __getattr__(self, attribute: str) -> Any:
        raise RuntimeError(f"no {attribute} today")


def _deprecations(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, DeprecationWarning)]


def _shim_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == SHIM_LOGGER]


@pytest.fixture
def recorder() -> LegacyRecorder:
    """The demo shim's recorder, its deprecation already issued (`once.clear()` re-arms)."""
    built = LegacyRecorder(
        "record_demo_metrics", "demo", DEMO_SPECS, DEPRECATION, logging.getLogger(SHIM_LOGGER)
    )
    built.once.first(LegacyRecorder.DEPRECATION_KEY)
    return built


def test_the_legacy_group_is_registered_when_absent(
    recorder: LegacyRecorder, pipeline: InMemoryMetrics
) -> None:
    """The first call registers the shim's definition and records under its names; after a
    registry reset drops it, the next call registers it again."""
    assert "demo" not in registered_metric_groups()

    record_demo_metrics(recorder, pipeline.meter, loss=0.5, step_time_ms=12.0)
    assert registered_metric_groups()["demo"] == DEMO_SPECS
    reset_metric_registry()
    record_demo_metrics(recorder, pipeline.meter, loss=0.25)

    assert registered_metric_groups()["demo"] == DEMO_SPECS
    assert pipeline.points("demo.loss")[0].value == 0.25
    assert pipeline.points("demo.step_time")[0].sum == 12.0


def test_a_consumer_group_wins(recorder: LegacyRecorder, pipeline: InMemoryMetrics) -> None:
    """A group of the same name registered by a consumer is used as it is, never replaced."""
    consumer_specs = (MetricSpec("loss", "consumer.loss", "gauge"),)
    register_metric_group("demo", consumer_specs)

    record_demo_metrics(recorder, pipeline.meter, loss=0.75)

    assert registered_metric_groups()["demo"] == consumer_specs
    assert pipeline.names() == {"consumer.loss"}
    assert pipeline.points("consumer.loss")[0].value == 0.75


def test_a_consumer_registering_first_in_a_race_wins(
    recorder: LegacyRecorder,
    pipeline: InMemoryMetrics,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """When the consumer registers between the recorder's look-up and its registration, the
    refused registration is no failure: the consumer's group records, nothing is logged."""
    consumer_specs = (MetricSpec("loss", "consumer.loss", "gauge"),)

    def consumer_first(group: str, specs: Any) -> None:
        register_metric_group(group, consumer_specs)
        register_metric_group(group, specs)  # refused: the group exists now

    monkeypatch.setattr(_legacy_recorder, "register_metric_group", consumer_first)
    caplog.set_level(logging.WARNING)

    record_demo_metrics(recorder, pipeline.meter, loss=0.5)

    assert registered_metric_groups()["demo"] == consumer_specs
    assert pipeline.points("consumer.loss")[0].value == 0.5
    assert caplog.records == []


def test_the_values_given_reach_record_metrics_as_they_are(
    recorder: LegacyRecorder, pipeline: InMemoryMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder hands record_metrics exactly the values the shim gave, and only the
    series of those values is created."""
    passed: list[dict[str, object]] = []

    def spying(meter: Any, group: str, values: Mapping[str, object]) -> None:
        passed.append(dict(values))
        record_metrics(meter, group, values)

    monkeypatch.setattr(_legacy_recorder, "record_metrics", spying)

    record_demo_metrics(recorder, pipeline.meter, step_time_ms=3.0)

    assert passed == [{"step_time_ms": 3.0}]
    assert pipeline.names() == {"demo.step_time"}


@pytest.mark.parametrize("meter", [None, ExplodingMeter()], ids=["none", "exploding"])
def test_a_broken_meter_never_raises(
    recorder: LegacyRecorder, meter: object, caplog: pytest.LogCaptureFixture
) -> None:
    """Something that is not a usable meter costs the call, with one registry warning."""
    caplog.set_level(logging.WARNING)

    for _ in range(3):
        record_demo_metrics(recorder, meter, loss=1.0, step_time_ms=2.0)

    (warning,) = caplog.records
    assert warning.name.startswith("nemo.lens")
    assert "cannot be used as a meter" in warning.getMessage()


def test_a_failing_instrument_costs_only_its_own_key(
    recorder: LegacyRecorder, pipeline: InMemoryMetrics
) -> None:
    """A real meter whose histogram creation fails still records the gauge."""
    meter = FailingCreateMeter(pipeline.meter, "create_histogram")

    record_demo_metrics(recorder, meter, loss=0.5, step_time_ms=2.0)

    assert pipeline.names() == {"demo.loss"}


def test_an_unexpected_failure_is_logged_once_per_exception_type(
    recorder: LegacyRecorder,
    pipeline: InMemoryMetrics,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failure underneath is swallowed and logged on the shim's logger with its traceback,
    once per exception type however often it recurs."""
    failures: list[Exception] = [RuntimeError("registry unavailable")] * 3
    failures += [TypeError("bad group")] * 2 + [RuntimeError("again")]

    def failing(*args: object) -> None:
        raise failures.pop(0)

    monkeypatch.setattr(_legacy_recorder, "register_metric_group", failing)
    caplog.set_level(logging.WARNING)

    for _ in range(6):
        record_demo_metrics(recorder, pipeline.meter, loss=1.0)

    assert failures == []
    records = _shim_records(caplog)
    assert [record.getMessage() for record in records] == [
        "record_demo_metrics: unexpected RuntimeError (registry unavailable); the call was skipped",
        "record_demo_metrics: unexpected TypeError (bad group); the call was skipped",
    ]
    assert all(record.exc_info is not None for record in records)
    assert pipeline.names() == set()


def test_legacy_specs_the_registry_refuses_are_logged_not_hidden(
    pipeline: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """A shim whose own specs the registry refuses (two specs with one key) logs that
    refusal once on its logger, and the call records nothing, rather than failing quietly."""
    duplicate = (*DEMO_SPECS, MetricSpec("loss", "demo.loss.again", "gauge"))
    broken = LegacyRecorder(
        "record_demo_metrics", "demo", duplicate, DEPRECATION, logging.getLogger(SHIM_LOGGER)
    )
    broken.once.first(LegacyRecorder.DEPRECATION_KEY)
    caplog.set_level(logging.WARNING)

    for _ in range(3):
        record_demo_metrics(broken, pipeline.meter, loss=1.0)

    (record,) = _shim_records(caplog)
    assert record.getMessage().startswith("record_demo_metrics: unexpected LensValueError")
    assert "demo" not in registered_metric_groups()
    assert pipeline.names() == set()


def test_keyboard_interrupt_passes(
    recorder: LegacyRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only Exceptions are absorbed: Ctrl-C during a step still stops the program."""

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_legacy_recorder, "register_metric_group", interrupted)

    with pytest.raises(KeyboardInterrupt):
        record_demo_metrics(recorder, object(), loss=1.0)


def test_one_deprecation_per_process_at_the_line_calling_the_shim(
    recorder: LegacyRecorder, pipeline: InMemoryMetrics
) -> None:
    """Of many calls only the first warns, with the shim's text, at the file and line that
    called the shim's function (not the shim's, not lens-core's)."""
    recorder.once.clear()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call_line = sys._getframe().f_lineno + 1
        record_demo_metrics(recorder, pipeline.meter, loss=1.0)
        for _ in range(3):
            record_demo_metrics(recorder, pipeline.meter, loss=2.0)

    (warning,) = _deprecations(caught)
    assert str(warning.message) == DEPRECATION
    assert warning.filename == __file__
    assert warning.lineno == call_line


def test_the_deprecation_comes_after_the_values_are_recorded(
    recorder: LegacyRecorder, pipeline: InMemoryMetrics
) -> None:
    """Under an "error" filter the one warning raises once the values are in; later calls
    neither warn nor raise, and a failed call still counts as the first."""
    recorder.once.clear()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DeprecationWarning, match="record_demo_metrics"):
            record_demo_metrics(recorder, pipeline.meter, loss=0.5)
        assert pipeline.points("demo.loss")[0].value == 0.5
        record_demo_metrics(recorder, pipeline.meter, loss=0.25)

    assert pipeline.points("demo.loss")[0].value == 0.25


def test_a_failed_first_call_still_warns(recorder: LegacyRecorder) -> None:
    """The deprecation does not depend on the recording succeeding."""
    recorder.once.clear()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record_demo_metrics(recorder, ExplodingMeter(), loss=1.0)

    assert len(_deprecations(caught)) == 1


def test_resetting_warning_memory_re_arms_the_deprecation(
    recorder: LegacyRecorder, pipeline: InMemoryMetrics
) -> None:
    """The once-per-process memory is lens-core's: reset_warning_memory() forgets it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record_demo_metrics(recorder, pipeline.meter, loss=1.0)  # the fixture marked it issued
        assert _deprecations(caught) == []
        reset_warning_memory()
        record_demo_metrics(recorder, pipeline.meter, loss=2.0)
        record_demo_metrics(recorder, pipeline.meter, loss=3.0)

    assert len(_deprecations(caught)) == 1


def test_warn_once_logs_each_key_once_on_the_shims_logger(
    recorder: LegacyRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    """warn_once formats lazily and logs the first time a key is seen, at WARNING."""
    caplog.set_level(logging.WARNING)

    for _ in range(3):
        recorder.warn_once("alias", "record_demo_metrics: %s was dropped", "old_loss")
    recorder.warn_once("other", "record_demo_metrics: another note")

    records = _shim_records(caplog)
    assert [record.getMessage() for record in records] == [
        "record_demo_metrics: old_loss was dropped",
        "record_demo_metrics: another note",
    ]
    assert {record.levelno for record in records} == {logging.WARNING}


def test_warn_once_keys_never_consume_the_deprecation(
    recorder: LegacyRecorder, pipeline: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """A note keyed like the deprecation or a failure is its own key: the deprecation still
    comes, and the note is still logged."""
    recorder.once.clear()
    caplog.set_level(logging.WARNING)

    recorder.warn_once(LegacyRecorder.DEPRECATION_KEY, "a note")
    recorder.warn_once(("failure", "RuntimeError"), "another note")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record_demo_metrics(recorder, pipeline.meter, loss=1.0)

    assert len(_deprecations(caught)) == 1
    assert [record.getMessage() for record in _shim_records(caplog)] == ["a note", "another note"]
