"""lens: OpenTelemetry traces and metrics for ML training loops.

Importing `nemo.lens` needs only `opentelemetry-api`; the SDK and exporters are imported
inside the functions that build SDK objects.
"""

from __future__ import annotations

from opentelemetry import metrics, trace

from nemo.lens.instruments import (
    MetricSpec,
    record_metrics,
    register_metric_group,
    registered_metric_groups,
    unregister_metric_group,
)
from nemo.lens.version import __version__

__all__ = [
    "MetricSpec",
    "__version__",
    "get_meter",
    "get_tracer",
    "record_metrics",
    "register_metric_group",
    "registered_metric_groups",
    "unregister_metric_group",
]


def get_tracer(name: str = "nemo.lens") -> trace.Tracer:
    """Return `trace.get_tracer(name)` from the global tracer provider current now."""
    return trace.get_tracer(name)


def get_meter(name: str = "nemo.lens") -> metrics.Meter:
    """Return `metrics.get_meter(name)` from the global meter provider current now."""
    return metrics.get_meter(name)
