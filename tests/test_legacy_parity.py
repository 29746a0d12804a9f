"""Parity: every legacy keyword of each shim maps to a spec of the legacy kind and unit.

The legacy kinds and units are written out here from the lens 0.2 tables, so a change to
LEGACY_RL_SPECS / LEGACY_GYM_SPECS, to a signature or to what lens-core emits cannot slip
through unseen.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

# keyword -> (kind, unit) of the series lens 0.2's record_rl_metrics created.
LEGACY_RL = {
    "reward_mean": ("gauge", ""),
    "kl_divergence": ("gauge", ""),
    "policy_loss": ("gauge", ""),
    "value_loss": ("gauge", ""),
    "entropy": ("gauge", ""),
    "response_length_mean": ("gauge", ""),
    "grad_norm": ("gauge", ""),
    "learning_rate": ("gauge", ""),
    "throughput_tokens_per_sec": ("gauge", "{token}/s"),
    "generation_duration_ms": ("histogram", "ms"),
    "rollout_duration_ms": ("histogram", "ms"),
}
# keyword -> (kind, unit, series) of what lens 0.2's record_gym_metrics created. The gauges
# had no unit: one now would rename their Prometheus series (`_ratio`, ...) under dashboards.
LEGACY_GYM = {
    "server_request_duration_ms": ("histogram", "ms", "gym.server.request_duration_ms"),
    "rollout_duration_ms": ("histogram", "ms", "gym.rollout.duration_ms"),
    "verify_duration_ms": ("histogram", "ms", "gym.verify.duration_ms"),
    "verify_success_rate": ("gauge", "", "gym.verify.success_rate"),
    "active_servers": ("gauge", "", "gym.servers.active"),
}
# shim -> (legacy module, function, shim package, specs name, keyword -> (kind, unit))
SHIMS = {
    "rl": ("nemo.lens.instruments.rl", "record_rl_metrics", "lens_compat_rl", "LEGACY_RL_SPECS",
           LEGACY_RL),
    "gym": ("nemo.lens.instruments.gym", "record_gym_metrics", "lens_compat_gym",
            "LEGACY_GYM_SPECS", {key: value[:2] for key, value in LEGACY_GYM.items()}),
}  # fmt: skip
# The keywords each shim accepts beyond its table: aliases recorded as a table entry.
ALIASES = {"rl": ["tokens_per_sec"], "gym": []}
EACH_SHIM = pytest.mark.parametrize(
    "shim", [pytest.param(shim, marks=pytest.mark.shim(shim), id=shim) for shim in SHIMS]
)
EACH_KEYWORD = pytest.mark.parametrize(
    ("shim", "keyword"),
    [
        pytest.param(shim, keyword, marks=pytest.mark.shim(shim), id=f"{shim}-{keyword}")
        for shim, (*_, table) in SHIMS.items()
        for keyword in table
    ],
)


def _legacy_function(shim: str) -> Any:
    module, function, *_ = SHIMS[shim]
    return getattr(importlib.import_module(module), function)


def _legacy_specs(shim: str) -> Any:
    _, _, package, specs, _ = SHIMS[shim]
    return getattr(importlib.import_module(package), specs)


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
def test_signature_is_the_legacy_signature(shim: str) -> None:
    """meter, then the legacy keywords in legacy order (and the aliases after them):
    positional-or-keyword, default None, and no **kwargs, because callers filter keywords
    with inspect.signature."""
    table = SHIMS[shim][-1]
    parameters = list(inspect.signature(_legacy_function(shim)).parameters.values())

    assert [p.name for p in parameters] == ["meter", *table, *ALIASES[shim]]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters)
    assert parameters[0].default is inspect.Parameter.empty
    assert all(p.default is None for p in parameters[1:])


@EACH_SHIM
def test_every_legacy_keyword_has_exactly_one_spec_of_the_same_kind_and_unit(shim: str) -> None:
    """The legacy specs hold one spec per keyword, in order, with the legacy kind and unit."""
    table = SHIMS[shim][-1]
    specs = _legacy_specs(shim)

    assert [spec.key for spec in specs] == list(table)
    for spec in specs:
        assert (spec.kind, spec.unit) == table[spec.key], spec.key
    assert len({spec.name for spec in specs}) == len(specs)


@pytest.mark.shim("gym")
def test_gym_series_keep_their_legacy_names() -> None:
    """The five Gym series are named as lens 0.2 named them."""
    from lens_compat_gym import LEGACY_GYM_SPECS

    assert {spec.key: spec.name for spec in LEGACY_GYM_SPECS} == {
        key: name for key, (_, _, name) in LEGACY_GYM.items()
    }


@EACH_KEYWORD
def test_each_keyword_is_emitted_with_its_specs_name_kind_and_unit(
    pipeline: Any, shim: str, keyword: str
) -> None:
    """Recording one keyword through the shim creates one series whose name, kind and unit
    are its spec's, which are the legacy ones."""
    (spec,) = [spec for spec in _legacy_specs(shim) if spec.key == keyword]

    _legacy_function(shim)(pipeline.meter, **{keyword: 3.0})

    metrics = pipeline.metrics()
    assert list(metrics) == [spec.name]
    metric = metrics[spec.name]
    assert (_kind_of(metric), metric.unit) == (spec.kind, spec.unit)
    assert (_kind_of(metric), metric.unit) == SHIMS[shim][-1][keyword]
