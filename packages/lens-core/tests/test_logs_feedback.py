"""The logs pipeline never feeds on itself, and a full batch log queue counts its drops.

The exporter's own failure records (loggers `opentelemetry.*`) and lens's (`nemo.lens.*`)
never enter the logs pipeline, so one application record logged against a refusing
collector costs one export, not a stream of them. Records the batch log record queue has
no room for are counted in `nemo.lens.log_records.dropped` and in one warning at shutdown.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from lens_children import MARKER, run_child
from lens_receivers import OtlpReceiver
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nemo.lens import NemoLensConfig, setup_telemetry
from nemo.lens.logging_bridge import setup_logging_bridge
from nemo.lens.testing import isolated_telemetry

DROPPED = "nemo.lens.log_records.dropped"
LOGGER_NAME = "lens.tests.logs_feedback"


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.INFO)
    with isolated_telemetry(clear_span_registry=True):
        yield
    for handler in list(logger.handlers):
        if getattr(handler, "_nemo_lens_logging_bridge", False):
            logger.removeHandler(handler)


class RefusingCollector:
    """An OTLP/HTTP endpoint on 127.0.0.1 that answers every export with HTTP 500; keeps
    the bodies of the records each request carried."""

    def __init__(self) -> None:
        self.requests: list[list[str]] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = logs_service_pb2.ExportLogsServiceRequest()
                request.ParseFromString(body)
                collector.requests.append(
                    [
                        record.body.string_value
                        for resource_logs in request.resource_logs
                        for scope_logs in resource_logs.scope_logs
                        for record in scope_logs.log_records
                    ]
                )
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}/v1/logs"

    def __enter__(self) -> RefusingCollector:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


REFUSED_PROGRAM = f"""
import logging, sys, time
from nemo.lens import NemoLensConfig, setup_telemetry
from nemo.lens.logging_bridge import setup_logging_bridge

config = NemoLensConfig(enabled=True, logs_enabled=True, metrics_enabled=False)
config.traces_enabled = False
handle = setup_telemetry(config)
setup_logging_bridge()  # the root logger: every library's records, the exporter's too
logging.getLogger("app").warning("one application record")
time.sleep(float(sys.argv[1]))
print({MARKER!r}, flush=True)
handle.shutdown(timeout_ms=2000)
"""


def test_one_record_against_a_refusing_collector_costs_one_export() -> None:
    """With the bridge on the root and a collector answering 500, only the application
    record is ever sent, in a bounded number of requests over 4 s of 50 ms batches (the
    exporter's failure records were exported, failed and logged again)."""
    with RefusingCollector() as collector:
        env = {
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": collector.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BLRP_SCHEDULE_DELAY": "50",
        }
        run = run_child(REFUSED_PROGRAM, env, 60.0, "4")
        assert not run.timed_out, run.stderr
        assert run.returncode == 0, run.stderr
        requests = list(collector.requests)
    assert requests, run.stderr
    assert all(bodies == ["one application record"] for bodies in requests), requests
    # One request; SDK 1.23's exporter retries a 5xx itself, after 1 s, 2 s, 4 s, ...
    assert len(requests) <= 3, requests


def test_a_full_log_queue_counts_every_dropped_record_and_warns_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A 4-record queue behind a slow collector: the records it refused are counted in
    nemo.lens.log_records.dropped (emitted - exported) and in one warning at shutdown."""
    monkeypatch.setenv("OTEL_BLRP_MAX_QUEUE_SIZE", "4")
    monkeypatch.setenv("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "2")
    monkeypatch.setenv("OTEL_BLRP_SCHEDULE_DELAY", "600000")
    emitted = 30
    with OtlpReceiver("http", latency_s=1.0) as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", receiver.signal_endpoint("logs"))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        reader = InMemoryMetricReader()
        config = NemoLensConfig(enabled=True, logs_enabled=True)
        config.traces_enabled = False
        handle = setup_telemetry(config, metric_reader=reader, _allow_reinit=True)
        setup_logging_bridge(LOGGER_NAME)
        logger = logging.getLogger(LOGGER_NAME)
        for index in range(emitted):
            logger.warning("record %d", index)
        data = reader.get_metrics_data()
        counted = [
            getattr(point, "value", None)
            for resource in (data.resource_metrics if data is not None else [])
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == DROPPED
            for point in metric.data.data_points
        ]
        caplog.set_level(logging.INFO)
        handle.shutdown(timeout_ms=30000)
        handle.shutdown(timeout_ms=30000)
        exported = len(receiver.received.logs())
    dropped = emitted - exported
    # At most the queue and one batch in flight got through while the first export waited.
    assert dropped >= emitted - 4 - 2 * 2
    assert counted == [dropped]
    reports = [r for r in caplog.records if "log record(s) were dropped" in r.getMessage()]
    assert len(reports) == 1, [r.getMessage() for r in caplog.records]
    assert reports[0].levelno == logging.WARNING
    assert f"{dropped} log record(s)" in reports[0].getMessage()
    assert "OTEL_BLRP_MAX_QUEUE_SIZE" in reports[0].getMessage()


def test_a_bad_blrp_setting_is_refused_at_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_BLRP_MAX_QUEUE_SIZE sizes lens's gate too, so a bad value raises at setup,
    naming the variable and the value (the SDK alone warned and used its default)."""
    from nemo.lens.errors import LensValueError

    monkeypatch.setenv("OTEL_BLRP_MAX_QUEUE_SIZE", "many")
    config = NemoLensConfig(enabled=True, exporter="console", logs_enabled=True)
    with pytest.raises(LensValueError, match=r"OTEL_BLRP_MAX_QUEUE_SIZE: 'many'"):
        setup_telemetry(config, _allow_reinit=True)
