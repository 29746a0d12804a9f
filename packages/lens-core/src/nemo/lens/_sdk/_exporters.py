"""The exporters `NemoLensConfig.exporter` names: `otlp`, `console` and `prometheus`.

Exporters take no arguments from lens: endpoints, headers and timeouts are the SDK's
business and come from the standard `OTEL_EXPORTER_OTLP_*` variables. lens only picks the
transport and checks those variables first (by the rules in `nemo.lens._otel_env`), so a bad
value fails setup with an error naming it rather than the SDK's own, builds the console's
one-line JSON, and runs the Prometheus endpoint.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from nemo.lens import _otel_env
from nemo.lens._sdk import _console
from nemo.lens._sdk._console import (
    JsonLinesFile,
    console_log_exporter,
    console_metric_exporter,
    console_span_exporter,
)
from nemo.lens._warn_once import WarnOnce
from nemo.lens.errors import LensValueError

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace.export import SpanExporter

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
    try:
        return _console.console_output(console_path or None)
    except OSError as exc:
        raise LensValueError(f"Cannot open {label} {console_path!r} for appending: {exc}") from exc


def build_span_exporter(
    name: str, *, console_path: str = "", console_label: str = "NemoLensConfig.console_path"
) -> SpanExporter | None:
    """The span exporter for exporter `name`; None for `prometheus` (a metrics-only pull).

    `console` writes to `console_path` when it is set, else to standard output.
    """
    if name == "otlp":
        exporter: SpanExporter = _otlp_exporter("traces")
        return exporter
    if name == "console":
        return console_span_exporter(console_stream(console_path, console_label))
    return None


def build_log_exporter(
    name: str, *, console_path: str = "", console_label: str = "NemoLensConfig.console_path"
) -> Any:
    """The log record exporter for exporter `name`, or None when logs go nowhere.

    `otlp` and `console` export logs like the other signals. `prometheus` serves metrics
    only, so logs go to OTLP when an OTLP logs endpoint is set
    (`OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`), and otherwise
    nowhere, which one INFO line says.

    Raises:
        ValueError: An `OTEL_EXPORTER_OTLP_*` setting of the OTLP log exporter is bad.
        ImportError: No OTLP log exporter is installed.
    """
    if name == "console":
        return console_log_exporter(console_stream(console_path, console_label))
    if name == "prometheus" and _otel_env.otlp_endpoint_variable("logs") is None:
        _logger.info(
            "logs_enabled with exporter 'prometheus': Prometheus serves metrics only and no "
            "OTLP logs endpoint is set (OTEL_EXPORTER_OTLP_LOGS_ENDPOINT or "
            "OTEL_EXPORTER_OTLP_ENDPOINT), so log records are not exported"
        )
        return None
    return _otlp_exporter("logs")


def build_metric_reader(
    name: str,
    interval_ms: int,
    on_shutdown: list[Callable[[], None]],
    *,
    console_path: str = "",
    console_label: str = "NemoLensConfig.console_path",
    one_exporter_per_node: bool = True,
) -> MetricReader:
    """The metric reader for exporter `name`.

    `otlp` and `console` get a periodic reader every `interval_ms`, whose export timeout is
    `OTEL_METRIC_EXPORT_TIMEOUT` (a bad value gives the default, with a warning naming the
    variable); `console` writes to `console_path` when set. `prometheus` gets the pull
    reader and an HTTP endpoint, whose stop function is appended to `on_shutdown`; it
    serves on the base port, or on base + `LOCAL_RANK` unless `one_exporter_per_node`
    (see `_otel_env.prometheus_serving_address`).

    Raises:
        ValueError: An `OTEL_EXPORTER_OTLP_*` setting of the OTLP metric exporter is bad.
    """
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    if name == "prometheus":
        return _prometheus_reader(on_shutdown, one_exporter_per_node=one_exporter_per_node)
    if name == "console":
        metric_exporter: Any = console_metric_exporter(console_stream(console_path, console_label))
    else:
        metric_exporter = _otlp_exporter("metrics")
    timeout_ms, problem = _otel_env.metric_export_timeout_ms()
    if problem is not None:
        _setting_warnings.warn(problem, "%s", problem)
    return PeriodicExportingMetricReader(
        metric_exporter, export_interval_millis=interval_ms, export_timeout_millis=timeout_ms
    )


def _otlp_exporter(signal: str) -> Any:
    """An OTLP exporter for `signal`, over the configured transport when it is installed.

    Raises:
        ValueError: The protocol is unknown, or a setting the exporter reads is bad
            (`_otel_env.check_otlp_settings`); checked before the exporter is built.
        ImportError: Neither transport's exporter is installed.
    """
    preferred, fallback = _otel_env.otlp_transports(signal)
    hint = _otel_env.install_hint(_otel_env.SDK_EXTRA)
    missing: list[str] = []
    for transport in (preferred, fallback):
        module_name = _otel_env.OTLP_EXPORTER_MODULES[(signal, transport)]
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            missing.append(f"{module_name} ({exc})")
            continue
        if transport != preferred:
            _logger.warning(
                "OTLP %s: protocol %r asked for the %s exporter, which is not installed; "
                "exporting over %s instead (%s)",
                signal,
                _otel_env.otlp_protocol(signal),
                preferred,
                transport,
                hint,
            )
        for problem in _otel_env.check_otlp_settings(signal, transport):
            _setting_warnings.warn(problem, "%s", problem)
        return getattr(module, _otel_env.OTLP_EXPORTER_CLASSES[signal])()
    raise ImportError(
        f"setup_telemetry: exporter 'otlp' needs an OTLP {signal} exporter, and none is "
        f"installed; {hint}. Tried: {'; '.join(missing)}"
    )


def _prometheus_reader(
    on_shutdown: list[Callable[[], None]], *, one_exporter_per_node: bool
) -> MetricReader:
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import REGISTRY
        from prometheus_client.exposition import MetricsHandler
    except ImportError as exc:
        raise ImportError(
            f"setup_telemetry: exporter 'prometheus' needs opentelemetry-exporter-prometheus; "
            f"{_otel_env.install_hint(_otel_env.PROMETHEUS_EXTRA)} ({exc})"
        ) from exc
    host, port = _otel_env.prometheus_serving_address(one_exporter_per_node=one_exporter_per_node)
    # Imported here: http.server is heavy, and only a Prometheus setup needs it.
    from nemo.lens._sdk._prometheus import PrometheusEndpoint

    endpoint = PrometheusEndpoint(host, port, MetricsHandler.factory(REGISTRY))
    try:
        reader = PrometheusMetricReader()
    except BaseException:
        endpoint.stop()
        raise
    on_shutdown.append(endpoint.stop)
    return reader
