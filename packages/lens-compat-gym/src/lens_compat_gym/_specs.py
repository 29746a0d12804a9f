"""The legacy `gym.*` series: what `record_gym_metrics` emitted before the metric registry."""

from __future__ import annotations

from typing import Final

from nemo.lens.instruments import MetricSpec

#: The registry group the shim records into, and registers when nobody else has.
LEGACY_GYM_GROUP: Final = "gym"

#: One spec per legacy keyword of `record_gym_metrics`, in signature order. The key is the
#: keyword; name, kind and unit are the series existing dashboards already query.
LEGACY_GYM_SPECS: Final[tuple[MetricSpec, ...]] = (
    MetricSpec(
        "server_request_duration_ms",
        "gym.server.request_duration_ms",
        "histogram",
        unit="ms",
        description="Time a Gym server took to answer one request",
    ),
    MetricSpec(
        "rollout_duration_ms",
        "gym.rollout.duration_ms",
        "histogram",
        unit="ms",
        description="Time spent collecting one rollout through the Gym servers",
    ),
    MetricSpec(
        "verify_duration_ms",
        "gym.verify.duration_ms",
        "histogram",
        unit="ms",
        description="Time spent verifying one rollout",
    ),
    # The gauges carry no unit, as in lens 0.2: a unit would rename their series where
    # OTLP metrics become Prometheus ones ("1" adds `_ratio`) and break existing dashboards.
    MetricSpec(
        "verify_success_rate",
        "gym.verify.success_rate",
        "gauge",
        description="Fraction of verifications that succeeded, from 0 to 1",
    ),
    MetricSpec(
        "active_servers",
        "gym.servers.active",
        "gauge",
        description="Number of Gym servers currently serving requests",
    ),
)
