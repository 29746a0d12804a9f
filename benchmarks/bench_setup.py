"""Benchmark: setting up and exporting through lens against the same pipeline built by hand.

The hand-written side ("raw") builds what lens's setup builds for the same inputs: a
`Resource.create({"service.name": ...})`, a `MeterProvider` over the reader, and a
`TracerProvider` whose `BatchSpanProcessor` (sized as lens sizes its own: a 65,536-span
queue, 2,048-span batches) exports to the span exporter; both built with
`shutdown_on_exit=False`, as lens builds its own, and neither installed as a global.
The lens side is `setup_telemetry(NemoLensConfig(enabled=True, ...), ...)` and
`handle.shutdown()`.

Figures (each lens against raw, measured in the same run):

a. Setup and shutdown with an `InMemoryMetricReader` and an `InMemorySpanExporter`:
   - warm: in this process, lens's modules and the SDK already imported (after one
     untimed setup of each side), alternating rounds. <= 1.5.
   - first in a process: in fresh interpreters that have imported the SDK (and lens's
     public names), the first setup and shutdown, timed inside the child on its CPU
     clock; lens's setup imports its SDK modules then. Median of `--cold-runs`. <= 1.5.
b. A whole fresh `python -c` that imports and sets up and shuts down (lens), against one
   that imports the SDK and builds and shuts down the same (raw): the child's CPU time
   (user + system, `RUSAGE_CHILDREN` deltas), interpreter start and exit included. The
   two kinds alternate; median of the per-pair ratios over `--cold-runs` pairs. The
   children read bytecode, as an installed package does: they write and read it under
   `PYTHONPYCACHEPREFIX` (this run's own directory unless one is set), each kind run once
   untimed first. <= 1.05.
c. Export CPU: `--steps` steps of the bench_step step (5 nested spans, then 40 values: 20
   gauges, 10 histograms, 8 counters, 2 up-down counters), then one timed flush that
   collects, encodes and sends everything over OTLP/HTTP (protobuf) to a real receiver on
   127.0.0.1 (`tests/support/lens_receivers.py`, in a process of its own so that its
   decoding is not counted): `handle.force_flush()` of a setup whose exporter comes from
   `OTEL_EXPORTER_OTLP_*`, against `force_flush()` of a `MeterProvider` (periodic reader)
   and a `TracerProvider` (batch processor) whose OTLP/HTTP exporters are built by hand
   for the same endpoint. Neither exports on its own: the interval and schedule delay
   are an hour. Alternating rounds, the process's CPU time (every thread: the batch
   processors' export included). <= 1.05.

Times are the process's CPU time (`--clock cpu`, the default), which leaves out other
processes on a shared machine; `--clock wall` takes wall time for a and c (b is always
the child's CPU time).

Run: `python benchmarks/bench_setup.py` (or `nox -s bench`). It always exits 0 and prints
PASS or MISS per target.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import harness
from bench_step import SPAN_GROUPS, STEP_GROUP, STEP_SPANS, STEP_SPECS, STEP_VALUES, direct_calls
from harness import Row, Timing, print_report, print_versions, ratio_row, verdict
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    TelemetryHandle,
    managed_span,
    record_metrics,
    register_metric_group,
    setup_telemetry,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
SUPPORT = ROOT / "packages" / "lens-core" / "tests" / "support"
SERVICE = "bench-setup"
#: lens's batch span processor sizes (`nemo.lens._otel_env.DEFAULT_BSP`), given to raw's too.
MAX_QUEUE_SIZE = 65536
MAX_EXPORT_BATCH_SIZE = 2048
#: Figure c's pipelines never export on their own during a round (one hour, in ms).
NEVER_MS = 3_600_000
CLOCKS: dict[str, Callable[[], int]] = {"wall": time.perf_counter_ns, "cpu": time.process_time_ns}


# --- figure a, warm ------------------------------------------------------------------------


def lens_setup_and_shutdown() -> None:
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, service_name=SERVICE),
        metric_reader=InMemoryMetricReader(),
        span_exporter=InMemorySpanExporter(),
    )
    handle.shutdown()


def raw_setup_and_shutdown() -> None:
    sdk_resource = Resource.create({"service.name": SERVICE})
    meter_provider = MeterProvider(
        resource=sdk_resource, metric_readers=[InMemoryMetricReader()], shutdown_on_exit=False
    )
    tracer_provider = TracerProvider(resource=sdk_resource, shutdown_on_exit=False)
    tracer_provider.add_span_processor(
        BatchSpanProcessor(
            InMemorySpanExporter(),
            max_queue_size=MAX_QUEUE_SIZE,
            max_export_batch_size=MAX_EXPORT_BATCH_SIZE,
        )
    )
    tracer_provider.shutdown()
    meter_provider.shutdown()


def collect_garbage(side: str) -> None:
    """Between rounds: the setups' garbage goes, untimed."""
    gc.collect()


def warm_row(args: argparse.Namespace, clock: Callable[[], int]) -> Row:
    lens_setup_and_shutdown()  # the first setup imports lens's SDK modules
    raw_setup_and_shutdown()
    timing = harness.alternate(
        lens_setup_and_shutdown,
        raw_setup_and_shutdown,
        rounds=args.rounds,
        number=args.number,
        clock=clock,
        after_round=collect_garbage,
    )
    return ratio_row("(a) warm setup + shutdown (in-memory reader, exporter)", timing, 1.5, "ms")


# --- figures a (first in a process) and b: fresh interpreters --------------------------------

#: Both children import the same SDK modules first; the report is the child's CPU clock.
_CHILD_IMPORTS = """
import json, time
started = time.process_time()
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
"""

_CHILD_REPORT = """
done = time.process_time()
print(json.dumps({"startup": started, "imports": imported - started, "setup": done - imported}))
"""

_RAW_CHILD = (
    _CHILD_IMPORTS
    + """
imported = time.process_time()
sdk_resource = Resource.create({"service.name": "bench-setup"})
meter_provider = MeterProvider(
    resource=sdk_resource, metric_readers=[InMemoryMetricReader()], shutdown_on_exit=False
)
tracer_provider = TracerProvider(resource=sdk_resource, shutdown_on_exit=False)
tracer_provider.add_span_processor(
    BatchSpanProcessor(InMemorySpanExporter(), max_queue_size=65536, max_export_batch_size=2048)
)
tracer_provider.shutdown()
meter_provider.shutdown()
"""
    + _CHILD_REPORT
)

_LENS_CHILD = (
    _CHILD_IMPORTS
    + """
from nemo.lens import NemoLensConfig, setup_telemetry
imported = time.process_time()
handle = setup_telemetry(
    NemoLensConfig(enabled=True, service_name="bench-setup"),
    metric_reader=InMemoryMetricReader(),
    span_exporter=InMemorySpanExporter(),
)
handle.shutdown()
"""
    + _CHILD_REPORT
)


@contextlib.contextmanager
def bytecode_environment() -> Iterator[dict[str, str]]:
    """The children's environment: bytecode written and read (under this run's own
    `PYTHONPYCACHEPREFIX` unless one is set), as in an installed package."""
    environment = dict(os.environ)
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    own = None
    if not environment.get("PYTHONPYCACHEPREFIX"):
        own = tempfile.mkdtemp(prefix="bench-setup-pycache-")
        environment["PYTHONPYCACHEPREFIX"] = own
    try:
        yield environment
    finally:
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_child(program: str, environment: dict[str, str]) -> tuple[float, dict[str, float]]:
    """One fresh interpreter: its whole CPU time (s) and what it measured itself."""
    before = children_cpu_s()
    done = subprocess.run(
        [sys.executable, "-c", program],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    spent = children_cpu_s() - before
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"child exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return spent, json.loads(lines[-1])


def cold_rows(args: argparse.Namespace) -> list[Row]:
    """Figure a (first setup in a process) and figure b, from the same children."""
    programs = {"raw": _RAW_CHILD, "lens": _LENS_CHILD}
    whole: dict[str, list[float]] = {"raw": [], "lens": []}
    setup: dict[str, list[float]] = {"raw": [], "lens": []}
    inside: dict[str, list[dict[str, float]]] = {"raw": [], "lens": []}
    try:
        with bytecode_environment() as environment:
            for program in programs.values():
                run_child(program, environment)  # writes the bytecode the timed runs read
            for run in range(args.cold_runs):
                order = ["raw", "lens"] if run % 2 == 0 else ["lens", "raw"]
                for side in order:
                    spent, measured = run_child(programs[side], environment)
                    whole[side].append(spent)
                    setup[side].append(measured["setup"])
                    inside[side].append(measured)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return [Row("(a, b) fresh interpreters", "failed", "-", "-", "-", str(exc)[:200])]

    def timing(samples: dict[str, list[float]]) -> Timing:
        ratios = [
            mine / theirs for mine, theirs in zip(samples["lens"], samples["raw"], strict=True)
        ]
        return Timing(
            statistics.median(samples["lens"]) * 1e9,
            statistics.median(samples["raw"]) * 1e9,
            statistics.median(ratios),
        )

    return [
        ratio_row(
            "(a) first setup + shutdown in a fresh process (SDK imported)",
            timing(setup),
            1.5,
            "ms",
        ),
        ratio_row(
            "(b) fresh python -c: import, set up, shut down (child CPU)", timing(whole), 1.05, "ms"
        ),
    ]


def cold_note(args: argparse.Namespace) -> str:
    return (
        f"(a, b) {args.cold_runs} children of each kind, alternating; lens's child also "
        "imports NemoLensConfig and setup_telemetry before its timed setup"
    )


# --- figure c: export CPU through OTLP/HTTP --------------------------------------------------

_RECEIVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from lens_receivers import OtlpReceiver
receiver = OtlpReceiver("http")
print(receiver.port, flush=True)
sys.stdin.read()
received = receiver.received
print(json.dumps({
    "spans": received.span_count(),
    "trace_requests": received.trace_requests,
    "metric_requests": received.metric_requests,
}), flush=True)
receiver.close()
"""


class Receiver:
    """The OTLP/HTTP receiver, in a process of its own; `finish()` returns what it got."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _RECEIVER, str(SUPPORT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.endpoint = f"http://127.0.0.1:{int(self.process.stdout.readline())}"

    def finish(self) -> dict[str, int]:
        output, _ = self.process.communicate("", timeout=60)
        report: dict[str, int] = json.loads(output.strip().splitlines()[-1])
        return report


class RawOtlp:
    """The hand-written pipeline: OTLP/HTTP exporters built for `endpoint`."""

    def __init__(self, endpoint: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        sdk_resource = Resource.create({"service.name": SERVICE})
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics"), export_interval_millis=NEVER_MS
        )
        self.meter_provider = MeterProvider(
            resource=sdk_resource, metric_readers=[reader], shutdown_on_exit=False
        )
        self.meter = self.meter_provider.get_meter("bench.raw")
        self.tracer_provider = TracerProvider(resource=sdk_resource, shutdown_on_exit=False)
        self.tracer_provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"),
                schedule_delay_millis=NEVER_MS,
                max_queue_size=MAX_QUEUE_SIZE,
                max_export_batch_size=MAX_EXPORT_BATCH_SIZE,
            )
        )
        self.tracer = self.tracer_provider.get_tracer("bench.raw")
        self._instruments: dict[str, Any] = {}

    def instrument(self, spec: MetricSpec) -> Any:
        """The instrument of `spec`, created once (what `direct_calls` records on)."""
        found = self._instruments.get(spec.name)
        if found is None:
            create = getattr(self.meter, f"create_{spec.kind}")
            found = create(spec.name, unit=spec.unit, description=spec.description)
            self._instruments[spec.name] = found
        return found

    def flush(self) -> bool:
        return bool(self.meter_provider.force_flush()) & bool(self.tracer_provider.force_flush())

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def raw_step(raw: RawOtlp) -> Callable[[], None]:
    """5 nested spans, then the 40 values as 40 direct calls."""
    start = raw.tracer.start_as_current_span
    (_, s0), (_, s1), (_, s2), (_, s3), (_, s4) = STEP_SPANS
    record = direct_calls(raw, STEP_SPECS, STEP_VALUES)  # type: ignore[arg-type]  # duck

    def run() -> None:
        with start(s0), start(s1), start(s2), start(s3), start(s4):
            pass
        record()

    return run


def lens_step(handle: TelemetryHandle) -> Callable[[], None]:
    """5 nested `managed_span`, then the 40 values in one `record_metrics`."""
    (g0, s0), (g1, s1), (g2, s2), (g3, s3), (g4, s4) = STEP_SPANS
    meter = handle.meter
    values: dict[str, Any] = STEP_VALUES
    span = managed_span

    def run() -> None:
        with span(g0, s0), span(g1, s1), span(g2, s2), span(g3, s3), span(g4, s4):
            pass
        record_metrics(meter, STEP_GROUP, **values)

    return run


@contextlib.contextmanager
def otlp_environment(endpoint: str) -> Iterator[None]:
    """lens's exporters from the environment: OTLP/HTTP to `endpoint`, no export on its own."""
    settings = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_METRIC_EXPORT_INTERVAL": str(NEVER_MS),
        "OTEL_BSP_SCHEDULE_DELAY": str(NEVER_MS),
    }
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def flush_round(
    step: Callable[[], None], flush: Callable[[], bool], steps: int, clock: Callable[[], int]
) -> tuple[float, bool]:
    """`steps` steps (untimed), then one timed flush: its ns and whether it succeeded."""
    for _ in range(steps):
        step()
    gc.collect()
    gc.disable()
    try:
        start = clock()
        flushed = flush()
        return clock() - start, flushed
    finally:
        gc.enable()


def export_rows(args: argparse.Namespace, clock: Callable[[], int]) -> tuple[Row, str]:
    """Figure c: one flush after `args.steps` steps, lens's handle against raw's providers."""
    receiver = Receiver()
    raw: RawOtlp | None = None
    handle: TelemetryHandle | None = None
    times: dict[str, list[float]] = {"lens": [], "raw": []}
    failed = {"lens": 0, "raw": 0}
    try:
        with otlp_environment(receiver.endpoint):
            handle = setup_telemetry(
                NemoLensConfig(
                    enabled=True, service_name=SERVICE, span_groups=SPAN_GROUPS, exporter="otlp"
                )
            )
            raw = RawOtlp(receiver.endpoint)
        sides = {
            "lens": (lens_step(handle), handle.force_flush),
            "raw": (raw_step(raw), raw.flush),
        }
        for step, flush in sides.values():
            flush_round(step, flush, args.steps, clock)  # untimed: connections, first series
        for round_number in range(args.rounds):
            order = ["raw", "lens"] if round_number % 2 == 0 else ["lens", "raw"]
            for side in order:
                step, flush = sides[side]
                spent, flushed = flush_round(step, flush, args.steps, clock)
                times[side].append(spent)
                failed[side] += not flushed
    finally:
        if handle is not None:
            handle.shutdown()
        if raw is not None:
            raw.shutdown()
        got = receiver.finish()
    ratios = [mine / theirs for mine, theirs in zip(times["lens"], times["raw"], strict=True)]
    timing = Timing(
        statistics.median(times["lens"]),
        statistics.median(times["raw"]),
        statistics.median(ratios),
    )
    spans = (args.rounds + 1) * args.steps * len(STEP_SPANS)
    row = ratio_row(
        f"(c) export CPU: flush after {args.steps} steps (OTLP/HTTP)", timing, 1.05, "ms"
    )
    note = (
        f"(c) each flush: {args.steps * len(STEP_SPANS)} spans and {len(STEP_SPECS)} series; "
        f"receiver got {got['spans']:,} distinct spans of {2 * spans:,} sent, "
        f"{got['trace_requests']} trace and {got['metric_requests']} metric requests; "
        f"failed flushes: lens {failed['lens']}, raw {failed['raw']}"
    )
    return row, note


# --- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=41, help="alternating rounds, a and c")
    parser.add_argument("--number", type=int, default=5, help="setups per round, figure a")
    parser.add_argument("--cold-runs", type=int, default=15, help="children of each kind, a, b")
    parser.add_argument("--steps", type=int, default=50, help="steps per flush, figure c")
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="cpu", help="what a round's time is (a, c)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print_versions()
    print(f"clock: {args.clock}")
    register_metric_group(STEP_GROUP, STEP_SPECS)
    clock = CLOCKS[args.clock]
    started = time.perf_counter()
    rows = [warm_row(args, clock)]
    rows += cold_rows(args)
    notes = [cold_note(args)]
    try:
        row, note = export_rows(args, clock)
    except Exception as exc:  # a receiver that did not start: the other figures stand
        row = Row("(c) export CPU (OTLP/HTTP)", "failed", "-", "-", "<= 1.05", verdict(False))
        note = f"(c) failed: {type(exc).__name__}: {exc}"
    rows.append(row)
    notes.append(note)
    print_report(rows, notes)
    print(f"run time: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
