"""Running a lens program in a fresh child interpreter, bounded, and timing its exit.

The child inherits the environment without any `OTEL_*` variable, plus the ones given.
It prints `MARKER` on a line of its own at the moment that matters (`shutdown()` just
returned, or its last statement ran); the parent timestamps that line as it arrives and
reports how long the child took from there to exit. A child that outlives its timeout is
killed. `benchmarks/bench_reliability.py` uses this module too.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from lens_receivers import signal_endpoint

#: The line a child prints at the moment its exit is timed from.
MARKER = "lens-child-marker"


@dataclass
class ChildRun:
    """How a child interpreter ended."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    #: Seconds from its marker line to its exit; None without a marker (or if killed).
    after_marker_s: float | None


def run_child(program: str, environ: dict[str, str], timeout_s: float, *args: str) -> ChildRun:
    """Run `python -c program *args`, killing it after `timeout_s`; time its exit."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    env.update(environ)
    stamped: queue.Queue[tuple[str, float]] = queue.Queue()
    stderr: list[str] = []
    with subprocess.Popen(
        [sys.executable, "-c", program, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:

        def read_stdout() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                stamped.put((line, time.monotonic()))

        def read_stderr() -> None:
            assert process.stderr is not None
            stderr.extend(process.stderr)

        readers = [
            threading.Thread(target=read_stdout, daemon=True),
            threading.Thread(target=read_stderr, daemon=True),
        ]
        for reader in readers:
            reader.start()
        timed_out = False
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            process.kill()
            process.wait(10)
        exited = time.monotonic()
        for reader in readers:
            reader.join(10)
    lines: list[str] = []
    marked_at: float | None = None
    while not stamped.empty():
        line, at = stamped.get()
        lines.append(line)
        if line.strip() == MARKER:
            marked_at = at
    return ChildRun(
        process.returncode,
        "".join(lines),
        "".join(stderr),
        timed_out,
        None if marked_at is None or timed_out else exited - marked_at,
    )


def otlp_env(transport: str, traces: str, metrics: str) -> dict[str, str]:
    """OTLP over `transport` to these endpoints; only shutdown's metrics export runs."""
    return {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc" if transport == "grpc" else "http/protobuf",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": signal_endpoint(traces, transport, "traces"),
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": signal_endpoint(metrics, transport, "metrics"),
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",
    }
