"""The exporters `NemoLensConfig.exporter` names: `otlp`, `console` and `prometheus`.

Exporters take no arguments from lens: endpoints, headers and timeouts are the SDK's
business and come from the standard `OTEL_EXPORTER_OTLP_*` variables. lens only picks
the transport, builds the console's one-line JSON, and runs the Prometheus endpoint.
"""

from __future__ import annotations

import importlib
import io
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING, Any, Final, cast

from nemo.lens.config import EXPORTERS
from nemo.lens.errors import LensValueError

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = [
    "build_metric_reader",
    "build_span_exporter",
    "check_exporter_name",
    "metric_export_interval_ms",
    "otlp_protocol",
]

_logger = logging.getLogger(__name__)

SDK_HINT: Final = "install it with: pip install 'lens-core[sdk]'"
PROMETHEUS_HINT: Final = "install it with: pip install 'lens-core[prometheus]'"
DEFAULT_METRIC_EXPORT_INTERVAL_MS: Final = 10000
DEFAULT_PROMETHEUS_HOST: Final = "127.0.0.1"
DEFAULT_PROMETHEUS_PORT: Final = 9464

_OTLP_MODULES: Final = {
    ("traces", "grpc"): "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    ("traces", "http"): "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    ("metrics", "grpc"): "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
    ("metrics", "http"): "opentelemetry.exporter.otlp.proto.http.metric_exporter",
}
_OTLP_CLASSES: Final = {"traces": "OTLPSpanExporter", "metrics": "OTLPMetricExporter"}


def check_exporter_name(name: object) -> str:
    """Return `name` if it is one of the three exporters.

    Raises:
        ValueError: Any other value; the message lists the valid three.
    """
    if name not in EXPORTERS:
        raise LensValueError(
            f"Unknown exporter {name!r} (NemoLensConfig.exporter / <PREFIX>_EXPORTER). "
            f"Valid exporters: {list(EXPORTERS)}"
        )
    return str(name)


def otlp_protocol(signal: str, environ: Mapping[str, str] | None = None) -> str:
    """The OTLP protocol for `signal` ("traces" or "metrics"), as the SDK spells it.

    `OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL` wins over `OTEL_EXPORTER_OTLP_PROTOCOL`; the
    default is `grpc`.
    """
    env = os.environ if environ is None else environ
    for variable in (
        f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ):
        value = env.get(variable, "").strip().lower()
        if value:
            return value
    return "grpc"


def metric_export_interval_ms(environ: Mapping[str, str] | None = None) -> int:
    """`OTEL_METRIC_EXPORT_INTERVAL` in milliseconds (default 10000).

    Raises:
        ValueError: The value is not a positive integer.
    """
    env = os.environ if environ is None else environ
    raw = env.get("OTEL_METRIC_EXPORT_INTERVAL", "").strip()
    if not raw:
        return DEFAULT_METRIC_EXPORT_INTERVAL_MS
    try:
        interval = int(raw)
    except ValueError as exc:
        raise LensValueError(
            f"Invalid value for OTEL_METRIC_EXPORT_INTERVAL: {raw!r}; expected a positive "
            "integer number of milliseconds, e.g. 10000"
        ) from exc
    if interval <= 0:
        raise LensValueError(
            f"Invalid value for OTEL_METRIC_EXPORT_INTERVAL: {raw!r}; expected a positive "
            "integer number of milliseconds, e.g. 10000"
        )
    return interval


def build_span_exporter(name: str) -> SpanExporter | None:
    """The span exporter for exporter `name`; None for `prometheus` (a metrics-only pull)."""
    if name == "otlp":
        exporter: SpanExporter = _otlp_exporter("traces")
        return exporter
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(
            out=_current_stdout(), formatter=lambda span: _one_line(span.to_json(indent=None))
        )
    return None


def build_metric_reader(
    name: str, interval_ms: int, on_shutdown: list[Callable[[], None]]
) -> MetricReader:
    """The metric reader for exporter `name`.

    `otlp` and `console` get a periodic reader every `interval_ms`; `prometheus` gets the
    pull reader and an HTTP endpoint, whose stop function is appended to `on_shutdown`.
    """
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    if name == "prometheus":
        return _prometheus_reader(on_shutdown)
    if name == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        metric_exporter: Any = ConsoleMetricExporter(
            out=_current_stdout(), formatter=lambda data: _one_line(data.to_json(indent=None))
        )
    else:
        metric_exporter = _otlp_exporter("metrics")
    return PeriodicExportingMetricReader(metric_exporter, export_interval_millis=interval_ms)


def _otlp_exporter(signal: str) -> Any:
    """An OTLP exporter for `signal`, over the configured transport when it is installed."""
    protocol = otlp_protocol(signal)
    order = ("http", "grpc") if protocol.startswith("http/") else ("grpc", "http")
    missing: list[str] = []
    for transport in order:
        module_name = _OTLP_MODULES[(signal, transport)]
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            missing.append(f"{module_name} ({exc})")
            continue
        if transport != order[0]:
            _logger.warning(
                "OTLP %s: protocol %r asked for the %s exporter, which is not installed; "
                "exporting over %s instead (%s)",
                signal,
                protocol,
                order[0],
                transport,
                SDK_HINT,
            )
        return getattr(module, _OTLP_CLASSES[signal])()
    raise ImportError(
        f"setup_telemetry: exporter 'otlp' needs an OTLP {signal} exporter, and none is "
        f"installed; {SDK_HINT}. Tried: {'; '.join(missing)}"
    )


def _prometheus_reader(on_shutdown: list[Callable[[], None]]) -> MetricReader:
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import REGISTRY
        from prometheus_client.exposition import MetricsHandler
    except ImportError as exc:
        raise ImportError(
            f"setup_telemetry: exporter 'prometheus' needs opentelemetry-exporter-prometheus; "
            f"{PROMETHEUS_HINT} ({exc})"
        ) from exc
    host, port = prometheus_address()
    # Imported here: http.server is heavy, and only a Prometheus setup needs it.
    from nemo.lens._prometheus_server import PrometheusEndpoint

    endpoint = PrometheusEndpoint(host, port, MetricsHandler.factory(REGISTRY))
    try:
        reader = PrometheusMetricReader()
    except BaseException:
        endpoint.stop()
        raise
    on_shutdown.append(endpoint.stop)
    return reader


def prometheus_address(environ: Mapping[str, str] | None = None) -> tuple[str, int]:
    """The Prometheus endpoint's host and port, from `OTEL_EXPORTER_PROMETHEUS_HOST/PORT`.

    Raises:
        ValueError: The port is not an integer in [0, 65535].
    """
    env = os.environ if environ is None else environ
    host = env.get("OTEL_EXPORTER_PROMETHEUS_HOST", "").strip() or DEFAULT_PROMETHEUS_HOST
    raw = env.get("OTEL_EXPORTER_PROMETHEUS_PORT", "").strip()
    if not raw:
        return host, DEFAULT_PROMETHEUS_PORT
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise LensValueError(
            f"Invalid value for OTEL_EXPORTER_PROMETHEUS_PORT: {raw!r}; expected an integer "
            f"port in [0, 65535] (default {DEFAULT_PROMETHEUS_PORT})"
        )
    return host, port


class _CurrentStdout(io.TextIOBase):
    """Writes to whatever `sys.stdout` is at write time (it may be replaced after setup)."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


def _current_stdout() -> IO[str]:
    # The SDK's exporters are typed for `typing.IO`, which no `io` base class declares.
    return cast("IO[str]", _CurrentStdout())


def _one_line(document: str) -> str:
    """Re-serialise an SDK JSON document compactly, one object per line."""
    return json.dumps(json.loads(document), separators=(",", ":")) + "\n"
