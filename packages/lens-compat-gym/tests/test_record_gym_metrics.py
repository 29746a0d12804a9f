"""record_gym_metrics records the legacy Gym series through lens-core's registry."""

from __future__ import annotations

import inspect
import logging
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import Gauge, Histogram

from lens_compat_gym import LEGACY_GYM_GROUP, LEGACY_GYM_SPECS, record_gym_metrics
from nemo.lens.instruments import (
    MetricSpec,
    record_metrics,
    register_metric_group,
    registered_metric_groups,
)

# The legacy series, written out from the legacy table (not read from the shim's specs).
LEGACY_SERIES = [
    ("server_request_duration_ms", "gym.server.request_duration_ms", Histogram, "ms"),
    ("rollout_duration_ms", "gym.rollout.duration_ms", Histogram, "ms"),
    ("verify_duration_ms", "gym.verify.duration_ms", Histogram, "ms"),
    ("verify_success_rate", "gym.verify.success_rate", Gauge, ""),
    ("active_servers", "gym.servers.active", Gauge, ""),
]
LEGACY_KEYWORDS = [row[0] for row in LEGACY_SERIES]


@pytest.mark.parametrize(
    ("keyword", "series", "data_type", "unit"), LEGACY_SERIES, ids=LEGACY_KEYWORDS
)
def test_each_keyword_creates_exactly_its_legacy_series(
    pipeline: Any, keyword: str, series: str, data_type: type[Any], unit: str
) -> None:
    """One keyword creates one instrument: its legacy name, kind (histogram or gauge) and unit."""
    record_gym_metrics(pipeline.meter, **{keyword: 0.75})
    record_gym_metrics(pipeline.meter, **{keyword: 0.25})

    metrics = pipeline.metrics()
    assert set(metrics) == {series}
    metric = metrics[series]
    assert isinstance(metric.data, data_type)
    assert metric.unit == unit
    (point,) = metric.data.data_points
    if data_type is Gauge:
        assert point.value == 0.25  # a gauge keeps the last value
    else:
        assert (point.count, point.sum, point.min, point.max) == (2, 1.0, 0.25, 0.75)


def test_the_signature_is_the_legacy_one() -> None:
    """meter, then the five keywords in the legacy order, all positional-or-keyword with a
    None default, and no **kwargs."""
    parameters = list(inspect.signature(record_gym_metrics).parameters.values())

    assert [parameter.name for parameter in parameters] == ["meter", *LEGACY_KEYWORDS]
    assert {parameter.kind for parameter in parameters} == {inspect.Parameter.POSITIONAL_OR_KEYWORD}
    assert parameters[0].default is inspect.Parameter.empty
    assert [parameter.default for parameter in parameters[1:]] == [None] * 5


def test_positional_values_follow_the_legacy_order(pipeline: Any) -> None:
    """Positional values after the meter land on the series in signature order."""
    values = [120.0, 900.0, 35.0, 0.5, 4]
    record_gym_metrics(pipeline.meter, *values)

    for (_keyword, series, data_type, _unit), value in zip(LEGACY_SERIES, values, strict=True):
        (point,) = pipeline.points(series)
        assert (point.value if data_type is Gauge else point.sum) == value, series


def test_none_values_are_skipped_without_creating_series(pipeline: Any) -> None:
    """Keywords left at None, or passed as None, record nothing and create no instrument."""
    record_gym_metrics(pipeline.meter, rollout_duration_ms=None, active_servers=2)
    record_gym_metrics(pipeline.meter)

    assert pipeline.names() == {"gym.servers.active"}
    assert pipeline.points("gym.servers.active")[0].value == 2


def test_the_legacy_specs_are_the_legacy_table_in_signature_order() -> None:
    """LEGACY_GYM_SPECS holds one described spec per keyword, as the legacy table says."""
    assert LEGACY_GYM_GROUP == "gym"
    kinds = {Histogram: "histogram", Gauge: "gauge"}
    expected = [(key, name, kinds[data], unit) for key, name, data, unit in LEGACY_SERIES]
    assert [(s.key, s.name, s.kind, s.unit) for s in LEGACY_GYM_SPECS] == expected
    assert all(spec.description for spec in LEGACY_GYM_SPECS)


def test_import_registers_nothing_and_the_first_call_registers_the_legacy_group(
    pipeline: Any,
) -> None:
    """The legacy group appears on the first call, not at import, and equals LEGACY_GYM_SPECS."""
    import nemo.lens.instruments.gym  # noqa: F401  (importing must not register)

    assert "gym" not in registered_metric_groups()

    record_gym_metrics(pipeline.meter, verify_success_rate=1.0)

    assert registered_metric_groups()["gym"] == LEGACY_GYM_SPECS


def test_a_consumer_group_registered_first_wins(
    pipeline: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With the consumer's own "gym" group, values take the consumer's names under the
    keyword keys; a keyword it does not declare is skipped with one warning."""
    consumer_specs = (
        MetricSpec("rollout_duration_ms", "nemo_gym.rollout.time", "histogram", unit="ms"),
        MetricSpec("active_servers", "nemo_gym.servers", "up_down_counter"),
    )
    register_metric_group("gym", consumer_specs)
    caplog.set_level(logging.WARNING)

    for _ in range(3):
        record_gym_metrics(
            pipeline.meter, rollout_duration_ms=50.0, active_servers=1, verify_duration_ms=9.0
        )

    metrics = pipeline.metrics()
    assert set(metrics) == {"nemo_gym.rollout.time", "nemo_gym.servers"}
    assert metrics["nemo_gym.rollout.time"].data.data_points[0].count == 3
    assert metrics["nemo_gym.servers"].data.data_points[0].value == 3
    assert registered_metric_groups()["gym"] == consumer_specs
    skipped = [r.getMessage() for r in caplog.records if r.name.startswith("nemo.lens")]
    assert len(skipped) == 1
    assert "'verify_duration_ms'" in skipped[0]


def test_registering_gym_after_the_shim_needs_allow_override(pipeline: Any) -> None:
    """After the shim registered "gym", a plain registration is refused; an override takes
    effect from the next call."""
    record_gym_metrics(pipeline.meter, active_servers=2)
    consumer_specs = [MetricSpec("active_servers", "nemo_gym.servers.active", "gauge")]

    with pytest.raises(ValueError, match="allow_override"):
        register_metric_group("gym", consumer_specs)
    register_metric_group("gym", consumer_specs, allow_override=True)
    record_gym_metrics(pipeline.meter, active_servers=5)

    assert pipeline.points("nemo_gym.servers.active")[0].value == 5
    assert pipeline.points("gym.servers.active")[0].value == 2


def test_legacy_and_migrated_calls_share_the_legacy_series(pipeline: Any) -> None:
    """Code already migrated to record_metrics(meter, "gym", ...) writes the same series as
    the legacy calls in the same process."""
    record_gym_metrics(pipeline.meter, server_request_duration_ms=10.0)
    record_metrics(pipeline.meter, "gym", server_request_duration_ms=30.0)

    (point,) = pipeline.points("gym.server.request_duration_ms")
    assert (point.count, point.sum) == (2, 40.0)
