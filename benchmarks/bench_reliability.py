"""Benchmark: what lens delivers, and how soon the process exits, when collectors fail.

Every figure comes from a fresh child interpreter that sets up lens with the `otlp`
exporter against real OTLP receivers on 127.0.0.1 started by this script (the receivers
of `packages/lens-core/tests/support/lens_receivers.py`):

1. Spans delivered of N in a burst: 8 threads each end 750 spans as fast as they can, to
   a live collector that answers each request after 100 ms (as one across a network
   would); then `shutdown()`. Target: all of them.
2. Metric points delivered of 3,000 by `shutdown(timeout_ms=2000)` when the traces
   collector is down (its port refuses) and the metrics collector is live; the child
   ends (`os._exit`) as soon as shutdown returns. Target: all of them.
3. Seconds from `shutdown(timeout_ms=2000)` returning to the process having exited, with
   both collectors dead (refusing) and with both hanging (accepting, never answering).
   Target: <= 1 s. Also the same for a job that forgets `shutdown()`, from its last
   statement to exit; target: the bound `nemo.lens.handle` documents, plus a second.

Each child is killed after `--child-timeout` seconds (reported as "> N s"). Figures are
counts and seconds, not ratios: they measure faults, not speed.

Run: `python benchmarks/bench_reliability.py` (or `nox -s bench`). It always exits 0 and
prints PASS or MISS per target.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "packages" / "lens-core" / "tests" / "support"))

import harness  # noqa: E402
from lens_children import MARKER, otlp_env, run_child  # noqa: E402
from lens_receivers import HangingListener, OtlpReceiver, dead_endpoint  # noqa: E402

BURST_THREADS = 8
BURST_SPANS_PER_THREAD = 750
METRIC_POINTS = 3000
SHUTDOWN_BUDGET_MS = 2000
#: The burst's collector answers each request after this long, as one across a network.
COLLECTOR_LATENCY_S = 0.1
#: The documented bound of a forgotten shutdown at exit, if this lens declares one.
FORGOTTEN_EXIT_TARGET_S = 6.0

PRELUDE = """
import sys, threading, time
from nemo.lens import MetricSpec, NemoLensConfig, record_metrics, register_metric_group
from nemo.lens import setup_telemetry

handle = setup_telemetry(NemoLensConfig(enabled=True, service_name="bench-reliability"))
"""

BURST_CHILD = (
    PRELUDE
    + f"""
start = threading.Barrier({BURST_THREADS})

def burst(index):
    start.wait()
    for step in range({BURST_SPANS_PER_THREAD}):
        with handle.tracer.start_as_current_span("burst", attributes={{"t": index, "s": step}}):
            pass

threads = [threading.Thread(target=burst, args=(i,)) for i in range({BURST_THREADS})]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
handle.shutdown(timeout_ms=30000)
"""
)

METRICS_CHILD = (
    PRELUDE
    + f"""
specs = [MetricSpec(f"m{{i}}", f"bench.m{{i}}", "counter") for i in range(10)]
register_metric_group("bench", specs)
for point in range({METRIC_POINTS}):
    values = {{f"m{{point % 10}}": 1}}
    record_metrics(handle.meter, "bench", attributes={{"p": point // 10}}, **values)
for step in range(50):
    with handle.tracer.start_as_current_span("step"):
        pass
handle.shutdown(timeout_ms={SHUTDOWN_BUDGET_MS})
# Gone the moment shutdown() returns, as a job killed right after it would be: what
# arrived is what shutdown itself delivered, not what a slow exit delivered later.
import os
os._exit(0)
"""
)

EXIT_CHILD = (
    PRELUDE
    + f"""
register_metric_group("bench", [MetricSpec("steps", "bench.steps", "counter")])
for step in range(200):
    record_metrics(handle.meter, "bench", steps=1)
    with handle.tracer.start_as_current_span("step"):
        pass
if sys.argv[1] == "shutdown":
    handle.shutdown(timeout_ms={SHUTDOWN_BUDGET_MS})
print("{MARKER}", flush=True)
"""
)


@dataclass
class Row:
    """One line of the table."""

    label: str
    value: str
    target: str
    passed: bool

    @property
    def verdict(self) -> str:
        return harness.verdict(self.passed)


def span_burst(transport: str, rounds: int, timeout_s: float) -> Row:
    total = BURST_THREADS * BURST_SPANS_PER_THREAD
    delivered: list[int] = []
    for _ in range(rounds):
        with OtlpReceiver(transport, latency_s=COLLECTOR_LATENCY_S) as receiver:
            run_child(
                BURST_CHILD, otlp_env(transport, receiver.endpoint, receiver.endpoint), timeout_s
            )
            delivered.append(receiver.received.span_count())
    worst = min(delivered)
    return Row(
        f"spans delivered, {BURST_THREADS} threads x {BURST_SPANS_PER_THREAD} ({transport}), "
        f"worst of {rounds}",
        f"{worst:,} of {total:,} ({100 * worst / total:.1f} %)",
        f"{total:,}",
        worst == total,
    )


def metrics_with_traces_down(transport: str, timeout_s: float) -> Row:
    with OtlpReceiver(transport) as receiver:
        run_child(METRICS_CHILD, otlp_env(transport, dead_endpoint(), receiver.endpoint), timeout_s)
        delivered = receiver.received.point_count("bench.")
    return Row(
        f"metric points delivered, traces collector down ({transport})",
        f"{delivered:,} of {METRIC_POINTS:,}",
        f"{METRIC_POINTS:,}",
        delivered == METRIC_POINTS,
    )


@contextmanager
def collector(kind: str) -> Iterator[str]:
    """An endpoint whose collector is `dead` (refusing) or `hanging` (never answering)."""
    if kind == "dead":
        yield dead_endpoint()
        return
    with HangingListener() as listener:
        yield listener.endpoint


def exit_seconds(
    transport: str, kind: str, mode: str, rounds: int, timeout_s: float
) -> tuple[str, float]:
    """Median seconds from the marker to exit, over `rounds` children, and the worst."""
    figures: list[float] = []
    for _ in range(rounds):
        with ExitStack() as stack:
            endpoint = stack.enter_context(collector(kind))
            result = run_child(EXIT_CHILD, otlp_env(transport, endpoint, endpoint), timeout_s, mode)
        if result.timed_out or result.after_marker_s is None:
            figures.append(float("inf"))
        else:
            figures.append(result.after_marker_s)
    worst = max(figures)
    text = f"> {timeout_s:.0f} s" if worst == float("inf") else f"{worst:.2f} s"
    if rounds > 1 and worst != float("inf"):
        text += f" (median {statistics.median(figures):.2f} s)"
    return text, worst


def exit_row(transport: str, kind: str, rounds: int, timeout_s: float) -> Row:
    text, worst = exit_seconds(transport, kind, "shutdown", rounds, timeout_s)
    return Row(
        f"s from shutdown({SHUTDOWN_BUDGET_MS} ms) return to exit, {kind} collectors "
        f"({transport}), worst of {rounds}",
        text,
        "<= 1 s",
        worst <= 1.0,
    )


def forgotten_row(transport: str, kind: str, rounds: int, timeout_s: float) -> Row:
    text, worst = exit_seconds(transport, kind, "forgotten", rounds, timeout_s)
    return Row(
        f"s from last statement to exit, no shutdown(), {kind} collectors ({transport})",
        text,
        f"<= {FORGOTTEN_EXIT_TARGET_S:.0f} s",
        worst <= FORGOTTEN_EXIT_TARGET_S,
    )


def print_table(rows: list[Row]) -> None:
    cells = [(row.label, row.value, row.target, row.verdict) for row in rows]
    harness.print_table(cells, ("figure", "lens", "target", "result"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3, help="children per burst/exit figure")
    parser.add_argument("--child-timeout", type=float, default=120.0, help="seconds per child")
    parser.add_argument(
        "--transports", default="grpc,http", help="comma-separated OTLP transports to measure"
    )
    args = parser.parse_args(argv)

    harness.print_versions()
    figures: list[Callable[[], Row]] = []
    for transport in args.transports.split(","):
        figures.append(lambda t=transport: span_burst(t, args.rounds, args.child_timeout))
        figures.append(lambda t=transport: metrics_with_traces_down(t, args.child_timeout))
        for kind in ("dead", "hanging"):
            figures.append(
                lambda t=transport, k=kind: exit_row(t, k, args.rounds, args.child_timeout)
            )
        figures.append(lambda t=transport: forgotten_row(t, "hanging", 1, args.child_timeout))
    rows: list[Row] = []
    for figure in figures:
        rows.append(figure())
        print(f"  measured: {rows[-1].label}: {rows[-1].value}", file=sys.stderr, flush=True)
    print()
    print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
