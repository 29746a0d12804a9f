"""The consumer-driven metric registry.

A framework declares its metric families once with `MetricSpec` and
`register_metric_group`, then records them every step with `record_metrics`. lens
ships no per-consumer instrument module: the consumer owns its names.
"""

from nemo.lens.instruments._record import record_metrics
from nemo.lens.instruments._registry import (
    register_metric_group,
    registered_metric_groups,
    unregister_metric_group,
)
from nemo.lens.instruments._spec import MetricSpec
from nemo.lens.instruments.inference import record_inference_metrics

__all__ = [
    "MetricSpec",
    "record_inference_metrics",
    "record_metrics",
    "register_metric_group",
    "registered_metric_groups",
    "unregister_metric_group",
]
