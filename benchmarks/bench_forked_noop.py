"""Benchmark: a forked process's `record_metrics` where lens records nothing, against a no-op.

A forked child records into a shared region when its parent's pipeline takes children's
values (bench_children measures that). Where no pipeline takes them, lens records nothing
on an inherited meter and logs one warning (the warned no-op): a child never calls into
an SDK object its parent had. Two such processes are measured:

- a grandchild (a child of a forked child) recording on the original `handle.meter`:
  only the direct children of the process that built the pipeline report to it;
- a child recording on a meter of a `MeterProvider` the parent built by hand (not lens's
  pipeline) and recorded on through lens before the fork.

In that process, `record_metrics(meter, group, **values)` with bench_step's 40 values is
timed against the same call on an OpenTelemetry `NoOpMeter` (where `record_metrics`
returns at once), in alternating rounds (`harness.alternate`, the garbage collector off
inside a round); the process sends its figures back through a pipe and leaves by
`os._exit`. Every forked process has a timeout (`--timeout`), after which it is killed,
and is always reaped. Before timing, the process checks that it is the no-op case (an
inherited meter whose pipeline does not take its values) and that lens warned.

Figures (each against the same call on a `NoOpMeter` in the same process):

1. A grandchild's call on the original `handle.meter`. <= 2.0.
2. A child's call on a meter of a provider lens's pipeline did not build. <= 2.0.

Run: `python benchmarks/bench_forked_noop.py` (or `nox -s bench`). It always exits 0 and
prints PASS or MISS per target.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import select
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import harness
from bench_step import STEP_GROUP, STEP_SPECS, STEP_VALUES
from harness import Row, Timing, print_report, print_versions, ratio_row
from opentelemetry.metrics import NoOpMeter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nemo.lens import (
    _forked_children,
    _inheritance,
    record_metrics,
    register_metric_group,
)

TARGET = 2.0
#: The nested process's own timeout is this much shorter than its parent's, so the
#: middle process kills and reaps a stuck grandchild before it is killed itself.
NESTED_MARGIN_S = 10.0

#: What `--clock` selects: wall time, or the CPU time of the measuring process.
CLOCKS: dict[str, Callable[[], int]] = {"wall": time.perf_counter_ns, "cpu": time.process_time_ns}

#: A forked process's answer: its figures, or {"error": why there are none}.
Answer = dict[str, Any]


class WarningCounter(logging.Handler):
    """Counts lens's warnings (and keeps the first), so the table is not cluttered by them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.first = ""

    def emit(self, record: logging.LogRecord) -> None:
        if not self.count:
            self.first = record.getMessage()
        self.count += 1


def in_forked_process(work: Callable[[], Answer], timeout: float) -> Answer:
    """`work()` run in a forked child, its answer sent back as JSON through a pipe.

    The child leaves by `os._exit`; it is killed once `timeout` seconds have passed and is
    reaped in every case."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_fd)
            payload = json.dumps(work()).encode()
            while payload:
                payload = payload[os.write(write_fd, payload) :]
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write_fd)
    deadline = time.monotonic() + timeout
    try:
        data, complete = _read_until_end(read_fd, deadline)
    finally:
        os.close(read_fd)
        status = _reap(pid, deadline)
    if not complete:
        return {"error": f"no answer within {timeout:g} s (killed)"}
    if status != 0:
        return {"error": f"the forked process ended with status {status}"}
    answer: Answer = json.loads(data)
    return answer


def _read_until_end(fd: int, deadline: float) -> tuple[bytes, bool]:
    """Everything written to `fd` until its writer closed it (True) or `deadline` (False)."""
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), False
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)


def _reap(pid: int, deadline: float) -> int:
    """Wait for child `pid` until `deadline`, then kill it; its exit status (-signal when
    a signal ended it)."""
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def noop_case(meter: object) -> str:
    """Why recording on `meter` here is not the warned no-op, or "" when it is."""
    if not _inheritance.is_inherited_meter(meter):
        return "the meter is not an inherited one here"
    if _forked_children.reports_to_parent(_inheritance.consumer_of(meter)):
        return "this process reports to its parent's pipeline (it records into its region)"
    return ""


def measure(
    meter: object, counter: WarningCounter, args: argparse.Namespace
) -> Callable[[], Answer]:
    """The work of the measuring process: the call on `meter` against a NoOpMeter's."""

    def work() -> Answer:
        # Any: mypy would match a `**dict[str, float | int]` against the positional `values`.
        values: dict[str, Any] = STEP_VALUES
        noop = NoOpMeter("bench.noop")

        def lens_call() -> None:
            record_metrics(meter, STEP_GROUP, **values)

        def noop_call() -> None:
            record_metrics(noop, STEP_GROUP, **values)

        counter.count, counter.first = 0, ""
        lens_call()  # the first call: the one warning
        timing = harness.alternate(
            lens_call,
            noop_call,
            rounds=args.rounds,
            number=args.number,
            clock=CLOCKS[args.clock],
        )
        return {
            "candidate_ns": timing.candidate_ns,
            "baseline_ns": timing.baseline_ns,
            "ratio": timing.ratio,
            "not_noop": noop_case(meter),
            "warnings": counter.count,
            "warning": counter.first,
        }

    return work


def row_of(figure: str, answer: Answer, notes: list[str]) -> Row:
    """The figure's row, and what the table's reader should know about it in `notes`."""
    if "error" in answer:
        notes.append(f"{figure}: no figure, {answer['error']}")
        return Row(figure, "-", "-", "-", f"<= {TARGET}", "MISS")
    if answer["not_noop"]:
        notes.append(f"{figure}: not the warned no-op here: {answer['not_noop']}")
    elif not answer["warnings"]:
        notes.append(f"{figure}: lens recorded nothing but logged no warning")
    else:
        notes.append(f"{figure}: {answer['warnings']} warning(s): {answer['warning'][:90]}...")
    timing = Timing(answer["candidate_ns"], answer["baseline_ns"], answer["ratio"])
    return ratio_row(figure, timing, TARGET)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=41, help="alternating rounds per figure")
    parser.add_argument("--number", type=int, default=500, help="calls per round")
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="what a round's time is"
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds before a forked process is killed"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    # Python 3.12+ warns at every fork of a threaded process; lens's fork hooks are what
    # make that safe here, and the warning would only clutter the table.
    warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
    args = parse_args(argv)
    print_versions()
    counter = WarningCounter()
    logging.getLogger("nemo.lens").addHandler(counter)
    register_metric_group(STEP_GROUP, STEP_SPECS)
    lens = harness.lens_in_memory("bench-forked-noop")
    if lens is None:
        return 0
    handle = lens[0]
    # A framework's own provider, recorded on through lens before the forks (as the
    # parent records on handle.meter), so its children inherit it.
    own_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    own_meter = own_provider.get_meter("bench.framework")
    values: dict[str, Any] = STEP_VALUES
    record_metrics(handle.meter, STEP_GROUP, **values)
    record_metrics(own_meter, STEP_GROUP, **values)
    started = time.perf_counter()
    inner = max(1.0, args.timeout - NESTED_MARGIN_S)
    try:
        grandchild = in_forked_process(
            lambda: in_forked_process(measure(handle.meter, counter, args), inner),
            args.timeout,
        )
        child = in_forked_process(measure(own_meter, counter, args), args.timeout)
    finally:
        handle.shutdown()
        own_provider.shutdown()
    notes: list[str] = []
    rows = [
        row_of("a grandchild's call on handle.meter / on a NoOpMeter", grandchild, notes),
        row_of("a child's call on a meter lens did not build / on a NoOpMeter", child, notes),
    ]
    print_report(rows, notes)
    print(
        f"per call of {len(STEP_VALUES)} values; {args.rounds} rounds of {args.number} calls "
        f"per side; clock: {args.clock}; measured in {time.perf_counter() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
