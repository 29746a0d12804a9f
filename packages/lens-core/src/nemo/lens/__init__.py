"""lens: OpenTelemetry traces and metrics for ML training loops.

Importing `nemo.lens` needs only `opentelemetry-api`; the SDK and exporters are imported
inside the functions that build SDK objects.
"""

from __future__ import annotations

from opentelemetry import metrics, trace

from nemo.lens.config import NemoLensConfig
from nemo.lens.groups import SpanGroup, SpanRegistry
from nemo.lens.handle import TelemetryHandle, setup_telemetry
from nemo.lens.helpers import (
    DEFAULT_REDACT_KEYS,
    managed_span,
    redact_value,
    safe_set_span_attributes,
    span_cm,
    trace_fn,
)
from nemo.lens.instruments import (
    MetricSpec,
    record_metrics,
    register_metric_group,
    registered_metric_groups,
    unregister_metric_group,
)
from nemo.lens.propagation import extract_context, inject_context
from nemo.lens.state import (
    enabled_span_groups,
    is_span_group_enabled,
    pending_span_groups,
    set_enabled_span_groups,
)
from nemo.lens.strategies import (
    ExportStrategy,
    register_export_strategy,
    registered_strategies,
    unregister_export_strategy,
)
from nemo.lens.version import __version__

__all__ = [
    "DEFAULT_REDACT_KEYS",
    "ExportStrategy",
    "MetricSpec",
    "NemoLensConfig",
    "SpanGroup",
    "SpanRegistry",
    "TelemetryHandle",
    "__version__",
    "enabled_span_groups",
    "extract_context",
    "get_meter",
    "get_tracer",
    "inject_context",
    "is_span_group_enabled",
    "managed_span",
    "pending_span_groups",
    "record_metrics",
    "redact_value",
    "register_export_strategy",
    "register_metric_group",
    "registered_metric_groups",
    "registered_strategies",
    "safe_set_span_attributes",
    "set_enabled_span_groups",
    "setup_telemetry",
    "span_cm",
    "trace_fn",
    "unregister_export_strategy",
    "unregister_metric_group",
]


def get_tracer(name: str = "nemo.lens") -> trace.Tracer:
    """Return `trace.get_tracer(name)` from the global tracer provider current now."""
    return trace.get_tracer(name)


def get_meter(name: str = "nemo.lens") -> metrics.Meter:
    """Return `metrics.get_meter(name)` from the global meter provider current now."""
    return metrics.get_meter(name)
