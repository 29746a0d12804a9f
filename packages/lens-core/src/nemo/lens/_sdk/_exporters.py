"""The exporters an export plan names: `otlp`, `console` and `prometheus`.

Each builder takes one signal's plan (`nemo.lens._export_plan`), which has already chosen
the exporter and checked its settings. OTLP exporters take no arguments from lens:
endpoints, headers and timeouts come from the standard `OTEL_EXPORTER_OTLP_*` variables,
which the plan checked first, so a bad value failed setup with an error naming it. The
console exporters write one-line OTLP/JSON; the Prometheus reader runs lens's endpoint.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

from nemo.lens import _otel_env
from nemo.lens._warn_once import WarnOnce
from nemo.lens.errors import LensValueError

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace.export import SpanExporter

    from nemo.lens._export_plan import ExportPlan, SignalPlan
    from nemo.lens._sdk._console import JsonLinesFile

_logger = logging.getLogger(__name__)
# A setting both signals' exporters read (OTEL_EXPORTER_OTLP_INSECURE) is reported once.
_setting_warnings = WarnOnce(_logger, "OTLP exporter settings")


def console_stream(
    console_path: str, label: str = "NemoLensConfig.console_path"
) -> IO[str] | JsonLinesFile:
    """Where the console exporters write: `console_path` (appended), or standard output.

    Raises:
        ValueError: The file cannot be opened; the message names the field (`label`).
    """
    # Imported here: the console exporters load the SDK's logs modules (~7 ms), which a
    # setup exporting elsewhere does not need.
    from nemo.lens._sdk import _console

    try:
        return _console.console_output(console_path or None)
    except OSError as exc:
        raise LensValueError(f"Cannot open {label} {console_path!r} for appending: {exc}") from exc


def log_plan_findings(plan: ExportPlan) -> None:
    """Log what building `plan` found: each warning once per process, and its notes."""
    for problem in plan.warnings:
        _setting_warnings.warn(problem, "%s", problem)
    for note in plan.notes:
        _logger.info("%s", note)


def build_span_exporter(plan: SignalPlan) -> SpanExporter | None:
    """The span exporter `plan` names (`otlp` or `console`); None beside a Prometheus pull,
    which serves metrics only."""
    if plan.exporter == "prometheus":
        return None
    if plan.exporter == "console":
        from nemo.lens._sdk._console import console_span_exporter

        return console_span_exporter(console_stream(plan.console_path, plan.console_label))
    exporter: SpanExporter = _otlp_exporter(plan)
    return exporter


def build_log_exporter(plan: SignalPlan) -> Any:
    """The log record exporter `plan` names (`otlp` or `console`).

    Raises:
        ImportError: No OTLP log exporter is installed.
    """
    if plan.exporter == "console":
        from nemo.lens._sdk._console import console_log_exporter

        return console_log_exporter(console_stream(plan.console_path, plan.console_label))
    return _otlp_exporter(plan)


def build_metric_reader(plan: SignalPlan, on_shutdown: list[Callable[[], None]]) -> MetricReader:
    """The metric reader `plan` names.

    `otlp` and `console` get a periodic reader with the plan's interval and export timeout;
    `prometheus` gets the pull reader and an HTTP endpoint on the plan's address, whose
    stop function is appended to `on_shutdown`.
    """
    if plan.prometheus_address is not None:
        return _prometheus_reader(plan.prometheus_address, on_shutdown)
    if plan.exporter == "console":
        from nemo.lens._sdk._console import console_metric_exporter

        metric_exporter: Any = console_metric_exporter(
            console_stream(plan.console_path, plan.console_label)
        )
    else:
        metric_exporter = _otlp_exporter(plan)
    return PeriodicExportingMetricReader(
        metric_exporter,
        export_interval_millis=plan.interval_ms,
        export_timeout_millis=plan.timeout_ms,
    )


def _otlp_exporter(plan: SignalPlan) -> Any:
    """The OTLP exporter of `plan.signal` over the plan's transport.

    Raises:
        ImportError: That transport's exporter is not installed (nor is the other's, or the
            plan would have chosen it).
    """
    signal = plan.signal
    transport = plan.otlp.transport if plan.otlp is not None else "grpc"
    module_name = _otel_env.OTLP_EXPORTER_MODULES[(signal, transport)]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(
            f"setup_telemetry: exporter 'otlp' needs an OTLP {signal} exporter, and none is "
            f"installed; {_otel_env.install_hint(_otel_env.SDK_EXTRA)}. Tried: "
            f"{module_name} ({exc})"
        ) from exc
    return getattr(module, _otel_env.OTLP_EXPORTER_CLASSES[signal])()


def _prometheus_reader(
    address: tuple[str, int], on_shutdown: list[Callable[[], None]]
) -> MetricReader:
    # Imported here, unlike the SDK at the top: the Prometheus exporter is an extra of its
    # own (lens-core[prometheus]) that an SDK install may lack, and its absence must be an
    # ImportError naming that extra when a Prometheus setup is built (tests provoke it by
    # hiding the module for one setup), not a failure to import this module.
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import REGISTRY
        from prometheus_client.exposition import MetricsHandler
    except ImportError as exc:
        raise ImportError(
            f"setup_telemetry: exporter 'prometheus' needs opentelemetry-exporter-prometheus; "
            f"{_otel_env.install_hint(_otel_env.PROMETHEUS_EXTRA)} ({exc})"
        ) from exc
    # Imported here: http.server is heavy, and only a Prometheus setup needs it.
    from nemo.lens._sdk._prometheus import PrometheusEndpoint

    endpoint = PrometheusEndpoint(*address, MetricsHandler.factory(REGISTRY))
    try:
        reader = PrometheusMetricReader()
    except BaseException:
        endpoint.stop()
        raise
    on_shutdown.append(endpoint.stop)
    return reader
