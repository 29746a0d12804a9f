"""The OpenTelemetry environment rules lens follows, and the exporter facts behind them.

Setup builds its exporters from these, and every `lens` command reads the same ones, so
`lens doctor` checks exactly the address and transport a job would use. Nothing here
imports the SDK: an API-only install can still ask what is configured and what is missing.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from nemo.lens.errors import LensValueError

#: Exporter names `NemoLensConfig.exporter` accepts.
EXPORTERS: Final = ("otlp", "console", "prometheus")

SDK_EXTRA: Final = "lens-core[sdk]"
PROMETHEUS_EXTRA: Final = "lens-core[prometheus]"

#: What each exporter needs importable, and the lens-core extra that installs it. OTLP is
#: satisfied by either transport (setup falls back to the one that is installed).
EXPORTER_REQUIREMENTS: Final[dict[str, tuple[tuple[str, ...], str]]] = {
    "otlp": (
        ("opentelemetry.exporter.otlp.proto.grpc", "opentelemetry.exporter.otlp.proto.http"),
        SDK_EXTRA,
    ),
    "console": (("opentelemetry.sdk",), SDK_EXTRA),
    "prometheus": (
        ("opentelemetry.exporter.prometheus", "prometheus_client"),
        PROMETHEUS_EXTRA,
    ),
}

DEFAULT_METRIC_EXPORT_INTERVAL_MS: Final = 10000
DEFAULT_PROMETHEUS_HOST: Final = "127.0.0.1"
DEFAULT_PROMETHEUS_PORT: Final = 9464

#: OTLP transports and their default endpoints: gRPC on 4317, HTTP on 4318.
OTLP_TRANSPORTS: Final = ("grpc", "http")
DEFAULT_OTLP_ENDPOINTS: Final = {"grpc": "http://localhost:4317", "http": "http://localhost:4318"}
#: (signal, transport) -> the module holding that OTLP exporter, and its class per signal.
OTLP_EXPORTER_MODULES: Final = {
    ("traces", "grpc"): "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    ("traces", "http"): "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    ("metrics", "grpc"): "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
    ("metrics", "http"): "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    ("logs", "grpc"): "opentelemetry.exporter.otlp.proto.grpc._log_exporter",
    ("logs", "http"): "opentelemetry.exporter.otlp.proto.http._log_exporter",
}
OTLP_EXPORTER_CLASSES: Final = {
    "traces": "OTLPSpanExporter",
    "metrics": "OTLPMetricExporter",
    "logs": "OTLPLogExporter",
}


def install_hint(extra: str) -> str:
    """The sentence that tells a user how to get a missing package."""
    return f"install it with: pip install '{extra}'"


def is_importable(module: str) -> bool:
    """True when `module` can be imported; never raises (a missing parent is just False)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _read(environ: Mapping[str, str] | None, name: str) -> str:
    env = os.environ if environ is None else environ
    return env.get(name, "").strip()


def otlp_protocol(signal: str, environ: Mapping[str, str] | None = None) -> str:
    """The OTLP protocol for `signal`, as the SDK spells it (lower-cased).

    `OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL` wins over `OTEL_EXPORTER_OTLP_PROTOCOL`; the
    default is `grpc`.
    """
    for variable in (
        f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ):
        value = _read(environ, variable).lower()
        if value:
            return value
    return "grpc"


def otlp_transports(signal: str, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The transport `signal`'s protocol asks for, then the one setup falls back to."""
    if otlp_protocol(signal, environ).startswith("http/"):
        return ("http", "grpc")
    return ("grpc", "http")


def otlp_transport_in_use(signal: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The transport setup would export `signal` over, given what is installed; None if neither."""
    for transport in otlp_transports(signal, environ):
        if is_importable(OTLP_EXPORTER_MODULES[(signal, transport)]):
            return transport
    return None


@dataclass(frozen=True)
class OtlpTarget:
    """Where one or more signals go over OTLP, as the exporter would resolve it."""

    signals: tuple[str, ...]
    protocol: str
    transport: str
    endpoint: str
    host: str
    port: int


def endpoint_host_and_port(endpoint: str) -> tuple[str, int]:
    """The host and TCP port of an OTLP endpoint URL (a scheme-less `host:port` too).

    Raises:
        ValueError: The endpoint has no host or an invalid port.
    """
    # A gRPC endpoint is often written without a scheme ("collector:4317").
    parsed = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    host = parsed.hostname
    if not host:
        example = DEFAULT_OTLP_ENDPOINTS["grpc"]
        raise LensValueError(f"endpoint {endpoint!r} has no host; expected a URL such as {example}")
    try:
        port = parsed.port
    except ValueError as exc:
        raise LensValueError(f"endpoint {endpoint!r} has an invalid port ({exc})") from exc
    if port is None:
        port = 443 if parsed.scheme == "https" else 80
    return host, port


def otlp_targets(
    signals: Iterable[str],
    environ: Mapping[str, str] | None = None,
    *,
    transports: Mapping[str, str] | None = None,
) -> list[OtlpTarget]:
    """Resolve the OTLP destination of each signal (`traces`, `metrics`, `logs`).

    The endpoint is `OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT`,
    else the default of the transport in use: `transports[signal]` when given (what is
    installed decides it, see `otlp_transport_in_use`), else the protocol's own. Signals
    that resolve to the same protocol and address share one target.

    Raises:
        ValueError: An endpoint has no host or an invalid port; the message names it.
    """
    merged: dict[tuple[str, str, int], OtlpTarget] = {}
    for signal in signals:
        protocol = otlp_protocol(signal, environ)
        transport = (transports or {}).get(signal) or otlp_transports(signal, environ)[0]
        endpoint = (
            _read(environ, f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
            or _read(environ, "OTEL_EXPORTER_OTLP_ENDPOINT")
            or DEFAULT_OTLP_ENDPOINTS[transport]
        )
        host, port = endpoint_host_and_port(endpoint)
        key = (transport, host, port)
        previous = merged.get(key)
        shared = previous.signals if previous is not None else ()
        merged[key] = OtlpTarget((*shared, signal), protocol, transport, endpoint, host, port)
    return list(merged.values())


def metric_export_interval_ms(environ: Mapping[str, str] | None = None) -> int:
    """`OTEL_METRIC_EXPORT_INTERVAL` in milliseconds (default 10000).

    Raises:
        ValueError: The value is not a positive integer.
    """
    raw = _read(environ, "OTEL_METRIC_EXPORT_INTERVAL")
    if not raw:
        return DEFAULT_METRIC_EXPORT_INTERVAL_MS
    try:
        interval = int(raw)
    except ValueError:
        interval = 0
    if interval <= 0:
        raise LensValueError(
            f"Invalid value for OTEL_METRIC_EXPORT_INTERVAL: {raw!r}; expected a positive "
            "integer number of milliseconds, e.g. 10000"
        )
    return interval


def prometheus_address(environ: Mapping[str, str] | None = None) -> tuple[str, int]:
    """The Prometheus endpoint's host and port, from `OTEL_EXPORTER_PROMETHEUS_HOST/PORT`.

    Raises:
        ValueError: The port is not an integer in [0, 65535].
    """
    host = _read(environ, "OTEL_EXPORTER_PROMETHEUS_HOST") or DEFAULT_PROMETHEUS_HOST
    raw = _read(environ, "OTEL_EXPORTER_PROMETHEUS_PORT")
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


def check_exporter_name(name: object) -> str:
    """Return `name` if it is one of `EXPORTERS`.

    Raises:
        ValueError: Any other value; the message lists the valid ones.
    """
    if name not in EXPORTERS:
        raise LensValueError(
            f"Unknown exporter {name!r} (NemoLensConfig.exporter / <PREFIX>_EXPORTER). "
            f"Valid exporters: {list(EXPORTERS)}"
        )
    return str(name)
