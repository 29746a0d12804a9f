"""`lens demo`: the simulated RL loop end to end, through each exporter, Ctrl-C, and its
live view on a real pseudo-terminal of a given width."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import pty
import queue
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
from lens_children import child_env, free_port
from lens_cli import LensResult, run_lens
from lens_env import clean_env
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from nemo.lens._sdk._console import ID_FIELDS
from nemo.lens.cli._demo import DEMO_SPECS, MIN_LIVE_WIDTH, simulate

DEMO_NAMES = {spec.name for spec in DEMO_SPECS}
# Generous bounds for a loaded two-core machine; they only stop a hung test.
DEADLINE_S = 60.0


def lens(*args: str, cwd: Path, **env: str) -> LensResult:
    """Run `lens ARGS` in this process to completion, with `env` added."""
    return run_lens(*args, cwd=cwd, env=clean_env(env))


class RunningDemo:
    """A demo subprocess whose stdout lines are read on a thread as they arrive."""

    def __init__(self, *args: str, cwd: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nemo.lens.cli", "demo", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
            cwd=cwd,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.stdout: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def wait_for_line(self, prefix: str) -> str:
        """Return the first stdout line starting with `prefix`."""
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1.0)
            except queue.Empty:
                assert self.process.poll() is None, "the demo exited early"
                continue
            self.stdout.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no line starting with {prefix!r} in {self.stdout}")

    def interrupt(self) -> tuple[int, str, str]:
        """Send SIGINT, wait for exit; return (status, rest of stdout, stderr)."""
        self.process.send_signal(signal.SIGINT)
        status = self.process.wait(timeout=DEADLINE_S)
        self._reader.join(timeout=DEADLINE_S)
        while not self.lines.empty():
            self.stdout.append(self.lines.get())
        assert self.process.stderr is not None
        return status, "".join(self.stdout), self.process.stderr.read()

    def stop(self) -> None:
        """Kill the process if a failed assertion left it running."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=DEADLINE_S)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def running_demos() -> Iterator[list[RunningDemo]]:
    """Collects the demos a test starts and kills any still running at the end."""
    demos: list[RunningDemo] = []
    yield demos
    for demo in demos:
        demo.stop()


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """Parse every line of an OTLP/JSON-lines file (fails on a partial line).

    Each line must also be one whole OTLP export request that protobuf's own JSON parser
    accepts (with the hex ids of OTLP/JSON turned into protobuf JSON's base64).
    """
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    documents = [json.loads(line) for line in text.splitlines()]
    for document in documents:
        (signal_key,) = document
        request_types: dict[str, Any] = {
            "resourceSpans": ExportTraceServiceRequest,
            "resourceMetrics": ExportMetricsServiceRequest,
        }
        message = request_types[signal_key]()
        json_format.ParseDict(ids_as_base64(document), message)
    return documents


def ids_as_base64(node: Any) -> Any:
    """A copy of an OTLP/JSON document whose hex ids are in protobuf JSON's base64."""
    if isinstance(node, dict):
        return {
            key: base64.b64encode(bytes.fromhex(value)).decode()
            if key in ID_FIELDS
            else ids_as_base64(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [ids_as_base64(item) for item in node]
    return node


def metric_points(documents: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Series name -> data points of the last metrics export that holds it."""
    found: dict[str, list[dict[str, Any]]] = {}
    for document in documents:
        for resource_metrics in document.get("resourceMetrics", []):
            for scope_metrics in resource_metrics["scopeMetrics"]:
                for metric in scope_metrics["metrics"]:
                    (data,) = [
                        metric[kind] for kind in ("gauge", "sum", "histogram") if kind in metric
                    ]
                    found[metric["name"]] = data["dataPoints"]
    return found


def any_value(value: dict[str, Any]) -> Any:
    """The Python value of an OTLP/JSON AnyValue (int64 arrive as decimal strings)."""
    ((kind, content),) = value.items()
    return int(content) if kind == "intValue" else content


def attribute_map(key_values: list[dict[str, Any]]) -> dict[str, Any]:
    """An OTLP/JSON attribute list as {key: value}."""
    return {item["key"]: any_value(item["value"]) for item in key_values}


def spans(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every span of the trace requests among the lines, with its resource's attributes."""
    return [
        {**span, "resource": attribute_map(resource_spans["resource"]["attributes"])}
        for document in documents
        for resource_spans in document.get("resourceSpans", [])
        for scope_spans in resource_spans["scopeSpans"]
        for span in scope_spans["spans"]
    ]


def test_console_demo_writes_the_rl_series_as_json_lines(tmp_path: Path) -> None:
    """`lens demo --steps 5` writes parseable JSON lines holding every lens_demo.* series."""
    result = lens("demo", "--steps", "5", "--interval", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "lens-demo.jsonl"
    assert f"writing spans and metrics as OTLP/JSON lines to {out}" in result.stdout
    documents = read_json_lines(out)
    points = metric_points(documents)
    assert set(points) >= DEMO_NAMES
    steps = list(simulate(5))
    # Gauges keep the last step's value; the counter sums every step.
    assert points["lens_demo.reward.mean"][0]["asDouble"] == pytest.approx(steps[-1].reward_mean)
    total = sum(step.tokens_generated for step in steps)
    assert int(points["lens_demo.tokens.generated"][0]["asInt"]) == total
    histogram = points["lens_demo.generation.duration"][0]
    assert int(histogram["count"]) == sum(len(step.generation_durations_ms) for step in steps)


def test_the_closing_line_counts_the_spans_and_points_the_file_holds(tmp_path: Path) -> None:
    """The last line names the spans and metric data points written, counted over every
    line of the file, and the number of lines."""
    result = lens("demo", "--steps", "3", "--interval", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "lens-demo.jsonl"
    documents = read_json_lines(out)
    span_count = len(spans(documents))
    point_count = sum(
        len(data["dataPoints"])
        for document in documents
        for resource_metrics in document.get("resourceMetrics", [])
        for scope_metrics in resource_metrics["scopeMetrics"]
        for metric in scope_metrics["metrics"]
        for kind, data in metric.items()
        if kind in ("gauge", "sum", "histogram")
    )
    # A job span, and per step a step span with two children.
    assert span_count == 1 + 3 * 3
    assert point_count >= len(DEMO_NAMES)
    assert result.stdout.splitlines()[-1] == (
        f"lens demo: wrote {span_count} spans and {point_count} metric points to {out} "
        f"({len(documents)} OTLP/JSON lines)"
    )


def test_console_demo_traces_a_job_with_one_span_per_step(tmp_path: Path) -> None:
    """The file holds one job span and, under it, a step span per step with its children,
    linked by the hex ids of OTLP/JSON."""
    out = tmp_path / "trace.jsonl"
    result = lens("demo", "--steps", "3", "--interval", "0", "--out", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    found = spans(read_json_lines(out))
    (job,) = [span for span in found if span["name"] == "lens_demo.job"]
    step_spans = [span for span in found if span["name"] == "lens_demo.step"]
    iterations = [attribute_map(span["attributes"])["dl.iteration"] for span in step_spans]
    assert sorted(iterations) == [0, 1, 2]
    assert {span["parentSpanId"] for span in step_spans} == {job["spanId"]}
    assert {span["traceId"] for span in found} == {job["traceId"]}
    assert len(job["traceId"]) == 32
    int(job["traceId"], 16)  # hex, not protobuf JSON's base64
    step_ids = {span["spanId"] for span in step_spans}
    children = [span for span in found if span["name"] in ("lens_demo.generate", "lens_demo.train")]
    assert len(children) == 6
    assert {span["parentSpanId"] for span in children} == step_ids
    assert job["resource"]["service.name"] == "lens-demo"


def test_demo_prints_plain_lines_when_stdout_is_not_a_terminal(tmp_path: Path) -> None:
    """Without a terminal there are no ANSI escapes, and one line per step."""
    result = lens("demo", "--steps", "4", "--interval", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout
    step_lines = [line for line in result.stdout.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in step_lines] == ["1/4", "2/4", "3/4", "4/4"]
    assert "lens_demo.reward.mean=" in step_lines[-1]
    assert "lens demo: finished 4 steps; telemetry flushed" in result.stdout


def test_ctrl_c_flushes_complete_lines_and_exits_130(
    tmp_path: Path, running_demos: list[RunningDemo]
) -> None:
    """SIGINT mid-run ends the spans, flushes the metrics, leaves whole lines, exits 130."""
    out = tmp_path / "interrupted.jsonl"
    demo = RunningDemo("--steps", "100000", "--interval", "0.01", "--out", str(out), cwd=tmp_path)
    running_demos.append(demo)
    demo.wait_for_line("step 3/")
    status, stdout, stderr = demo.interrupt()
    assert status == 130, stderr
    assert "interrupted after" in stdout
    assert "Traceback" not in stderr
    documents = read_json_lines(out)
    assert [span["name"] for span in spans(documents)].count("lens_demo.job") == 1
    assert set(metric_points(documents)) >= DEMO_NAMES


@pytest.mark.e2e
def test_prometheus_endpoint_serves_the_rl_series_during_the_run(
    tmp_path: Path, running_demos: list[RunningDemo]
) -> None:
    """With --exporter prometheus, a scrape during the run shows every lens_demo.* series."""
    port = free_port()
    demo = RunningDemo(
        "--exporter", "prometheus", "--port", str(port), "--steps", "100000",
        "--interval", "0.01", "--out", str(tmp_path / "spans.jsonl"), cwd=tmp_path,
    )  # fmt: skip
    running_demos.append(demo)
    url = f"http://127.0.0.1:{port}/metrics"
    assert url in demo.wait_for_line("lens demo: Prometheus metrics at")
    demo.wait_for_line("step 2/")
    with urllib.request.urlopen(url, timeout=DEADLINE_S) as response:
        body = response.read().decode("utf-8")
    samples = [line for line in body.splitlines() if line and not line.startswith("#")]
    for name in DEMO_NAMES:
        # Prometheus spells dots as underscores and may append a unit or _total suffix.
        assert any(line.startswith(name.replace(".", "_")) for line in samples), name
    status, _, stderr = demo.interrupt()
    assert status == 130, stderr


class _OtlpReceiver(BaseHTTPRequestHandler):
    """Accepts OTLP/HTTP protobuf exports and keeps each body by path."""

    bodies: ClassVar[dict[str, list[bytes]]]

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        self.bodies.setdefault(self.path, []).append(self.rfile.read(length))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output quiet."""


@pytest.mark.e2e
def test_otlp_exporter_sends_spans_and_rl_series_to_a_collector(tmp_path: Path) -> None:
    """With --exporter otlp over HTTP, a real receiver gets the spans and every demo series."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    class Receiver(_OtlpReceiver):
        bodies: ClassVar[dict[str, list[bytes]]] = {}

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        result = lens(
            "demo", "--exporter", "otlp", "--endpoint", endpoint, "--steps", "3",
            "--interval", "0", cwd=tmp_path, OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 0, result.stderr
    assert f"sending spans and metrics over OTLP to {endpoint}" in result.stdout
    metric_names: set[str] = set()
    for body in Receiver.bodies["/v1/metrics"]:
        request = ExportMetricsServiceRequest.FromString(body)
        for resource_metrics in request.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                metric_names.update(metric.name for metric in scope_metrics.metrics)
    assert metric_names >= DEMO_NAMES
    span_names: list[str] = []
    for body in Receiver.bodies["/v1/traces"]:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                span_names.extend(span.name for span in scope_spans.spans)
    assert span_names.count("lens_demo.step") == 3
    assert span_names.count("lens_demo.job") == 1
    assert not (tmp_path / "lens-demo.jsonl").exists()


def test_unreachable_collector_exits_1_before_starting(tmp_path: Path) -> None:
    """An OTLP endpoint nothing listens on fails fast with exit 1 and what to do."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    result = lens("demo", "--exporter", "otlp", "--endpoint", endpoint, cwd=tmp_path)
    assert result.returncode == 1
    assert f"cannot reach the OTLP collector at {endpoint}" in result.stderr
    assert "step " not in result.stdout


def test_prometheus_port_in_use_exits_1(tmp_path: Path) -> None:
    """A Prometheus port another socket holds fails with exit 1 naming the address."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = lens("demo", "--exporter", "prometheus", "--port", str(port), cwd=tmp_path)
    assert result.returncode == 1
    assert f"cannot serve Prometheus metrics on 127.0.0.1:{port}" in result.stderr


@pytest.mark.parametrize("where", ["missing directory", "a directory"])
def test_an_out_path_that_cannot_be_a_file_exits_2(tmp_path: Path, where: str) -> None:
    """--out in a directory that does not exist, or naming a directory, is bad input: exit 2
    with one line naming the path, before anything is set up."""
    out = tmp_path / "missing" / "demo.jsonl" if where == "missing directory" else tmp_path
    result = lens("demo", "--out", str(out), "--steps", "1", cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"lens demo: error: --out {str(out)!r}")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--steps", "0"], "argument --steps: expected a whole number >= 1, got '0'"),
        (["--steps", "many"], "argument --steps: expected a whole number >= 1, got 'many'"),
        (["--interval", "-1"], "argument --interval: expected a number of seconds >= 0"),
        (["--interval", "nan"], "argument --interval: expected a number of seconds >= 0"),
        (["--exporter", "zipkin"], "argument --exporter: invalid choice: 'zipkin'"),
        (["--port", "70000"], "argument --port: expected a TCP port from 1 to 65535"),
        (["--exporter", "otlp", "--endpoint", "localhost"], "expected a URL such as"),
        (["--exporter", "otlp", "--endpoint", "http://h:99999"], "expected a URL with a valid"),
        (["--endpoint", "http://localhost:4317"], "--endpoint applies to --exporter otlp only"),
        (["--port", "9464"], "--port applies to --exporter prometheus only"),
        (["--exporter", "otlp", "--out", "x.jsonl"], "--out applies to --exporter console or"),
    ],
)
def test_bad_options_exit_2_with_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    """Each invalid option value or combination exits 2 with one line saying what is expected."""
    result = lens("demo", *args, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("lens demo: error: ")
    assert expected in result.stderr
    assert not (tmp_path / "lens-demo.jsonl").exists()


# --- the live view on a real terminal ------------------------------------------------------

CLEAR_LINE = "\x1b[2K"


def demo_on_a_terminal(
    tmp_path: Path, *, columns: int | None = None, window_columns: int = 0
) -> str:
    """Run `lens demo --steps 3` with stdout on a real pseudo-terminal; return what it drew.

    `columns` sets COLUMNS in the child's clean environment; `window_columns` sets the
    terminal's own window size (0: unset, as a fresh pseudo-terminal has it).
    """
    extra = {"TERM": "xterm"}
    if columns is not None:
        extra["COLUMNS"] = str(columns)
    env = child_env(extra, also_strip=("COLUMNS", "LINES"))
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, window_columns, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "nemo.lens.cli", "demo", "--steps", "3", "--interval", "0"],
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    os.close(terminal)
    chunks: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, "the demo did not finish on its terminal"
            ready, _, _ = select.select([controller], [], [], remaining)
            if not ready:
                continue
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not chunk:
                break
            chunks.append(chunk)
        status = process.wait(timeout=DEADLINE_S)
        assert process.stderr is not None
        stderr = process.stderr.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=DEADLINE_S)
        if process.stderr is not None:
            process.stderr.close()
        os.close(controller)
    assert status == 0, stderr
    return b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


def drawn_lines(output: str) -> list[str]:
    """The lines the live view drew (each starts by clearing its terminal line)."""
    return [line.rsplit(CLEAR_LINE, 1)[1] for line in output.split("\n") if CLEAR_LINE in line]


def test_live_view_fits_every_line_to_a_narrow_terminal(tmp_path: Path) -> None:
    """With COLUMNS=46 every redrawn line stays within 45 columns: series names are cut
    with an ellipsis, values and units are kept."""
    output = demo_on_a_terminal(tmp_path, columns=46)
    lines = drawn_lines(output)
    assert lines, output
    assert max(len(line) for line in lines) <= 45
    (tokens_row, *_) = [line for line in lines if line.endswith("{token}")]
    name, value, _ = tokens_row.split()
    assert name.endswith("\u2026")
    assert "lens_demo.tokens.generated".startswith(name.removesuffix("\u2026"))
    assert value.isdigit()
    assert any(line.endswith(" ms") for line in lines)
    last_progress = [line for line in lines if line.startswith("step 3/3")][-1]
    assert "[" in last_progress  # a shorter bar still fits
    assert "100%" in last_progress
    assert "lens demo: finished 3 steps; telemetry flushed" in output


def test_live_view_follows_the_terminal_window_width(tmp_path: Path) -> None:
    """Without COLUMNS the terminal's own width counts: 120 columns show full names and bar."""
    output = demo_on_a_terminal(tmp_path, window_columns=120)
    lines = drawn_lines(output)
    assert any("lens_demo.generation.duration" in line for line in lines)
    assert not any(line.endswith("\u2026") for line in lines)
    assert any(f"[{'#' * 30}]" in line for line in lines)
    assert max(len(line) for line in lines) <= 119


def test_a_terminal_below_the_minimum_width_gets_plain_lines(tmp_path: Path) -> None:
    """Narrower than MIN_LIVE_WIDTH columns, the demo prints plain step lines, no escapes."""
    output = demo_on_a_terminal(tmp_path, columns=MIN_LIVE_WIDTH - 1)
    assert "\x1b" not in output
    step_lines = [line for line in output.split("\n") if line.startswith("step ")]
    assert [line.split()[1] for line in step_lines] == ["1/3", "2/3", "3/3"]
