"""Real OTLP collectors on 127.0.0.1 for fault tests: live, closed (dead) or hanging.

`OtlpReceiver` serves OTLP traces, metrics and logs over gRPC (a `grpcio` server with the
collector services from `opentelemetry-proto`) or over HTTP (`http.server` in a thread) and
decodes what arrives.
It can be made to hang (every later request blocks until the receiver is closed) and
closed (its port then refuses connections, like a collector that went down).
`HangingListener` is a port that accepts TCP connections into its backlog and never
answers, like a collector host that stopped responding. `dead_endpoint` is a port that
nothing listens on.

The benchmark `benchmarks/bench_reliability.py` imports this module too.
"""

from __future__ import annotations

import gzip
import socket
import threading
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lens_children import free_port
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

#: gRPC's default receive limit (4 MiB), which an OpenTelemetry Collector keeps by default.
GRPC_DEFAULT_MAX_RECEIVE_BYTES = 4 * 1024 * 1024

#: How long a hanging request blocks at most if the receiver is never closed.
HANG_LIMIT_S = 120.0


def dead_endpoint() -> str:
    """An endpoint URL whose port refuses connections (a collector that is down)."""
    return f"http://127.0.0.1:{free_port()}"


def signal_endpoint(endpoint: str, transport: str, signal: str) -> str:
    """The per-signal endpoint variable's value: OTLP/HTTP wants the path, gRPC does not."""
    return f"{endpoint}/v1/{signal}" if transport == "http" else endpoint


def _attribute_key(attributes: Any) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((item.key, str(item.value).strip()) for item in attributes))


@dataclass(frozen=True)
class ReceivedLog:
    """One OTLP log record as a receiver decoded it (ids as hex, "" when absent)."""

    body: str
    severity: str
    trace_id: str
    span_id: str
    resource: dict[str, str]


class Received:
    """What a receiver decoded: distinct spans and distinct metric points, under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._span_ids: set[bytes] = set()
        self._span_names: list[str] = []
        self._points: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        self._point_values: dict[str, list[Any]] = {}
        self.trace_requests = 0
        self.metric_requests = 0
        self.log_requests = 0
        self._logs: list[ReceivedLog] = []
        self._trace_messages: list[Any] = []
        self._metric_messages: list[Any] = []
        self._log_messages: list[Any] = []

    def add_traces(self, request: Any) -> None:
        with self._lock:
            self.trace_requests += 1
            self._trace_messages.append(request)
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self._span_ids.add(bytes(span.span_id))
                        self._span_names.append(span.name)

    def add_metrics(self, request: Any) -> None:
        with self._lock:
            self.metric_requests += 1
            self._metric_messages.append(request)
            for resource_metrics in request.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        kind = metric.WhichOneof("data")
                        if kind is None:
                            continue
                        for point in getattr(metric, kind).data_points:
                            self._points.add((metric.name, _attribute_key(point.attributes)))
                            value_kind = point.WhichOneof("value") if kind != "histogram" else None
                            value = getattr(point, value_kind) if value_kind else point.count
                            self._point_values.setdefault(metric.name, []).append(value)

    def add_logs(self, request: Any) -> None:
        with self._lock:
            self.log_requests += 1
            self._log_messages.append(request)
            for resource_logs in request.resource_logs:
                resource = {
                    item.key: str(getattr(item.value, item.value.WhichOneof("value") or "", ""))
                    for item in resource_logs.resource.attributes
                }
                for scope_logs in resource_logs.scope_logs:
                    for record in scope_logs.log_records:
                        self._logs.append(
                            ReceivedLog(
                                body=record.body.string_value,
                                severity=record.severity_text,
                                trace_id=bytes(record.trace_id).hex(),
                                span_id=bytes(record.span_id).hex(),
                                resource=resource,
                            )
                        )

    def trace_messages(self) -> list[Any]:
        """Every ExportTraceServiceRequest received, decoded, in arrival order."""
        with self._lock:
            return list(self._trace_messages)

    def metric_messages(self) -> list[Any]:
        """Every ExportMetricsServiceRequest received, decoded, in arrival order."""
        with self._lock:
            return list(self._metric_messages)

    def log_messages(self) -> list[Any]:
        """Every ExportLogsServiceRequest received, decoded, in arrival order."""
        with self._lock:
            return list(self._log_messages)

    def logs(self) -> list[ReceivedLog]:
        """Every log record received, in arrival order (duplicates kept)."""
        with self._lock:
            return list(self._logs)

    def span_count(self) -> int:
        """Distinct spans received."""
        with self._lock:
            return len(self._span_ids)

    def span_names(self) -> list[str]:
        with self._lock:
            return list(self._span_names)

    def point_count(self, prefix: str = "") -> int:
        """Distinct (metric, attribute set) points received, of metrics named `prefix*`."""
        with self._lock:
            return sum(1 for name, _ in self._points if name.startswith(prefix))

    def values(self, name: str) -> list[Any]:
        """Every value received for metric `name`, in arrival order (all exports)."""
        with self._lock:
            return list(self._point_values.get(name, []))


class OtlpReceiver:
    """A real OTLP collector on 127.0.0.1 over `transport` ("grpc" or "http").

    Use it as a context manager, or call `close()`. `hang()` makes every later request
    block (until `close()`); `close()` stops serving, so the port refuses from then on.
    `latency_s` delays every answer, like a collector across a network. `max_receive_bytes`
    is the gRPC server's message limit (64 MiB here; a collector's default is gRPC's 4 MiB,
    `GRPC_DEFAULT_MAX_RECEIVE_BYTES`).
    """

    def __init__(
        self, transport: str, *, latency_s: float = 0.0, max_receive_bytes: int = 64 * 1024 * 1024
    ) -> None:
        if transport not in ("grpc", "http"):
            raise ValueError(f"transport must be 'grpc' or 'http', got {transport!r}")
        self.transport = transport
        self.latency_s = latency_s
        self.max_receive_bytes = max_receive_bytes
        self.received = Received()
        self._hanging = threading.Event()
        self._closed = threading.Event()
        self._grpc_server: Any = None
        self._http_server: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        if transport == "grpc":
            self.port = self._start_grpc()
        else:
            self.port = self._start_http()
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> OtlpReceiver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def signal_endpoint(self, signal: str) -> str:
        """The value for `OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT` that reaches this receiver."""
        return signal_endpoint(self.endpoint, self.transport, signal)

    def hang(self) -> None:
        """From now on, every request blocks until the receiver is closed."""
        self._hanging.set()

    def _maybe_hang(self) -> None:
        if self._hanging.is_set():
            self._closed.wait(HANG_LIMIT_S)
        elif self.latency_s:
            self._closed.wait(self.latency_s)

    def close(self) -> None:
        """Stop serving and release every hanging request; idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._grpc_server is not None:
            self._grpc_server.stop(grace=None).wait(10)
        if self._http_server is not None:
            self._http_server.shutdown()
            self._http_server.server_close()
        if self._http_thread is not None:
            self._http_thread.join(10)

    def _start_grpc(self) -> int:
        import grpc  # type: ignore[import-untyped,unused-ignore]
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        receiver = self

        class MetricsService(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                receiver._maybe_hang()
                receiver.received.add_metrics(request)
                return metrics_service_pb2.ExportMetricsServiceResponse()

        class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                receiver._maybe_hang()
                receiver.received.add_traces(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        class LogsService(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                receiver._maybe_hang()
                receiver.received.add_logs(request)
                return logs_service_pb2.ExportLogsServiceResponse()

        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=8),
            options=[("grpc.max_receive_message_length", self.max_receive_bytes)],
        )
        register_metrics: Any = metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server
        register_traces: Any = trace_service_pb2_grpc.add_TraceServiceServicer_to_server
        register_logs: Any = logs_service_pb2_grpc.add_LogsServiceServicer_to_server
        register_metrics(MetricsService(), server)
        register_traces(TraceService(), server)
        register_logs(LogsService(), server)
        port = int(server.add_insecure_port("127.0.0.1:0"))
        server.start()
        self._grpc_server = server
        return port

    def _start_http(self) -> int:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver._maybe_hang()
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                response: Any
                if self.path == "/v1/metrics":
                    request: Any = metrics_service_pb2.ExportMetricsServiceRequest()
                    request.ParseFromString(body)
                    receiver.received.add_metrics(request)
                    response = metrics_service_pb2.ExportMetricsServiceResponse()
                elif self.path == "/v1/traces":
                    request = trace_service_pb2.ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    receiver.received.add_traces(request)
                    response = trace_service_pb2.ExportTraceServiceResponse()
                elif self.path == "/v1/logs":
                    request = logs_service_pb2.ExportLogsServiceRequest()
                    request.ParseFromString(body)
                    receiver.received.add_logs(request)
                    response = logs_service_pb2.ExportLogsServiceResponse()
                else:
                    self.send_error(404)
                    return
                payload = response.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self._http_server = server
        self._http_thread = thread
        return int(server.server_address[1])


class HangingListener:
    """A port that takes TCP connections into its backlog and never answers them."""

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(512)
        self.port = int(self._socket.getsockname()[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HangingListener:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._socket.close()
