"""Benchmark: many series, each recorded once per interval, through lens and by hand.

A series here is one attribute set (`{"shard": i}`) of one instrument; every figure records
each series once per collection interval, half of them on a gauge and half on a counter,
at each series count of `--series` (default 10, 1k, 10k and 100k). The lens side is one
`setup_telemetry(NemoLensConfig(enabled=True, traces_enabled=False),
metric_reader=InMemoryMetricReader())`, a registered group and `record_metrics(handle.meter,
group, {key: value}, attributes={"shard": i})` per series: lens keeps gauge and counter
values in its pipeline's buffer and hands each buffered series to the SDK's instrument
once, when the reader collects. The hand-written side ("raw") is its own `MeterProvider`
over an `InMemoryMetricReader`, instruments created up front, `gauge.set` / `counter.add`
per series.

Figures (each lens against raw, measured in the same run):

a. One interval: every series recorded once, then one `get_metrics_data()`. <= 1.0.
b. Its collection alone, in steady state (the SDK knows every series from earlier
   intervals; lens's collection includes handing its buffer over). <= 1.3.
c. The first collection of new series: fresh providers each time, every series recorded
   once (untimed), then the timed first `get_metrics_data()`. <= 1.5.
d. A steady collection of `--one-instrument` series (default 10k) on a single counter:
   past the 2000 series per instrument that opentelemetry-sdk 1.45.2 and newer keep by
   default, as `nemo.lens.instruments._cardinality` documents (lens lifts that limit on
   its reader). The run reports how many series the installed SDK kept under the table
   (1.23.0 and 1.45.1 have no such limit, so there both sides keep them all). <= 1.5.
e. lens's buffer memory per series per interval, at each count from 1k to 10k: what
   `tracemalloc` sees allocated by one interval's records in steady state, lens minus
   raw, per series. <= 0.4 kB. Beside it, the SDK's own memory per series (a fresh
   provider's first interval and collection, the attribute dicts it keeps included).
f. Resident memory at the largest count: each side in a fresh interpreter of its own
   (the raw one never imports lens) records every series for two intervals, each ended
   by a collection, attribute dicts built per call (in the second, lens's buffer and the
   SDK both hold every series); peak RSS (VmHWM), and its growth over the RSS right after
   setup, lens / raw (reported).
g. The final flush at shutdown with the largest count's series buffered and new to the
   SDK (the worst case): `handle.shutdown()` of a pipeline whose reader is a periodic
   reader (one hour apart) exporting to an exporter that counts points. PASS when every
   round exported every point within lens's default 5 s shutdown budget (median wall
   time); the CPU time against the raw provider's `shutdown()` is reported.

Figures a to d alternate lens and raw rounds (which side goes first alternates too), the
garbage collector off inside a round, and take the median of the per-round ratios. Times
are the process's CPU time (`--clock cpu`, the default; every thread counted), which
leaves out other processes on a shared machine; `--clock wall` takes wall time. Counts
above 10k run `--large-rounds` rounds instead of `--rounds`.

Run: `python benchmarks/bench_series.py` (or `nox -s bench`); `--series 10,1k` for a
quick run. It always exits 0 and prints PASS or MISS per target.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness import Row, Timing, print_report, print_versions, ratio_row, verdict
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    InMemoryMetricReader,
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)

from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    TelemetryHandle,
    record_metrics,
    register_metric_group,
    setup_telemetry,
)

GROUP = "bench_series"
ONE_GROUP = "bench_series_one"
SPECS = [
    MetricSpec("g", "bench.series.gauge", "gauge", "1", "bench gauge"),
    MetricSpec("c", "bench.series.counter", "counter", "1", "bench counter"),
]
ONE_SPECS = [MetricSpec("c", "bench.series.one", "counter", "1", "bench counter")]
#: What each kind records: a gauge's value is set, a counter's added.
RECORD = {"gauge": "set", "counter": "add"}
CREATE = {"gauge": "create_gauge", "counter": "create_counter"}
VALUES = {"gauge": 0.5, "counter": 1}

#: Series records per timed round of figures a, b and d (at least one interval).
RECORDS_PER_ROUND = 10_000
#: Series first collected per timed round of figure c (at least one fresh pipeline, at
#: most `PIPELINES_PER_ROUND`).
FIRST_SERIES_PER_ROUND = 2_000
PIPELINES_PER_ROUND = 5
#: Figure e's counts: per-series figures are steady from 1k, and tracemalloc makes 100k slow.
MEMORY_COUNTS = range(1_000, 10_001)
#: The SDK's per-instrument limit on opentelemetry-sdk 1.45.2 and newer.
SDK_DEFAULT_LIMIT = 2000
#: lens's default shutdown budget, which figure g must fit in.
SHUTDOWN_BUDGET_S = 5.0
#: Figure g's periodic reader never exports on its own during a round.
NEVER_MS = 3_600_000
#: How long figure g waits for the export a shutdown abandoned at its deadline.
ABANDONED_WAIT_S = 60.0
#: Intervals the resident-memory children record.
RSS_INTERVALS = 2

CLOCKS: dict[str, Callable[[], int]] = {"wall": time.perf_counter_ns, "cpu": time.process_time_ns}


# --- what is recorded -----------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Which series each key records: (spec, attribute sets), every set recorded once."""

    group: str
    entries: tuple[tuple[MetricSpec, tuple[dict[str, object], ...]], ...]

    @property
    def series(self) -> int:
        return sum(len(sets) for _, sets in self.entries)


def layout(group: str, specs: Sequence[MetricSpec], count: int) -> Layout:
    """`count` series spread evenly over `specs`, shard numbers unique across them."""
    entries = []
    for index, spec in enumerate(specs):
        shards = range(index, count, len(specs))
        sets: tuple[dict[str, object], ...] = tuple({"shard": shard} for shard in shards)
        entries.append((spec, sets))
    return Layout(group, tuple(entries))


# --- the two sides --------------------------------------------------------------------------


class LensSide:
    """One lens pipeline over an `InMemoryMetricReader` (or `reader`), traces off."""

    name = "lens"

    def __init__(self, plan: Layout, reader: MetricReader | None = None) -> None:
        self.plan = plan
        self.reader = InMemoryMetricReader() if reader is None else reader
        self.handle: TelemetryHandle = setup_telemetry(
            NemoLensConfig(enabled=True, service_name="bench-series", traces_enabled=False),
            metric_reader=self.reader,
        )
        if not self.handle.is_exporting:
            raise RuntimeError("setup_telemetry returned a handle that does not export")
        meter = self.handle.meter
        record = record_metrics
        group = plan.group
        calls = [({spec.key: VALUES[spec.kind]}, sets) for spec, sets in plan.entries]

        def record_all() -> None:
            for values, sets in calls:
                for attributes in sets:
                    record(meter, group, values, attributes=attributes)

        self.record = record_all

    def collect(self) -> Any:
        return self.reader.get_metrics_data()  # type: ignore[attr-defined]  # in-memory only

    def close(self) -> None:
        self.handle.shutdown()


class RawSide:
    """The hand-written side: a provider, instruments created up front, one call per series."""

    name = "raw"

    def __init__(self, plan: Layout, reader: MetricReader | None = None) -> None:
        self.plan = plan
        self.reader = InMemoryMetricReader() if reader is None else reader
        self.provider = MeterProvider(metric_readers=[self.reader], shutdown_on_exit=False)
        meter = self.provider.get_meter("bench.raw")
        calls = []
        for spec, sets in plan.entries:
            instrument = getattr(meter, CREATE[spec.kind])(
                spec.name, unit=spec.unit, description=spec.description
            )
            calls.append((getattr(instrument, RECORD[spec.kind]), VALUES[spec.kind], sets))

        def record_all() -> None:
            for method, value, sets in calls:
                for attributes in sets:
                    method(value, attributes)

        self.record = record_all

    def collect(self) -> Any:
        return self.reader.get_metrics_data()  # type: ignore[attr-defined]  # in-memory only

    def close(self) -> None:
        self.provider.shutdown()


Side = LensSide | RawSide


def point_count(data: MetricsData | None) -> int:
    """The number of data points in one collection."""
    if data is None:
        return 0
    return sum(
        len(metric.data.data_points)
        for resource_metrics in data.resource_metrics
        for scope in resource_metrics.scope_metrics
        for metric in scope.metrics
    )


# --- timing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Split:
    """One side's round: mean ns of one interval's records and of its collection."""

    record_ns: float
    collect_ns: float

    @property
    def interval_ns(self) -> float:
        return self.record_ns + self.collect_ns


def interval_round(side: Side, number: int, clock: Callable[[], int]) -> Split:
    """`number` intervals of `side`: every series recorded, then one collection."""
    recording = collecting = 0
    gc.disable()
    try:
        for _ in range(number):
            start = clock()
            side.record()
            middle = clock()
            side.collect()
            recording += middle - start
            collecting += clock() - middle
    finally:
        gc.enable()
    return Split(recording / number, collecting / number)


def sides_in_turn(round_number: int, lens: Any, raw: Any) -> list[tuple[str, Any]]:
    """Both sides, raw first in even rounds and lens first in odd ones."""
    pair = [("raw", raw), ("lens", lens)]
    return pair if round_number % 2 == 0 else pair[::-1]


def timing_of(lens_ns: list[float], raw_ns: list[float]) -> Timing:
    """Medians of each side and of the per-round ratios."""
    ratios = [lens / raw for lens, raw in zip(lens_ns, raw_ns, strict=True)]
    return Timing(statistics.median(lens_ns), statistics.median(raw_ns), statistics.median(ratios))


def steady_intervals(
    lens: LensSide, raw: RawSide, rounds: int, number: int, clock: Callable[[], int]
) -> tuple[Timing, Timing]:
    """Figures a and b: (whole interval, its collection), after one untimed interval each."""
    for side in (raw, lens):
        side.record()
        side.collect()
    splits: dict[str, list[Split]] = {"lens": [], "raw": []}
    for round_number in range(rounds):
        for name, side in sides_in_turn(round_number, lens, raw):
            splits[name].append(interval_round(side, number, clock))
            gc.collect()
    whole = timing_of(
        [split.interval_ns for split in splits["lens"]],
        [split.interval_ns for split in splits["raw"]],
    )
    collection = timing_of(
        [split.collect_ns for split in splits["lens"]],
        [split.collect_ns for split in splits["raw"]],
    )
    return whole, collection


def first_collections(plan: Layout, rounds: int, number: int, clock: Callable[[], int]) -> Timing:
    """Figure c: mean ns of a fresh pipeline's first collection of every series."""
    means: dict[str, list[float]] = {"lens": [], "raw": []}
    for round_number in range(rounds):
        for name, build in sides_in_turn(round_number, LensSide, RawSide):
            total = 0
            for _ in range(number):
                side = build(plan)
                side.record()
                gc.disable()
                try:
                    start = clock()
                    side.collect()
                    total += clock() - start
                finally:
                    gc.enable()
                side.close()
            means[name].append(total / number)
            gc.collect()
    return timing_of(means["lens"], means["raw"])


def rounds_for(count: int, args: argparse.Namespace) -> int:
    rounds: int = args.rounds if count <= 10_000 else args.large_rounds
    return rounds


def unit_of(ns: float) -> str:
    return "us" if ns < 1e6 else "ms"


def timed_row(figure: str, timing: Timing, target: float) -> Row:
    return ratio_row(figure, timing, target, unit_of(max(timing.candidate_ns, timing.baseline_ns)))


def count_label(count: int) -> str:
    return f"{count // 1000}k" if count >= 1000 and count % 1000 == 0 else str(count)


# --- figure e: memory per series ------------------------------------------------------------


def traced_bytes(action: Callable[[], object]) -> int:
    """The bytes `action` leaves allocated, as `tracemalloc` sees them."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = action()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return after - before


def buffer_bytes(lens: LensSide, raw: RawSide) -> float:
    """lens's buffered interval minus raw's recorded one, in bytes per series (steady:
    both sides have recorded and collected every series before)."""
    lens_bytes = traced_bytes(lens.record)
    lens.collect()
    raw_bytes = traced_bytes(raw.record)
    raw.collect()
    return (lens_bytes - raw_bytes) / lens.plan.series


def sdk_series_bytes(count: int) -> float:
    """Bytes per series a fresh SDK provider keeps after its first interval of `count` new
    series, attribute dicts built per call (as a loop builds them)."""
    side = RawSide(layout(GROUP, SPECS, 0))
    provider = side.provider
    meter = provider.get_meter("bench.sdk-memory")
    gauge = meter.create_gauge("bench.sdk.gauge")
    counter = meter.create_counter("bench.sdk.counter")

    def first_interval() -> None:
        for shard in range(0, count, 2):
            gauge.set(0.5, {"shard": shard})
        for shard in range(1, count, 2):
            counter.add(1, {"shard": shard})
        side.collect()

    kept = traced_bytes(first_interval)
    side.close()
    return kept / count


def memory_row(count: int, lens: LensSide, raw: RawSide) -> Row:
    per_series = buffer_bytes(lens, raw)
    sdk = sdk_series_bytes(count)
    return Row(
        f"(e) lens buffer memory per series, {count_label(count)} series",
        f"{per_series / 1000:.3f} kB",
        f"SDK {sdk / 1000:.3f} kB",
        f"{per_series / sdk:.3f}",
        "<= 0.4 kB",
        verdict(per_series <= 400),
    )


# --- figure f: resident memory in children --------------------------------------------------

#: Shared by both children: the RSS reader and the report (stdlib only).
_CHILD_COMMON = """
import json, sys
count, intervals = int(sys.argv[1]), int(sys.argv[2])
def status_kb(field):
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across exec.
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0
def report(after_setup):
    print(json.dumps({
        "after_setup_kb": after_setup, "peak_kb": status_kb("VmHWM"), "end_kb": status_kb("VmRSS")
    }))
"""

_RAW_CHILD = (
    _CHILD_COMMON
    + """
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
reader = InMemoryMetricReader()
provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
meter = provider.get_meter("bench.raw")
gauge = meter.create_gauge("bench.series.gauge", unit="1", description="bench gauge")
counter = meter.create_counter("bench.series.counter", unit="1", description="bench counter")
after_setup = status_kb("VmRSS")
for _ in range(intervals):
    for shard in range(0, count, 2):
        gauge.set(0.5, {"shard": shard})
    for shard in range(1, count, 2):
        counter.add(1, {"shard": shard})
    reader.get_metrics_data()
report(after_setup)
provider.shutdown()
"""
)

_LENS_CHILD = (
    _CHILD_COMMON
    + """
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from nemo.lens import MetricSpec, NemoLensConfig, record_metrics, register_metric_group
from nemo.lens import setup_telemetry
register_metric_group("bench_series", [
    MetricSpec("g", "bench.series.gauge", "gauge", "1", "bench gauge"),
    MetricSpec("c", "bench.series.counter", "counter", "1", "bench counter"),
])
reader = InMemoryMetricReader()
handle = setup_telemetry(
    NemoLensConfig(enabled=True, service_name="bench-series", traces_enabled=False),
    metric_reader=reader,
)
meter = handle.meter
gauge_value, counter_value = {"g": 0.5}, {"c": 1}
after_setup = status_kb("VmRSS")
for _ in range(intervals):
    for shard in range(0, count, 2):
        record_metrics(meter, "bench_series", gauge_value, attributes={"shard": shard})
    for shard in range(1, count, 2):
        record_metrics(meter, "bench_series", counter_value, attributes={"shard": shard})
    reader.get_metrics_data()
report(after_setup)
handle.shutdown()
"""
)


def child_memory(program: str, count: int) -> dict[str, int]:
    """Run one resident-memory child; its report (KiB)."""
    done = subprocess.run(
        [sys.executable, "-c", program, str(count), str(RSS_INTERVALS)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"child exited {done.returncode}: {done.stderr.strip()[-500:]}")
    report: dict[str, int] = json.loads(lines[-1])
    return report


def rss_rows(count: int) -> list[Row]:
    """Figure f: each side in its own interpreter, raw first."""
    try:
        raw = child_memory(_RAW_CHILD, count)
        lens = child_memory(_LENS_CHILD, count)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return [
            Row(f"(f) RSS, {count_label(count)} series", "failed", "-", "-", "report", str(exc))
        ]

    def mib(kb: float) -> str:
        return f"{kb / 1024:,.1f} MiB"

    raw_growth = raw["peak_kb"] - raw["after_setup_kb"]
    lens_growth = lens["peak_kb"] - lens["after_setup_kb"]
    label = count_label(count)
    return [
        Row(
            f"(f) peak RSS, {label} series x {RSS_INTERVALS} intervals",
            mib(lens["peak_kb"]),
            mib(raw["peak_kb"]),
            f"{lens['peak_kb'] / raw['peak_kb']:.3f}",
            "report",
            "-",
        ),
        Row(
            f"(f) its growth over the RSS after setup, {label} series",
            mib(lens_growth),
            mib(raw_growth),
            f"{lens_growth / raw_growth:.3f}" if raw_growth > 0 else "-",
            "report",
            "-",
        ),
    ]


# --- figure g: the final flush at shutdown --------------------------------------------------


class CountingExporter(MetricExporter):
    """Counts the points it is given; exports nowhere."""

    def __init__(self) -> None:
        super().__init__()
        self.points = 0

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        self.points += point_count(metrics_data)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


@dataclass(frozen=True)
class Shutdown:
    """One timed shutdown: wall and CPU seconds, and the points exported by its end."""

    wall_s: float
    cpu_s: float
    points: int


def timed_shutdown(build: Callable[..., Side], plan: Layout) -> Shutdown:
    exporter = CountingExporter()
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=NEVER_MS)
    side = build(plan, reader)
    side.record()
    wall, cpu = time.perf_counter(), time.process_time()
    side.close()
    shutdown = Shutdown(time.perf_counter() - wall, time.process_time() - cpu, exporter.points)
    # A shutdown past its budget left its export running on a daemon thread: let it end
    # before the next round, whose CPU time it would otherwise share.
    until = time.monotonic() + ABANDONED_WAIT_S
    while exporter.points < plan.series and time.monotonic() < until:
        time.sleep(0.05)
    return shutdown


def shutdown_row(count: int, rounds: int) -> tuple[Row, str]:
    """Figure g: the final flush at shutdown, lens's handle against the raw provider."""
    plan = layout(GROUP, SPECS, count)
    runs: dict[str, list[Shutdown]] = {"lens": [], "raw": []}
    for round_number in range(rounds):
        for name, build in sides_in_turn(round_number, LensSide, RawSide):
            runs[name].append(timed_shutdown(build, plan))
    lens, raw = runs["lens"], runs["raw"]
    lens_wall = statistics.median(run.wall_s for run in lens)
    lens_cpu = statistics.median(run.cpu_s for run in lens)
    raw_cpu = statistics.median(run.cpu_s for run in raw)
    ratio = statistics.median(
        mine.cpu_s / theirs.cpu_s for mine, theirs in zip(lens, raw, strict=True)
    )
    complete = all(run.points == count for run in lens)
    row = Row(
        f"(g) final flush at shutdown, {count_label(count)} buffered new series",
        f"{lens_wall:.2f} s wall, {lens_cpu:.2f} s cpu",
        f"{raw_cpu:.2f} s cpu",
        f"{ratio:.3f}",
        f"<= {SHUTDOWN_BUDGET_S:g} s, all exported",
        verdict(complete and lens_wall <= SHUTDOWN_BUDGET_S),
    )
    each = ", ".join(f"{run.points:,} in {run.wall_s:.2f} s" for run in lens)
    note = f"(g) points lens's shutdown exported of {count:,}, per round: {each}"
    return row, note


# --- main -----------------------------------------------------------------------------------


def series_rows(count: int, args: argparse.Namespace, clock: Callable[[], int]) -> list[Row]:
    """Figures a, b, c (and e, at `MEMORY_COUNTS`) at one series count."""
    plan = layout(GROUP, SPECS, count)
    rounds = rounds_for(count, args)
    number = max(1, RECORDS_PER_ROUND // count)
    label = count_label(count)
    lens, raw = LensSide(plan), RawSide(plan)
    try:
        whole, collection = steady_intervals(lens, raw, rounds, number, clock)
        memory = memory_row(count, lens, raw) if count in MEMORY_COUNTS else None
    finally:
        lens.close()
        raw.close()
        del lens, raw
        gc.collect()
    pipelines = max(1, min(PIPELINES_PER_ROUND, FIRST_SERIES_PER_ROUND // count))
    first = first_collections(plan, rounds, pipelines, clock)
    rows = [
        timed_row(f"(a) one interval, {label} series: records + collect", whole, 1.0),
        timed_row(f"(b) steady collection, {label} series", collection, 1.3),
        timed_row(f"(c) first collection of {label} new series", first, 1.5),
    ]
    if memory is not None:
        rows.append(memory)
    return rows


def one_instrument_rows(
    count: int, args: argparse.Namespace, clock: Callable[[], int]
) -> tuple[Row, str]:
    """Figure d: a steady collection of `count` series on one counter."""
    plan = layout(ONE_GROUP, ONE_SPECS, count)
    lens, raw = LensSide(plan), RawSide(plan)
    try:
        lens.record()
        raw.record()
        kept = {"lens": point_count(lens.collect()), "raw": point_count(raw.collect())}
        _, collection = steady_intervals(
            lens, raw, rounds_for(count, args), max(1, RECORDS_PER_ROUND // count), clock
        )
    finally:
        lens.close()
        raw.close()
    limited = kept["raw"] < count
    what = (
        f"the installed SDK kept {kept['raw']:,} of {count:,} series on one instrument"
        + (" (its own limit)" if limited else " (no per-instrument limit in this release)")
        + f"; lens kept {kept['lens']:,}"
    )
    row = timed_row(
        f"(d) steady collection, {count_label(count)} series on one counter",
        collection,
        1.5,
    )
    return row, f"(d) {what}; lens documents {SDK_DEFAULT_LIMIT} as 1.45.2+'s default"


def parse_count(text: str) -> int:
    text = text.strip().lower()
    return int(text[:-1]) * 1000 if text.endswith("k") else int(text)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--series",
        type=lambda text: sorted({parse_count(part) for part in text.split(",") if part}),
        default=[10, 1000, 10_000, 100_000],
        help="series counts, comma-separated (1k = 1000); default 10,1k,10k,100k",
    )
    parser.add_argument("--rounds", type=int, default=9, help="alternating rounds per figure")
    parser.add_argument(
        "--large-rounds", type=int, default=3, help="rounds for counts above 10k (and g)"
    )
    parser.add_argument(
        "--one-instrument", type=parse_count, default=10_000, help="figure d's series"
    )
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="cpu", help="what a round's time is"
    )
    parser.add_argument("--skip-children", action="store_true", help="leave figure f out")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print_versions()
    print(f"clock: {args.clock}; series counts: {', '.join(map(count_label, args.series))}")
    register_metric_group(GROUP, SPECS)
    register_metric_group(ONE_GROUP, ONE_SPECS)
    clock = CLOCKS[args.clock]
    started = time.perf_counter()
    rows: list[Row] = []
    notes: list[str] = []
    for count in args.series:
        rows += series_rows(count, args, clock)
    row, note = one_instrument_rows(args.one_instrument, args, clock)
    rows.append(row)
    notes.append(note)
    largest = max(args.series)
    if not args.skip_children:
        rows += rss_rows(largest)
    row, note = shutdown_row(largest, args.large_rounds)
    rows.append(row)
    notes.append(note)
    print_report(rows, notes)
    print(f"run time: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
