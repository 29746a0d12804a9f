"""Benchmark: a training step's telemetry through lens against the same step on the SDK by hand.

The hand-written side ("raw") is what a framework writes without lens: its own
`MeterProvider` over an `InMemoryMetricReader`, instruments created up front and one call
per value on its own line, and a tracer obtained once from its own `TracerProvider`, whose
`BatchSpanProcessor` exports to an `InMemorySpanExporter`. The lens side is one
`setup_telemetry(NemoLensConfig(...), metric_reader=InMemoryMetricReader(),
span_exporter=InMemorySpanExporter())`, a registered group recorded with `record_metrics` on
`handle.meter`, and `managed_span` without `tracer=`. Both sides use the same reader and
exporter classes, and lens also exports spans through a batch processor.

Figures (each lens against a baseline measured in the same run):

1. The realistic step: 5 nested spans, then 40 values (20 gauges, 10 histograms, 8
   counters, 2 up-down counters), recorded after the spans as a loop logs after its step
   (so no span is current and the SDK samples no exemplars on either side). <= 0.75.
2. Its metrics part alone: `record_metrics(handle.meter, group, **values)` / 40 calls. <= 0.6.
3. 10 values (6 gauges, 4 counters) as keyword arguments / 10 calls, with no attributes
   and with 3 attributes. <= 0.5.
4. One enabled span: `managed_span` (no tracer) <= 0.95 and `span_cm` <= 1.0 against
   `start_as_current_span` on a tracer obtained once from the same provider; an enabled
   `@trace_fn` around `a + b` against `a + b` inside that span, <= 1.05.
5. One reader collect (`get_metrics_data()`) after one step of the 40 values. lens hands its
   buffered values to the SDK when the reader collects, so its collect does more. <= 2.0.
6. A CPU-bound step of about 20 ms (a pure-Python loop) with telemetry off, raw and lens:
   the median and p99 step-time inflation of raw and lens over off. PASS when lens's median
   inflation is at most raw's. Both readers collect every `--collect-every` steps, between
   steps and untimed (figure 5 is that cost).

Figures 1 to 5 alternate baseline and candidate round by round, with the garbage collector
off inside a round; each figure is the median of the per-round ratios (`harness.alternate`),
so a busy machine moves both sides together. Between rounds (untimed) both span pipelines
are flushed and emptied, and both readers collect. Figure 6 interleaves the three variants
step by step, the collector on. Times are wall time; `--clock cpu` takes the process's CPU
time instead (all its threads), which leaves out other processes on a shared machine.

Run: `python benchmarks/bench_step.py` (or `nox -s bench`). It always exits 0 and prints
PASS or MISS per target.
"""

from __future__ import annotations

import argparse
import functools
import gc
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import harness
from harness import Row, Timing, print_table, print_versions, ratio_row
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    TelemetryHandle,
    enabled_span_groups,
    managed_span,
    record_metrics,
    register_metric_group,
    setup_telemetry,
    span_cm,
    trace_fn,
)

STEP_GROUP = "bench_step"
SMALL_GROUP = "bench_step_small"
# "per_step" enables the three groups the step's spans use.
SPAN_GROUPS = "per_step"
# The step's spans, outermost first: (span group, span name).
STEP_SPANS = (
    ("step", "train_step"),
    ("forward_backward", "forward_backward"),
    ("forward_backward", "microbatch"),
    ("forward_backward", "forward"),
    ("optimizer", "optimizer.step"),
)
ATTRIBUTES = {"rank": 3, "role": "policy", "step_kind": "train"}

CREATE = {
    "gauge": "create_gauge",
    "histogram": "create_histogram",
    "counter": "create_counter",
    "up_down_counter": "create_up_down_counter",
}
RECORD = {"gauge": "set", "histogram": "record", "counter": "add", "up_down_counter": "add"}
UNITS = {"gauge": "1", "histogram": "ms", "counter": "{token}", "up_down_counter": "{request}"}


def specs_of(prefix: str, kinds: dict[str, int]) -> list[MetricSpec]:
    """`count` specs of each kind, keyed `<kind initial><n>`, named `<prefix>.<key>`."""
    specs = []
    for kind, count in kinds.items():
        initial = "".join(word[0] for word in kind.split("_"))
        for n in range(count):
            key = f"{initial}{n}"
            specs.append(MetricSpec(key, f"{prefix}.{key}", kind, UNITS[kind], f"bench {kind}"))
    return specs


def values_of(specs: list[MetricSpec]) -> dict[str, float | int]:
    """One plausible value per spec: floats for gauges and histograms, ints for sums."""
    return {
        spec.key: (index + 1 if spec.kind in ("counter", "up_down_counter") else index + 0.5)
        for index, spec in enumerate(specs)
    }


STEP_SPECS = specs_of(
    "bench.step", {"gauge": 20, "histogram": 10, "counter": 8, "up_down_counter": 2}
)
STEP_VALUES = values_of(STEP_SPECS)
SMALL_SPECS = specs_of("bench.small", {"gauge": 6, "counter": 4})
SMALL_VALUES = values_of(SMALL_SPECS)


# --- the two sides -------------------------------------------------------------------------


class RawSdk:
    """The hand-written side: its own providers, reader, exporter and cached tracer."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.meter = self.meter_provider.get_meter("bench.raw")
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(BatchSpanProcessor(self.exporter))
        self.tracer = self.tracer_provider.get_tracer("bench.raw")
        self._instruments: dict[str, Any] = {}

    def instrument(self, spec: MetricSpec) -> Any:
        """The instrument of `spec`, created once (as a framework creates its own)."""
        found = self._instruments.get(spec.name)
        if found is None:
            create = getattr(self.meter, CREATE[spec.kind])
            found = create(spec.name, unit=spec.unit, description=spec.description)
            self._instruments[spec.name] = found
        return found

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def direct_calls(
    raw: RawSdk,
    specs: list[MetricSpec],
    values: dict[str, float | int],
    attributes: dict[str, object] | None = None,
) -> Callable[[], None]:
    """The hand-written recording: instruments created up front, then one line per value.

    The body is generated so that 40 lines need not be written out: it runs exactly the
    bytecode of `loss_gauge.set(loss)` written once per value, with no loop and no dict.
    """
    namespace: dict[str, object] = {"attributes": attributes}
    lines = []
    for n, spec in enumerate(specs):
        namespace[f"record{n}"] = getattr(raw.instrument(spec), RECORD[spec.kind])
        namespace[f"value{n}"] = values[spec.key]
        extra = "" if attributes is None else ", attributes"
        lines.append(f"    record{n}(value{n}{extra})")
    exec(compile("def run():\n" + "\n".join(lines), "<direct calls>", "exec"), namespace)
    run: Callable[[], None] = namespace["run"]  # type: ignore[assignment]  # defined above
    return run


def lens_keywords_call(
    meter: Any,
    group: str,
    specs: list[MetricSpec],
    values: dict[str, float | int],
    attributes: dict[str, object] | None,
) -> Callable[[], None]:
    """`record_metrics(meter, group, g0=value0, ...)`, keywords written out as a caller does."""
    namespace: dict[str, object] = {
        "record_metrics": record_metrics,
        "meter": meter,
        "attributes": attributes,
    }
    keywords = []
    for n, spec in enumerate(specs):
        namespace[f"value{n}"] = values[spec.key]
        keywords.append(f"{spec.key}=value{n}")
    if attributes is not None:
        keywords.insert(0, "attributes=attributes")
    source = f"def run():\n    record_metrics(meter, {group!r}, {', '.join(keywords)})"
    exec(compile(source, "<record_metrics call>", "exec"), namespace)
    run: Callable[[], None] = namespace["run"]  # type: ignore[assignment]  # defined above
    run()  # create the instruments before timing
    return run


def lens_step_metrics(meter: Any) -> Callable[[], None]:
    """The step's 40 values through one `record_metrics` call."""
    # Any: mypy would match a `**dict[str, float | int]` against the positional `values`.
    values: dict[str, Any] = STEP_VALUES

    def run() -> None:
        record_metrics(meter, STEP_GROUP, **values)

    run()  # create the instruments before timing
    return run


def nothing() -> None:
    """The work inside the spans when only the telemetry is timed."""


def raw_step(raw: RawSdk, work: Callable[[], object]) -> Callable[[], None]:
    """The hand-written step: 5 nested spans around `work`, then 40 direct calls."""
    start = raw.tracer.start_as_current_span
    (_, s0), (_, s1), (_, s2), (_, s3), (_, s4) = STEP_SPANS
    record = direct_calls(raw, STEP_SPECS, STEP_VALUES)

    def run() -> None:
        with start(s0), start(s1), start(s2), start(s3), start(s4):
            work()
        record()

    return run


def lens_step(handle: TelemetryHandle, work: Callable[[], object]) -> Callable[[], None]:
    """The same step through lens: 5 nested `managed_span`, then one `record_metrics`."""
    (g0, s0), (g1, s1), (g2, s2), (g3, s3), (g4, s4) = STEP_SPANS
    record = lens_step_metrics(handle.meter)
    span = managed_span

    def run() -> None:
        with span(g0, s0), span(g1, s1), span(g2, s2), span(g3, s3), span(g4, s4):
            work()
        record()

    return run


# --- timing ---------------------------------------------------------------------------------


class Pipelines:
    """Both sides' readers and span pipelines, settled between timed rounds."""

    def __init__(
        self,
        raw: RawSdk,
        lens_reader: InMemoryMetricReader,
        lens_exporter: InMemorySpanExporter,
    ) -> None:
        self.raw = raw
        self.lens_reader = lens_reader
        self.readers = (raw.reader, lens_reader)
        self.exporters = {"raw": raw.exporter, "lens": lens_exporter}
        self.dropped = {"raw": 0, "lens": 0}

    def settle(self, expected_spans: dict[str, int]) -> None:
        """Export every queued span, empty both exporters and collect both readers.

        `expected_spans` says how many spans each exporter should hold since the last
        settle: fewer means a full batch queue dropped some, and a dropped span is cheaper.
        """
        self.raw.tracer_provider.force_flush()
        # The lens side's provider: setup_telemetry installed it as the global one.
        lens_provider: Any = trace.get_tracer_provider()
        lens_provider.force_flush()
        for side, exporter in self.exporters.items():
            found = len(exporter.get_finished_spans())
            self.dropped[side] += max(0, expected_spans.get(side, 0) - found)
            exporter.clear()
        for reader in self.readers:
            reader.get_metrics_data()
        gc.collect()


@dataclass(frozen=True)
class Spans:
    """How many spans one call of a side ends, and which exporter receives them."""

    per_call: int = 0
    side: str = "raw"


#: What `--clock` selects: wall time, or the CPU time of the whole process (every thread,
#: the batch processors' included), which leaves out the time other processes held the CPU.
CLOCKS: dict[str, Callable[[], int]] = {"wall": time.perf_counter_ns, "cpu": time.process_time_ns}


@dataclass
class Bench:
    """What every figure needs: both sides, their pipelines, the clock and the run's counts."""

    handle: TelemetryHandle
    raw: RawSdk
    pipelines: Pipelines
    clock: Callable[[], int]
    args: argparse.Namespace


def alternate(
    bench: Bench,
    candidate: Callable[[], None],
    baseline: Callable[[], None],
    number: int,
    spans: tuple[Spans, Spans] = (Spans(side="lens"), Spans()),
) -> Timing:
    """`harness.alternate` over `bench.args.rounds` rounds of `number` calls on the bench's
    clock, both pipelines settled after each round.

    `spans` describes the (candidate, baseline) calls' spans, to count drops."""
    candidate_spans, baseline_spans = spans
    expected = {
        "candidate": {candidate_spans.side: candidate_spans.per_call * number},
        "baseline": {baseline_spans.side: baseline_spans.per_call * number},
    }
    return harness.alternate(
        candidate,
        baseline,
        rounds=bench.args.rounds,
        number=number,
        clock=bench.clock,
        after_round=lambda side: bench.pipelines.settle(expected[side]),
    )


def collect_round(
    record: Callable[[], None],
    reader: InMemoryMetricReader,
    number: int,
    clock: Callable[[], int],
) -> float:
    """Mean ns of one `get_metrics_data()` right after `record()`, over `number` pairs."""
    total = 0
    gc.disable()
    try:
        for _ in range(number):
            record()
            start = clock()
            reader.get_metrics_data()
            total += clock() - start
    finally:
        gc.enable()
    return total / number


# --- figures 1 to 5 -------------------------------------------------------------------------


def step_rows(bench: Bench) -> list[Row]:
    """Figures 1 and 2: the realistic step, and its metrics part alone."""
    handle, raw, args = bench.handle, bench.raw, bench.args
    spans = len(STEP_SPANS)
    step = alternate(
        bench,
        lens_step(handle, nothing),
        raw_step(raw, nothing),
        args.step_number,
        (Spans(spans, "lens"), Spans(spans, "raw")),
    )
    metrics_part = alternate(
        bench,
        lens_step_metrics(handle.meter),
        direct_calls(raw, STEP_SPECS, STEP_VALUES),
        args.step_number,
    )
    return [
        ratio_row("realistic step (40 values, 5 spans) / raw SDK", step, 0.75, "us"),
        ratio_row("its 40 values: record_metrics / 40 direct calls", metrics_part, 0.6, "us"),
    ]


def collect_row(bench: Bench) -> Row:
    """Figure 5: one collect after one step of the 40 values, both readers alike.

    Run before figure 3, while both providers hold the step's series only (figure 3 then
    adds the same series to both)."""
    raw, lens_reader = bench.raw, bench.pipelines.lens_reader
    rounds, number = bench.args.rounds, bench.args.collects
    record_lens = lens_step_metrics(bench.handle.meter)
    record_raw = direct_calls(raw, STEP_SPECS, STEP_VALUES)
    lens_ns: list[float] = []
    raw_ns: list[float] = []
    for _ in range(rounds):
        raw_ns.append(collect_round(record_raw, raw.reader, number, bench.clock))
        lens_ns.append(collect_round(record_lens, lens_reader, number, bench.clock))
    timing = Timing(
        statistics.median(lens_ns),
        statistics.median(raw_ns),
        statistics.median(lens / base for lens, base in zip(lens_ns, raw_ns, strict=True)),
    )
    return ratio_row("collect after one step of 40 values / raw collect", timing, 2.0, "us")


def small_call_rows(bench: Bench) -> list[Row]:
    """Figure 3: ten gauge and counter values, without and with attributes."""
    rows = []
    for label, attributes in (("no attributes", None), ("3 attributes", ATTRIBUTES)):
        result = alternate(
            bench,
            lens_keywords_call(
                bench.handle.meter, SMALL_GROUP, SMALL_SPECS, SMALL_VALUES, attributes
            ),
            direct_calls(bench.raw, SMALL_SPECS, SMALL_VALUES, attributes),
            bench.args.number,
        )
        figure = f"10 gauge+counter values, {label} / 10 direct calls"
        rows.append(ratio_row(figure, result, 0.5, "us"))
    return rows


def add(a: int, b: int) -> int:
    """The trivial function of the trace_fn figure."""
    return a + b


def span_rows(bench: Bench) -> list[Row]:
    """Figure 4: enabled managed_span, span_cm and trace_fn (no tracer=) against
    start_as_current_span on a tracer obtained once from the same provider."""
    start = bench.handle.tracer.start_as_current_span
    traced_add = trace_fn("step", "add")(add)

    def sdk_span() -> None:
        with start("train_step"):
            pass

    def lens_managed_span() -> None:
        with managed_span("step", "train_step"):
            pass

    def lens_span_cm() -> None:
        with span_cm("train_step"):
            pass

    def sdk_span_add() -> None:
        with start("add"):
            add(1, 2)

    def lens_trace_fn() -> None:
        traced_add(1, 2)

    # Both sides export through lens's pipeline here.
    one_each = (Spans(1, "lens"), Spans(1, "lens"))
    rows = []
    for label, target, candidate, baseline in (
        ("enabled managed_span / start_as_current_span", 0.95, lens_managed_span, sdk_span),
        ("enabled span_cm / start_as_current_span", 1.0, lens_span_cm, sdk_span),
        ("enabled @trace_fn a+b / a+b in that span", 1.05, lens_trace_fn, sdk_span_add),
    ):
        result = alternate(bench, candidate, baseline, bench.args.number, one_each)
        rows.append(ratio_row(label, result, target, "us"))
    return rows


# --- the 20 ms step -------------------------------------------------------------------------


def busy_loop(iterations: int) -> int:
    """Pure-Python CPU work: the stand-in for a step's compute."""
    total = 0
    for i in range(iterations):
        total += i ^ (i >> 3)
    return total


def calibrate(target_ms: float, clock: Callable[[], int]) -> int:
    """The iteration count for which `busy_loop` takes about `target_ms` on `clock`."""
    iterations = 10_000
    for _ in range(4):
        samples = []
        for _ in range(5):
            start = clock()
            busy_loop(iterations)
            samples.append(clock() - start)
        iterations = max(1, round(iterations * target_ms * 1e6 / statistics.median(samples)))
    return iterations


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


def cpu_step_rows(bench: Bench) -> tuple[list[Row], str]:
    """Figure 6: steps of off, raw and lens interleaved, the order rotating each step."""
    step_ms, steps, collect_every = bench.args.step_ms, bench.args.steps, bench.args.collect_every
    clock = bench.clock
    iterations = calibrate(step_ms, clock)
    work = functools.partial(busy_loop, iterations)
    variants: dict[str, Callable[[], object]] = {
        "off": work,
        "raw": raw_step(bench.raw, work),
        "lens": lens_step(bench.handle, work),
    }
    order = list(variants)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for step in range(steps):
        for name in order[step % 3 :] + order[: step % 3]:
            call = variants[name]
            start = clock()
            call()
            times[name].append((clock() - start) / 1e6)
        if (step + 1) % collect_every == 0:
            spans = len(STEP_SPANS) * collect_every
            bench.pipelines.settle({"raw": spans, "lens": spans})
    off_median, off_p99 = statistics.median(times["off"]), p99(times["off"])

    def inflation(name: str) -> tuple[float, float]:
        median = statistics.median(times[name]) / off_median - 1
        return median * 100, (p99(times[name]) / off_p99 - 1) * 100

    raw_median, raw_p99 = inflation("raw")
    lens_median, lens_p99 = inflation("lens")
    rows = [
        Row(
            f"{step_ms:g} ms CPU step, median inflation over off",
            f"{lens_median:+.2f} %",
            f"{raw_median:+.2f} %",
            f"{lens_median - raw_median:+.2f} pt",
            "<= raw",
            harness.verdict(lens_median <= raw_median),
        ),
        Row(
            f"{step_ms:g} ms CPU step, p99 inflation over off",
            f"{lens_p99:+.2f} %",
            f"{raw_p99:+.2f} %",
            f"{lens_p99 - raw_p99:+.2f} pt",
            "report",
            "-",
        ),
    ]
    note = (
        f"CPU step: busy loop of {iterations:,} iterations; off median {off_median:.2f} ms, "
        f"p99 {off_p99:.2f} ms over {steps} steps per variant"
    )
    return rows, note


# --- main -----------------------------------------------------------------------------------


def setup_problem(handle: TelemetryHandle) -> str:
    """Why lens's side would not measure what it should, or "" (a span group left off
    would time a no-op against real spans)."""
    if not handle.is_exporting:
        return "setup_telemetry returned a handle that does not export"
    off = sorted({group for group, _ in STEP_SPANS} - set(enabled_span_groups()))
    if off:
        return f"span groups {off} are not enabled by span_groups={SPAN_GROUPS!r}"
    return ""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=41, help="alternating rounds per figure")
    parser.add_argument("--number", type=int, default=500, help="calls per round, figures 3-4")
    parser.add_argument("--step-number", type=int, default=100, help="steps per round, 1-2")
    parser.add_argument("--collects", type=int, default=20, help="collects per round, figure 5")
    parser.add_argument("--steps", type=int, default=400, help="steps per variant, figure 6")
    parser.add_argument("--step-ms", type=float, default=20.0, help="figure 6's step, in ms")
    parser.add_argument("--collect-every", type=int, default=100, help="figure 6, in steps")
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="what a round's time is"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print_versions()
    register_metric_group(STEP_GROUP, STEP_SPECS)
    register_metric_group(SMALL_GROUP, SMALL_SPECS)
    lens_reader = InMemoryMetricReader()
    lens_exporter = InMemorySpanExporter()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, service_name="bench-step", span_groups=SPAN_GROUPS),
        metric_reader=lens_reader,
        span_exporter=lens_exporter,
    )
    problem = setup_problem(handle)
    if problem:
        print(f"no figures: {problem}")
        handle.shutdown()
        return 0
    raw = RawSdk()
    bench = Bench(handle, raw, Pipelines(raw, lens_reader, lens_exporter), CLOCKS[args.clock], args)
    try:
        rows = step_rows(bench)
        collect = collect_row(bench)
        rows += small_call_rows(bench)
        rows += span_rows(bench)
        rows.append(collect)
        cpu_rows, cpu_note = cpu_step_rows(bench)
        rows += cpu_rows
    finally:
        handle.shutdown()
        raw.shutdown()
    print()
    print_table(rows)
    print()
    print(cpu_note)
    dropped = bench.pipelines.dropped
    if any(dropped.values()):
        print(f"spans a full batch queue dropped: lens {dropped['lens']}, raw {dropped['raw']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
