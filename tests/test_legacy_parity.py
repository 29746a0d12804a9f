"""Parity: every legacy record_rl_metrics field maps to a spec of the same kind and unit.

The legacy kinds and units are written out here from the lens 0.2 table, so a change to
LEGACY_RL_SPECS, to the signature or to what lens-core emits cannot slip through unseen.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

pytestmark = pytest.mark.shim

# field -> (kind, unit) of the series lens 0.2's record_rl_metrics created.
LEGACY_KIND_AND_UNIT = {
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


def test_signature_is_the_legacy_signature() -> None:
    """meter, then the eleven fields in legacy order: positional-or-keyword, default None,
    and no **kwargs, because callers filter keywords with inspect.signature."""
    from nemo.lens.instruments.rl import record_rl_metrics

    parameters = list(inspect.signature(record_rl_metrics).parameters.values())

    assert [p.name for p in parameters] == ["meter", *LEGACY_KIND_AND_UNIT]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters)
    assert parameters[0].default is inspect.Parameter.empty
    assert all(p.default is None for p in parameters[1:])


def test_every_legacy_field_has_exactly_one_spec_of_the_same_kind_and_unit() -> None:
    """LEGACY_RL_SPECS holds one spec per field, in order, with the legacy kind and unit."""
    from lens_compat_rl import LEGACY_RL_SPECS

    assert [spec.key for spec in LEGACY_RL_SPECS] == list(LEGACY_KIND_AND_UNIT)
    for spec in LEGACY_RL_SPECS:
        assert (spec.kind, spec.unit) == LEGACY_KIND_AND_UNIT[spec.key], spec.key
    assert len({spec.name for spec in LEGACY_RL_SPECS}) == len(LEGACY_RL_SPECS)


@pytest.mark.parametrize("field", list(LEGACY_KIND_AND_UNIT))
def test_each_field_is_emitted_with_its_specs_name_kind_and_unit(pipeline: Any, field: str) -> None:
    """Recording one field through the shim creates one series whose name, kind and unit
    are its spec's, which are the legacy ones."""
    from lens_compat_rl import LEGACY_RL_SPECS
    from nemo.lens.instruments.rl import record_rl_metrics

    (spec,) = [spec for spec in LEGACY_RL_SPECS if spec.key == field]

    record_rl_metrics(pipeline.meter, **{field: 3.0})

    metrics = pipeline.metrics()
    assert list(metrics) == [spec.name]
    metric = metrics[spec.name]
    assert (_kind_of(metric), metric.unit) == (spec.kind, spec.unit)
    assert (_kind_of(metric), metric.unit) == LEGACY_KIND_AND_UNIT[field]
