"""lens: OpenTelemetry traces and metrics for ML training loops.

Importing `nemo.lens` needs only `opentelemetry-api`. The public names below are loaded
from their modules on first access (PEP 562), so `import nemo.lens` costs about as much as
importing the OpenTelemetry API itself, and a consumer pays only for what it uses: the
span gate does not load the exporters, and nothing here loads the SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace

from nemo.lens import _legacy_modules
from nemo.lens.version import __version__

# Legacy names such as `nemo.lens.instruments.rl` come from the deprecation shims that
# declare them; the finder must be in place before Python looks up any submodule.
_legacy_modules.install()

if TYPE_CHECKING:  # what the lazy names resolve to, for type checkers and IDEs
    from nemo.lens.config import NemoLensConfig
    from nemo.lens.distributed import broadcast_trace_context, create_linked_span
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

# Public name -> the module that defines it.
_LAZY_EXPORTS: dict[str, str] = {
    "DEFAULT_REDACT_KEYS": "nemo.lens.helpers",
    "ExportStrategy": "nemo.lens.strategies",
    "MetricSpec": "nemo.lens.instruments",
    "NemoLensConfig": "nemo.lens.config",
    "SpanGroup": "nemo.lens.groups",
    "SpanRegistry": "nemo.lens.groups",
    "TelemetryHandle": "nemo.lens.handle",
    "broadcast_trace_context": "nemo.lens.distributed",
    "create_linked_span": "nemo.lens.distributed",
    "enabled_span_groups": "nemo.lens.state",
    "extract_context": "nemo.lens.propagation",
    "inject_context": "nemo.lens.propagation",
    "is_span_group_enabled": "nemo.lens.state",
    "managed_span": "nemo.lens.helpers",
    "pending_span_groups": "nemo.lens.state",
    "record_metrics": "nemo.lens.instruments",
    "redact_value": "nemo.lens.helpers",
    "register_export_strategy": "nemo.lens.strategies",
    "register_metric_group": "nemo.lens.instruments",
    "registered_metric_groups": "nemo.lens.instruments",
    "registered_strategies": "nemo.lens.strategies",
    "safe_set_span_attributes": "nemo.lens.helpers",
    "set_enabled_span_groups": "nemo.lens.state",
    "setup_telemetry": "nemo.lens.handle",
    "span_cm": "nemo.lens.helpers",
    "trace_fn": "nemo.lens.helpers",
    "unregister_export_strategy": "nemo.lens.strategies",
    "unregister_metric_group": "nemo.lens.instruments",
}

__all__ = [
    "DEFAULT_REDACT_KEYS",
    "ExportStrategy",
    "MetricSpec",
    "NemoLensConfig",
    "SpanGroup",
    "SpanRegistry",
    "TelemetryHandle",
    "__version__",
    "broadcast_trace_context",
    "create_linked_span",
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


def __getattr__(name: str) -> Any:
    module_name = _LAZY_EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'nemo.lens' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY_EXPORTS})


def get_tracer(name: str = "nemo.lens") -> trace.Tracer:
    """Return `trace.get_tracer(name)` from the global tracer provider current now."""
    return trace.get_tracer(name)


def get_meter(name: str = "nemo.lens") -> metrics.Meter:
    """Return `metrics.get_meter(name)` from the global meter provider current now.

    In a process forked from one that had that global provider, its SDK locks may be held
    for good, so the meter comes from this process's own `setup_telemetry` instead, or is a
    no-op meter until there is one (see
    [Forked children](exporters.md#forked-children)).
    """
    from nemo.lens import _inheritance  # a small module; kept off `import nemo.lens`

    instead = _inheritance.meter_instead_of_global(name)
    return metrics.get_meter(name) if instead is None else instead
