"""Property tests: record_metrics never raises and never loses a valid value."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemo.lens import MetricSpec, record_metrics, register_metric_group
from nemo.lens.instruments import _registry
from nemo.lens.testing import in_memory_metrics

pytest.importorskip("opentelemetry.sdk.metrics")

GAUGES = ("g0", "g1", "g2")
COUNTERS = ("c0", "c1")
SPECS = [MetricSpec(k, f"prop.{k}", "gauge") for k in GAUGES] + [
    MetricSpec(k, f"prop.{k}", "counter") for k in COUNTERS
]
DECLARED = GAUGES + COUNTERS

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**1100), max_value=2**1100),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.binary(max_size=3),
    st.complex_numbers(),
    st.fractions(),
    st.decimals(allow_nan=True),
)
anything = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)
keys = st.one_of(st.sampled_from(DECLARED), st.text(max_size=6))
hashables = st.one_of(keys, st.integers(), st.none(), st.tuples(st.integers()))


def accepted(kind_key: str, value: Any) -> float | None:
    """The value lens must record for this key, or None when it must skip it."""
    if value is None or isinstance(value, (bool, str, bytes, complex, list, dict)):
        return None
    try:
        number = float(value)
    except (OverflowError, TypeError, ValueError):
        return None
    if type(value).__name__ == "Decimal" or not math.isfinite(number):
        return None
    if kind_key in COUNTERS and number < 0:
        return None
    return number


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.one_of(st.none(), st.dictionaries(hashables, anything, max_size=6), anything),
    kwargs=st.dictionaries(st.sampled_from((*DECLARED, "typo", "meter")), anything, max_size=5),
    attributes=st.one_of(st.none(), anything, st.dictionaries(hashables, anything, max_size=4)),
    group=st.one_of(st.just("prop"), anything),
)
def test_never_raises_and_records_every_valid_value(
    values: Any, kwargs: dict[str, Any], attributes: Any, group: Any
) -> None:
    """Whatever it is given, record_metrics returns, and each valid declared value lands."""
    _registry.clear()
    register_metric_group("prop", SPECS)
    pipeline = in_memory_metrics()
    try:
        record_metrics(pipeline.meter, group, values, attributes=attributes, **kwargs)
        if group != "prop":
            return
        merged: dict[Any, Any] = dict(values) if isinstance(values, dict) else {}
        merged.update(kwargs)
        for key in DECLARED:
            expected = accepted(key, merged.get(key))
            points = pipeline.points(f"prop.{key}")
            if expected is None:
                assert points == []
            else:
                assert len(points) == 1
                assert points[0].value == pytest.approx(expected, rel=1e-12)
    finally:
        pipeline.shutdown()
