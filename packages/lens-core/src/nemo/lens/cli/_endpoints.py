"""Where the configured exporter sends data, and whether that place can be reached.

The rules mirror what setup and the OpenTelemetry exporters read from the environment,
so `lens doctor` (and `lens demo` before it starts) test the address a job would use.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

__all__ = [
    "OtlpTarget",
    "bind_problem",
    "connect_problem",
    "otlp_targets",
    "prometheus_address",
]

#: OTLP's default endpoints: gRPC on 4317, HTTP on 4318.
_DEFAULT_OTLP_ENDPOINT: Final = {"grpc": "http://localhost:4317", "http": "http://localhost:4318"}
_DEFAULT_PROMETHEUS_HOST: Final = "127.0.0.1"
_DEFAULT_PROMETHEUS_PORT: Final = 9464


@dataclass(frozen=True)
class OtlpTarget:
    """One signal's OTLP destination, as the exporter would resolve it."""

    signals: tuple[str, ...]
    protocol: str
    endpoint: str
    host: str
    port: int


def _env(environ: Mapping[str, str], key: str) -> str:
    return environ.get(key, "").strip()


def _transport(protocol: str) -> str:
    return "http" if protocol.startswith("http/") else "grpc"


def _host_and_port(endpoint: str) -> tuple[str, int]:
    # A gRPC endpoint is often written without a scheme ("collector:4317").
    parsed = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    host = parsed.hostname
    if not host:
        example = _DEFAULT_OTLP_ENDPOINT["grpc"]
        raise ValueError(f"endpoint {endpoint!r} has no host; expected a URL such as {example}")
    try:
        port = parsed.port
    except ValueError as exc:
        raise ValueError(f"endpoint {endpoint!r} has an invalid port ({exc})") from exc
    if port is None:
        port = 443 if parsed.scheme == "https" else 80
    return host, port


def otlp_targets(environ: Mapping[str, str], signals: Iterable[str]) -> list[OtlpTarget]:
    """Resolve the OTLP endpoint of each signal (`traces`, `metrics`, `logs`).

    The protocol is `OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`,
    else `grpc`; the endpoint is `OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`, else
    `OTEL_EXPORTER_OTLP_ENDPOINT`, else localhost:4317 (gRPC) or localhost:4318 (HTTP).
    Signals that resolve to the same protocol and address share one target.

    Raises:
        ValueError: An endpoint has no host or an invalid port; the message names it.
    """
    merged: dict[tuple[str, str, int], OtlpTarget] = {}
    for signal in signals:
        upper = signal.upper()
        protocol = (
            _env(environ, f"OTEL_EXPORTER_OTLP_{upper}_PROTOCOL")
            or _env(environ, "OTEL_EXPORTER_OTLP_PROTOCOL")
            or "grpc"
        )
        endpoint = (
            _env(environ, f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT")
            or _env(environ, "OTEL_EXPORTER_OTLP_ENDPOINT")
            or _DEFAULT_OTLP_ENDPOINT[_transport(protocol)]
        )
        host, port = _host_and_port(endpoint)
        key = (protocol, host, port)
        previous = merged.get(key)
        shared = previous.signals if previous is not None else ()
        merged[key] = OtlpTarget((*shared, signal), protocol, endpoint, host, port)
    return list(merged.values())


def prometheus_address(environ: Mapping[str, str]) -> tuple[str, int]:
    """Return the (host, port) the Prometheus exporter serves on.

    Raises:
        ValueError: `OTEL_EXPORTER_PROMETHEUS_PORT` is not a port number.
    """
    host = _env(environ, "OTEL_EXPORTER_PROMETHEUS_HOST") or _DEFAULT_PROMETHEUS_HOST
    raw_port = _env(environ, "OTEL_EXPORTER_PROMETHEUS_PORT")
    if not raw_port:
        return host, _DEFAULT_PROMETHEUS_PORT
    try:
        port = int(raw_port)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ValueError(
            f"OTEL_EXPORTER_PROMETHEUS_PORT={raw_port!r} is not accepted; expected a port "
            "number from 0 to 65535"
        )
    return host, port


def connect_problem(host: str, port: int, timeout: float) -> str | None:
    """Open and close one TCP connection; return None on success, else why it failed."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__


def bind_problem(host: str, port: int) -> str | None:
    """Try to bind (host, port) as an HTTP server would; None if it can, else why not."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return f"cannot resolve {host!r}: {exc.strerror or exc}"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # HTTP servers set SO_REUSEADDR, so a port in TIME_WAIT is free for them too.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None
