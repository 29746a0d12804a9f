"""Benchmark: the realistic step's 40 values recorded from several threads at once.

N threads (1, 2, 4 and 8) each record the 40 values of bench_step's realistic step (20
gauges, 10 histograms, 8 counters, 2 up-down counters; the same specs and values, no
spans) over and over, all on ONE meter:

- lens: `record_metrics(handle.meter, group, **values)`, where `handle` is one
  `setup_telemetry(NemoLensConfig(enabled=True, ...), metric_reader=InMemoryMetricReader())`
  (so gauges and sums coalesce into the pipeline's one buffer);
- raw (the baseline): one direct SDK call per value, on instruments created up front on
  one hand-made `MeterProvider` over an `InMemoryMetricReader`.

A round is one side's N threads, released together by a barrier, each recording `--steps`
steps; the two sides alternate round by round (`harness.alternate`, the garbage collector
off inside a round), and both readers collect between rounds, untimed.

Figures, per N (each lens against raw, measured in the same run):

1. Throughput: values recorded per CPU-second of the whole process (every thread), lens /
   raw, the median of the per-round ratios. >= 2.0 at 2, 4 and 8 threads on OpenTelemetry
   >= 1.24, >= 1.3 on 1.23 (the target follows the installed SDK); 1 thread is reported.
   `--clock wall` makes wall time the target's clock instead.
2. The same per wall second (the other clock), reported.
3. Voluntary context switches per step, each side (`getrusage(RUSAGE_SELF).ru_nvcsw`
   over a round, every thread, divided by the round's steps), reported.
4. The fraction of its own one-thread throughput each side keeps at 4 and 8 threads (on
   the target's clock; each N is measured at its own time), reported.

A throughput ratio is shown with the lowest and highest per-round ratio in brackets. On a
shared machine the figures at 2 to 8 threads move from run to run with the outside load:
in some runs the threads queue on each other's locks (many more voluntary switches per
step on both sides), so compare runs by their switches too.

Run: `python benchmarks/bench_threads.py` (or `nox -s bench`). It always exits 0 and
prints PASS or MISS per target.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import resource
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import harness
from bench_step import CREATE, RECORD, STEP_GROUP, STEP_SPECS, STEP_VALUES, lens_step_metrics
from harness import Row, print_table, print_versions
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nemo.lens import register_metric_group

VALUES_PER_STEP = len(STEP_SPECS)

#: The clocks a round is timed on; `--clock` picks the one the targets read.
CLOCKS: dict[str, Callable[[], int]] = {"cpu": time.process_time_ns, "wall": time.perf_counter_ns}

#: How long a barrier waits before the benchmark gives up on a stuck thread (seconds).
BARRIER_TIMEOUT_S = 120.0


def throughput_target() -> float:
    """The lens/raw throughput target at 2, 4 and 8 threads for the installed SDK."""
    return 2.0 if harness.release("opentelemetry-sdk") >= (1, 24) else 1.3


def raw_step(meter: Any) -> Callable[[], None]:
    """The hand-written step on `meter`: instruments created up front, one line per value.

    The body is generated so that 40 lines need not be written out; it runs the bytecode
    of `loss_gauge.set(loss)` written once per value, with no loop and no dict.
    """
    namespace: dict[str, object] = {}
    lines = []
    for n, spec in enumerate(STEP_SPECS):
        create = getattr(meter, CREATE[spec.kind])
        instrument = create(spec.name, unit=spec.unit, description=spec.description)
        namespace[f"record{n}"] = getattr(instrument, RECORD[spec.kind])
        namespace[f"value{n}"] = STEP_VALUES[spec.key]
        lines.append(f"    record{n}(value{n})")
    exec(compile("def run():\n" + "\n".join(lines), "<raw step>", "exec"), namespace)
    run: Callable[[], None] = namespace["run"]  # type: ignore[assignment]  # defined above
    return run


@dataclass
class Samples:
    """Per round of one side: CPU ns, wall ns and voluntary context switches."""

    cpu_ns: list[int] = field(default_factory=list)
    wall_ns: list[int] = field(default_factory=list)
    switches: list[int] = field(default_factory=list)


class Team:
    """`threads` threads that each run `step` `steps` times per round, released together.

    The threads live across rounds and wait on a barrier in between, so a round's time
    holds no thread start or end.
    """

    def __init__(self, name: str, step: Callable[[], None], threads: int, steps: int) -> None:
        self.steps_per_round = threads * steps
        self.samples = Samples()
        self._step = step
        self._steps = steps
        self._stop = False
        self._start = threading.Barrier(threads + 1, timeout=BARRIER_TIMEOUT_S)
        self._done = threading.Barrier(threads + 1, timeout=BARRIER_TIMEOUT_S)
        self._threads = [
            threading.Thread(target=self._work, name=f"bench-{name}-{n}", daemon=True)
            for n in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def _work(self) -> None:
        step, steps = self._step, self._steps
        try:
            while True:
                self._start.wait()
                if self._stop:
                    return
                for _ in range(steps):
                    step()
                self._done.wait()
        except threading.BrokenBarrierError:
            return  # another thread failed, or the round timed out
        except BaseException:
            # The round ends now, without this thread's steps, and so does the team.
            self._done.abort()
            self._start.abort()
            raise

    def round(self) -> None:
        """One round: release every thread, wait for all of them, note the round's costs."""
        switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
        cpu = time.process_time_ns()
        wall = time.perf_counter_ns()
        self._start.wait()
        self._done.wait()
        wall = time.perf_counter_ns() - wall
        cpu = time.process_time_ns() - cpu
        switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - switches
        self.samples.cpu_ns.append(cpu)
        self.samples.wall_ns.append(wall)
        self.samples.switches.append(switches)

    def close(self) -> None:
        """End every thread (a thread that failed has ended already)."""
        self._stop = True
        # Broken when a thread failed: that ended the team already.
        with contextlib.suppress(threading.BrokenBarrierError):
            self._start.wait()
        for thread in self._threads:
            thread.join(BARRIER_TIMEOUT_S)


@dataclass(frozen=True)
class Throughput:
    """Values per second of one clock: each side's median, the median per-round ratio and
    the lowest and highest per-round ratio."""

    lens: float
    raw: float
    ratio: float
    lowest: float
    highest: float

    @classmethod
    def of(cls, values: int, lens_ns: list[int], raw_ns: list[int]) -> Throughput:
        """From the rounds' ns, each round recording `values` values."""
        lens = [values * 1e9 / ns for ns in lens_ns]
        raw = [values * 1e9 / ns for ns in raw_ns]
        ratios = [a / b for a, b in zip(lens, raw, strict=True)]
        return cls(
            statistics.median(lens),
            statistics.median(raw),
            statistics.median(ratios),
            min(ratios),
            max(ratios),
        )


@dataclass(frozen=True)
class Result:
    """One thread count's figures: throughput per clock, switches per step per side."""

    threads: int
    throughput: dict[str, Throughput]
    lens_switches: float
    raw_switches: float


def measure(
    threads: int,
    lens_step: Callable[[], None],
    raw: Callable[[], None],
    settle: Callable[[str], None],
    args: argparse.Namespace,
) -> Result:
    """Alternate `args.rounds` raw and lens rounds of `threads` threads, `settle` after
    each (untimed).

    `harness.alternate` drives the rounds (and keeps the garbage collector off inside
    each); every round notes its own CPU time, wall time and switches, so one round gives
    both clocks' figures."""
    lens_team = Team("lens", lens_step, threads, args.steps)
    raw_team = Team("raw", raw, threads, args.steps)
    try:
        lens_team.round()  # warm-up, untimed: first series, first buckets
        raw_team.round()
        lens_team.samples, raw_team.samples = Samples(), Samples()
        settle("warm-up")
        harness.alternate(
            lens_team.round, raw_team.round, rounds=args.rounds, number=1, after_round=settle
        )
    finally:
        lens_team.close()
        raw_team.close()
    lens, base = lens_team.samples, raw_team.samples
    steps = lens_team.steps_per_round
    values = steps * VALUES_PER_STEP
    return Result(
        threads,
        {
            "cpu": Throughput.of(values, lens.cpu_ns, base.cpu_ns),
            "wall": Throughput.of(values, lens.wall_ns, base.wall_ns),
        },
        statistics.median(lens.switches) / steps,
        statistics.median(base.switches) / steps,
    )


def rate(values_per_s: float) -> str:
    return f"{values_per_s / 1e6:,.3f} M/s"


#: How a row names each clock's second.
SECOND = {"cpu": "CPU-second", "wall": "wall second"}


def rows_of(results: list[Result], clock: str) -> list[Row]:
    """The table: per N the target's row, the other clock's, the switches; then the
    fraction of one-thread throughput each side kept."""
    other = "wall" if clock == "cpu" else "cpu"
    target = throughput_target()
    rows = []
    for result in results:
        n = result.threads
        for shown in (clock, other):
            figure = result.throughput[shown]
            has_target = shown == clock and n >= 2
            rows.append(
                Row(
                    f"{n} thread(s): values per {SECOND[shown]}, lens / raw",
                    rate(figure.lens),
                    rate(figure.raw),
                    f"{figure.ratio:.3f} [{figure.lowest:.2f}, {figure.highest:.2f}]",
                    f">= {target}" if has_target else "report",
                    harness.verdict(figure.ratio >= target) if has_target else "-",
                )
            )
        rows.append(
            Row(
                f"{n} thread(s): voluntary context switches per step",
                f"{result.lens_switches:.3f}",
                f"{result.raw_switches:.3f}",
                "-",
                "report",
                "-",
            )
        )
    by_threads = {result.threads: result.throughput[clock] for result in results}
    one = by_threads.get(1)
    for n in (4, 8):
        many = by_threads.get(n)
        if one is None or many is None:
            continue
        rows.append(
            Row(
                f"{n} threads: fraction of 1-thread throughput kept ({clock})",
                f"{many.lens / one.lens:.3f}",
                f"{many.raw / one.raw:.3f}",
                "-",
                "report",
                "-",
            )
        )
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=17, help="alternating rounds per N")
    parser.add_argument("--steps", type=int, default=800, help="steps per thread per round")
    parser.add_argument("--threads", default="1,2,4,8", help="the thread counts, comma-separated")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu", help="the targets' clock")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print_versions()
    counts = [int(part) for part in args.threads.split(",") if part.strip()]
    register_metric_group(STEP_GROUP, STEP_SPECS)
    lens = harness.lens_in_memory("bench-threads")
    if lens is None:
        return 0
    handle, lens_reader = lens
    raw_reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[raw_reader])

    def settle(_side: str) -> None:
        """Both readers collect (lens's flushes its buffer into the SDK), untimed."""
        for reader in (lens_reader, raw_reader):
            reader.get_metrics_data()
        gc.collect()

    lens_step = lens_step_metrics(handle.meter)
    raw = raw_step(provider.get_meter("bench.raw"))
    started = time.perf_counter()
    results = []
    try:
        for threads in counts:
            results.append(measure(threads, lens_step, raw, settle, args))
    except threading.BrokenBarrierError:
        print(f"no figures past {len(results)} thread counts: a recording thread failed or hung")
    finally:
        handle.shutdown()
        provider.shutdown()
    print()
    print_table(rows_of(results, args.clock))
    print()
    print(
        f"{args.steps} steps of {VALUES_PER_STEP} values per thread per round, "
        f"{args.rounds} rounds per side per N; clock of the targets: {args.clock}; "
        f"sys.getswitchinterval() = {sys.getswitchinterval() * 1e3:g} ms; "
        f"measured in {time.perf_counter() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
