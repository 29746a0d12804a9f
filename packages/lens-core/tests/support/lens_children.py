"""Child interpreters for tests, bounded by a timeout, and a free port for them to use.

Every child starts from `child_env`: this process's environment without a lens or
OpenTelemetry setting (`lens_env.clean_env`) and without the variables that change what an
interpreter imports (PYTHONPATH, ...), so it imports what is installed and nothing else; a
child that needs more gets it through `python_path`. `run_python` runs `python ARGS` to
completion and hands back what it printed; `python_stdout` also requires it to exit 0.

`run_child` runs `python -c program` for exit timing: the child prints `MARKER` on a line
of its own at the moment that matters (`shutdown()` just returned, or its last statement
ran); the parent timestamps that line as it arrives and reports how long the child took
from there to exit. A child that outlives its timeout is killed.

Only the standard library is imported at module level: the API-only session loads this
module (through `lens_shims`), and `benchmarks/bench_reliability.py` uses it outside pytest.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lens_env import clean_env

#: A child that hangs is killed after this long unless its caller allows more.
CHILD_TIMEOUT_S = 120.0
# Variables that would change what a child imports; it gets only the PYTHONPATH it is given.
IMPORT_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH")
# A pytest a test starts fails on purpose; its failures are not the run's (lens_failure_log).
RUN_VARIABLES = ("LENS_TEST_FAILURE_LOG",)

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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def child_env(
    extra: Mapping[str, str] | None = None,
    *,
    python_path: Sequence[str | os.PathLike[str]] = (),
    also_strip: tuple[str, ...] = (),
) -> dict[str, str]:
    """The environment a child starts with (see the module docstring), plus `extra`; its
    PYTHONPATH is `python_path` alone. `also_strip` as for `lens_env.clean_env`."""
    env = clean_env(also_strip=also_strip + IMPORT_VARIABLES + RUN_VARIABLES)
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(str(entry) for entry in python_path)
    env.update(extra or {})
    return env


def run_python(
    *arguments: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    python: str | os.PathLike[str] = sys.executable,
    cwd: str | os.PathLike[str] | None = None,
    timeout_s: float = CHILD_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """Run `python ARGUMENTS` (this interpreter unless `python` says otherwise) to
    completion in `env` (`child_env()` by default); a child still running after
    `timeout_s` is killed and the test fails with `subprocess.TimeoutExpired`."""
    return subprocess.run(
        [str(python), *(str(argument) for argument in arguments)],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=child_env() if env is None else dict(env),
        timeout=timeout_s,
    )


def python_stdout(
    *arguments: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout_s: float = CHILD_TIMEOUT_S,
) -> str:
    """What `run_python(*arguments, ...)` printed; the child must exit 0 (its stderr is the
    failure message otherwise)."""
    result = run_python(*arguments, env=env, cwd=cwd, timeout_s=timeout_s)
    assert result.returncode == 0, result.stderr
    return result.stdout


def run_child(
    program: str,
    environ: Mapping[str, str],
    timeout_s: float,
    *args: str,
    also_strip: tuple[str, ...] = (),
) -> ChildRun:
    """Run `python -c program *args` in `child_env(environ, also_strip=also_strip)`,
    killing it after `timeout_s`; time its exit."""
    env = child_env(environ, also_strip=also_strip)
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
    # Here, not at the top: lens_receivers needs opentelemetry-proto, which the API-only
    # session lacks, and it takes `free_port` from this module.
    from lens_receivers import signal_endpoint

    return {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc" if transport == "grpc" else "http/protobuf",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": signal_endpoint(traces, transport, "traces"),
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": signal_endpoint(metrics, transport, "metrics"),
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",
    }
