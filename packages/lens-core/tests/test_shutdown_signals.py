"""A SIGTERM that arrives while `shutdown()` runs does not lose the export in flight.

Megatron-LM's SIGTERM handler calls `shutdown()` and exits; others only exit. Either way
the handler interrupts the main thread mid-shutdown (or the shutdown runs on a thread of
its own). A second `shutdown()` waits for the running one within its own budget, and the
exit that follows waits for it within the running shutdown's budget. Real child
interpreters, real signals (sent by this process), and a real OTLP/HTTP receiver on
127.0.0.1 that answers the first request of each signal with 503, and every later one too
until the parent has sent the signal, so the export is still in flight when the signal
lands however the SDK's retry (about a second, with jitter) and the machine's load fall.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from lens_children import CHILD_TIMEOUT_S, MARKER, child_env, otlp_env
from lens_receivers import Received
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    TelemetryHandle,
    record_metrics,
    register_metric_group,
    setup_telemetry,
)
from nemo.lens.testing import isolated_telemetry

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(sys.platform == "win32", reason="POSIX")]

POINTS = 300
SPANS = 20
#: The running shutdown's budget: far above the ~1 s retry, far below the child timeout.
SHUTDOWN_BUDGET_MS = 20000
#: How long the parent waits for the child's first export attempt.
FIRST_ATTEMPT_S = 60.0

CHILD = f"""
import signal, sys, threading
from nemo.lens import MetricSpec, NemoLensConfig, record_metrics, register_metric_group
from nemo.lens import setup_telemetry

handler, where, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
handle = setup_telemetry(NemoLensConfig(enabled=True, service_name="signals"))
register_metric_group("sig", [MetricSpec(f"m{{i}}", f"sig.m{{i}}", "counter") for i in range(3)])
for point in range({POINTS}):
    record_metrics(handle.meter, "sig", attributes={{"p": point // 3}}, **{{f"m{{point % 3}}": 1}})
for step in range({SPANS}):
    with handle.tracer.start_as_current_span("step"):
        pass

def on_sigterm(signum, frame):
    if handler == "shutdown-then-exit":  # Megatron-LM's pattern
        handle.shutdown()
    sys.exit(0)

signal.signal(signal.SIGTERM, on_sigterm)
print("{MARKER}", flush=True)
if where == "main":
    handle.shutdown(timeout_ms=budget)
else:
    worker = threading.Thread(target=handle.shutdown, args=(budget,), daemon=True)
    worker.start()
    worker.join(120)
print("shutdown returned", flush=True)
"""


class FlakyReceiver:
    """An OTLP/HTTP receiver on 127.0.0.1 that fails the first `failures` requests of each
    path with 503 (retryable: the exporter backs off about a second and tries again), and
    every request until `released` is set."""

    def __init__(self, failures: int = 1) -> None:
        self.received = Received()
        self.first_attempt = threading.Event()
        self.released = threading.Event()
        self.released.set()
        self._failures = failures
        self._attempts: dict[str, int] = {}
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    attempt = receiver._attempts.get(self.path, 0) + 1
                    receiver._attempts[self.path] = attempt
                if attempt <= receiver._failures or not receiver.released.is_set():
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    receiver.first_attempt.set()
                    return
                request: Any
                if self.path == "/v1/metrics":
                    request = metrics_service_pb2.ExportMetricsServiceRequest()
                    request.ParseFromString(body)
                    receiver.received.add_metrics(request)
                elif self.path == "/v1/traces":
                    request = trace_service_pb2.ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    receiver.received.add_traces(request)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


@contextmanager
def flaky_receiver(failures: int = 1) -> Iterator[FlakyReceiver]:
    receiver = FlakyReceiver(failures)
    try:
        yield receiver
    finally:
        receiver.close()


def run_signalled_child(
    receiver: FlakyReceiver, handler: str, where: str, budget_ms: int = SHUTDOWN_BUDGET_MS
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Start the child, SIGTERM it once its first export attempt got a 503, wait for it;
    also the seconds from the signal to its exit. No request succeeds before the signal
    was sent, so the signal always lands while the export is in flight."""
    env = child_env(otlp_env("http", receiver.endpoint, receiver.endpoint))
    receiver.released.clear()
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, handler, where, str(budget_ms)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            signalled = time.monotonic()
            if receiver.first_attempt.wait(FIRST_ATTEMPT_S):
                signalled = time.monotonic()
                os.kill(process.pid, signal.SIGTERM)
            receiver.released.set()  # only now may a retry succeed
            stdout, stderr = process.communicate(timeout=CHILD_TIMEOUT_S)
            exited = time.monotonic()
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate(timeout=10)
            pytest.fail(f"the child did not exit within {CHILD_TIMEOUT_S} s: {stderr}")
    assert receiver.first_attempt.is_set(), stderr
    run = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return run, exited - signalled


@pytest.mark.parametrize("where", ["main", "thread"])
@pytest.mark.parametrize("handler", ["shutdown-then-exit", "exit"])
def test_a_sigterm_during_shutdown_does_not_lose_the_export_in_flight(
    handler: str, where: str
) -> None:
    """SIGTERM mid-shutdown (handler: shutdown()+exit, or exit): the retried export arrives."""
    with flaky_receiver() as receiver:
        run, _ = run_signalled_child(receiver, handler, where)
        assert run.returncode == 0, run.stderr
        assert "shutdown returned" not in run.stdout  # the signal did cut the shutdown short
        assert receiver.received.point_count("sig.") == POINTS, run.stderr
        assert receiver.received.span_count() == SPANS, run.stderr


#: "Exits promptly" after the budget: the ~0.1 s measured plus slack for a shared machine.
PROMPT_EXIT_S = 3.0


@pytest.mark.soak
@pytest.mark.parametrize("handler", ["shutdown-then-exit", "exit"])
def test_exit_after_a_sigterm_waits_no_longer_than_the_running_shutdowns_budget(
    handler: str,
) -> None:
    """A collector that never recovers: the signalled child exits within shutdown's budget."""
    budget_ms = 1500
    with flaky_receiver(failures=1000) as receiver:
        run, after_signal_s = run_signalled_child(receiver, handler, "main", budget_ms)
    assert run.returncode == 0, run.stderr
    assert after_signal_s < budget_ms / 1000 + PROMPT_EXIT_S, run.stderr


@pytest.fixture
def flaky_setup(
    clean_environ: pytest.MonkeyPatch,
) -> Iterator[tuple[FlakyReceiver, TelemetryHandle]]:
    """An exporting setup in this process with 30 points recorded, exporting to a
    `FlakyReceiver` that fails each signal's first request."""
    with flaky_receiver() as receiver, isolated_telemetry(clear_span_registry=True):
        for name, value in otlp_env("http", receiver.endpoint, receiver.endpoint).items():
            clean_environ.setenv(name, value)
        handle = setup_telemetry(NemoLensConfig(enabled=True))
        register_metric_group("join", [MetricSpec("m", "join.m", "counter")])
        for point in range(30):
            record_metrics(handle.meter, "join", attributes={"p": point}, m=1)
        yield receiver, handle
        handle.shutdown(timeout_ms=0)


def test_a_second_shutdown_waits_for_the_one_running_on_another_thread(
    flaky_setup: tuple[FlakyReceiver, TelemetryHandle],
) -> None:
    """shutdown() while another thread's shutdown retries returns after its export landed."""
    receiver, handle = flaky_setup
    first = threading.Thread(target=handle.shutdown, args=(SHUTDOWN_BUDGET_MS,), daemon=True)
    first.start()
    assert receiver.first_attempt.wait(FIRST_ATTEMPT_S)
    handle.shutdown(timeout_ms=SHUTDOWN_BUDGET_MS)
    assert receiver.received.point_count("join.") == 30
    first.join(CHILD_TIMEOUT_S)


#: The 200 ms second call "returns within its budget": slack for a shared 2-core machine,
#: far below the running shutdown's 20 s.
SECOND_CALL_S = 2.0


def test_a_second_shutdown_waits_no_longer_than_its_own_budget(
    flaky_setup: tuple[FlakyReceiver, TelemetryHandle],
) -> None:
    """A second shutdown(200 ms) returns within about 200 ms while the first (20 s) retries."""
    receiver, handle = flaky_setup
    receiver._failures = 1000
    first = threading.Thread(target=handle.shutdown, args=(SHUTDOWN_BUDGET_MS,), daemon=True)
    first.start()
    assert receiver.first_attempt.wait(FIRST_ATTEMPT_S)
    started = time.monotonic()
    handle.shutdown(timeout_ms=200)
    assert time.monotonic() - started < SECOND_CALL_S
    assert first.is_alive()
    assert receiver.received.point_count("join.") == 0
    receiver._failures = 0  # let the first finish
    first.join(CHILD_TIMEOUT_S)
