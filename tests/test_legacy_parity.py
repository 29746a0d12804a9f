"""Parity: every legacy keyword of each shim maps to a spec and a series of the legacy name,
kind and unit.

The legacy tables are written out here from lens 0.2 (not read from the shims' specs), so a
change to LEGACY_RL_SPECS / LEGACY_GYM_SPECS, to a signature or to what lens-core emits
cannot slip through unseen.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from lens_shims import EACH_SHIM, SHIMS, Shim

# keyword -> (series, kind, unit) of what lens 0.2's record_rl_metrics created.
LEGACY_RL = {
    "reward_mean": ("rl.reward.mean", "gauge", ""),
    "kl_divergence": ("rl.kl_divergence", "gauge", ""),
    "policy_loss": ("rl.policy_loss", "gauge", ""),
    "value_loss": ("rl.value_loss", "gauge", ""),
    "entropy": ("rl.entropy", "gauge", ""),
    "response_length_mean": ("rl.response_length.mean", "gauge", ""),
    "grad_norm": ("rl.grad_norm", "gauge", ""),
    "learning_rate": ("rl.learning_rate", "gauge", ""),
    "throughput_tokens_per_sec": ("rl.throughput.tokens_per_sec", "gauge", "{token}/s"),
    "generation_duration_ms": ("rl.generation.duration_ms", "histogram", "ms"),
    "rollout_duration_ms": ("rl.rollout.duration_ms", "histogram", "ms"),
    # The keyword of the first registry revision (Lens PR #29's first commit), its own gauge.
    "tokens_per_sec": ("rl.tokens_per_sec", "gauge", "{token}/s"),
}
# The same for record_gym_metrics. The gauges had no unit: one now would rename their
# Prometheus series (`_ratio`, ...) under dashboards.
LEGACY_GYM = {
    "server_request_duration_ms": ("gym.server.request_duration_ms", "histogram", "ms"),
    "rollout_duration_ms": ("gym.rollout.duration_ms", "histogram", "ms"),
    "verify_duration_ms": ("gym.verify.duration_ms", "histogram", "ms"),
    "verify_success_rate": ("gym.verify.success_rate", "gauge", ""),
    "active_servers": ("gym.servers.active", "gauge", ""),
}
LEGACY_TABLES = {"rl": LEGACY_RL, "gym": LEGACY_GYM}
EACH_KEYWORD = pytest.mark.parametrize(
    ("shim", "keyword"),
    [
        pytest.param(SHIMS[name], keyword, marks=pytest.mark.shim(name), id=f"{name}-{keyword}")
        for name, table in LEGACY_TABLES.items()
        for keyword in table
    ],
)


def _kind_of(metric: Any) -> str:
    """The MetricSpec kind an SDK metric's data corresponds to."""
    from opentelemetry.sdk.metrics.export import Gauge, Histogram, Sum

    data = metric.data
    if isinstance(data, Gauge):
        return "gauge"
    if isinstance(data, Histogram):
        return "histogram"
    if isinstance(data, Sum):
        return "counter" if data.is_monotonic else "up_down_counter"
    raise AssertionError(f"unexpected data type {type(data).__name__}")


@EACH_SHIM
def test_signature_is_the_legacy_signature(shim: Shim) -> None:
    """meter, then the legacy keywords in legacy order:
    positional-or-keyword, default None, and no **kwargs, because callers filter keywords
    with inspect.signature."""
    table = LEGACY_TABLES[shim.name]
    parameters = list(inspect.signature(shim.function()).parameters.values())

    assert [p.name for p in parameters] == ["meter", *table]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters)
    assert parameters[0].default is inspect.Parameter.empty
    assert all(p.default is None for p in parameters[1:])


@EACH_SHIM
def test_the_legacy_specs_are_the_legacy_table_in_signature_order(shim: Shim) -> None:
    """The legacy specs hold one described spec per keyword, in order, with the legacy name,
    kind and unit."""
    specs = shim.specs()

    expected = [(key, *series) for key, series in LEGACY_TABLES[shim.name].items()]
    assert [(spec.key, spec.name, spec.kind, spec.unit) for spec in specs] == expected
    assert all(spec.description for spec in specs)
    assert len({spec.name for spec in specs}) == len(specs)


@EACH_KEYWORD
def test_each_keyword_creates_exactly_its_legacy_series(
    pipeline: Any, shim: Shim, keyword: str
) -> None:
    """Recording one keyword twice through the shim creates one series, whose name, kind and
    unit are its spec's and the legacy ones; a gauge keeps the last value, a histogram both."""
    (spec,) = [spec for spec in shim.specs() if spec.key == keyword]

    shim.function()(pipeline.meter, **{keyword: 42.5})
    shim.function()(pipeline.meter, **{keyword: 7.5})

    metrics = pipeline.metrics()
    assert list(metrics) == [spec.name]
    metric = metrics[spec.name]
    assert (metric.name, _kind_of(metric), metric.unit) == (spec.name, spec.kind, spec.unit)
    assert (metric.name, _kind_of(metric), metric.unit) == LEGACY_TABLES[shim.name][keyword]
    (point,) = metric.data.data_points
    if spec.kind == "gauge":
        assert point.value == 7.5
    else:
        assert (point.count, point.sum, point.min, point.max) == (2, 50.0, 7.5, 42.5)


@EACH_SHIM
def test_positional_values_follow_the_legacy_order(pipeline: Any, shim: Shim) -> None:
    """Positional values after the meter land on the legacy series in signature order."""
    table = LEGACY_TABLES[shim.name]
    values = [float(index + 1) for index in range(len(table))]

    shim.function()(pipeline.meter, *values)

    for (series, kind, _unit), value in zip(table.values(), values, strict=True):
        (point,) = pipeline.points(series)
        assert (point.value if kind == "gauge" else point.sum) == value, series
