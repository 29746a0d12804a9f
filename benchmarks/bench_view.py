"""Benchmark: `lens view` on a large OTLP/JSON-lines file, against reading it with json.loads.

The script first writes (into a temporary directory, removed at the end) an
OTLP/JSON-lines file of `--size-mb` MB (default 200) shaped like a two-rank training job
exported through lens's console exporter or a Collector's file exporter: each rank (resource
attributes `service.name`, `host.name`, `process.pid`, `dl.rank` 0 and 1) exports every
second one metric request of 41 series (gauges, monotonic cumulative counters, up-down
sums, explicit-bucket histograms with the SDK's 15 default boundaries, a few attribute
sets each), and every 5 seconds one span request (one trace per training step: a root
step span with nested children, an occasional checkpoint that fails) and one log request
(a few records, most carrying the trace and span ids of a span). The lines of both ranks
are interleaved, as in a file both wrote to.

Figures (each side in a fresh interpreter, `--rounds` alternating rounds, baseline first;
medians reported):

1. Wall time of `python -m nemo.lens.cli view FILE -o REPORT`. Target: < 60 s at 200 MB.
2. The same against the floor any reader pays: a child that reads the same file line by
   line and `json.loads` every line (the median of the per-round ratios). <= 4.0. Its CPU
   time (user + system) is reported beside it.
3. Peak RSS of the `lens view` child against its peak on a 2 MB file of the same shape
   (what it costs whatever the size: the interpreter, its imports, Plotly's script, the
   page). <= 1.6: memory follows what the report draws, not the file's size. Reported
   beside it: the baseline child's peak.
4. The HTML report's size (Plotly's script inline is 4.8 MB of it). Target: < 10 MB.
5. What `lens view` says it read, against what the script wrote: metric points, spans and
   log records (the same numbers), and 0 malformed lines skipped.

Peak RSS is `ru_maxrss` of the child alone (`os.wait4`, KiB on Linux). Each child is
killed after `--timeout` seconds (a MISS). The whole run takes well under a minute at
200 MB on two cores (most of it in `lens view`).

Run: `python benchmarks/bench_view.py [--size-mb N]` (or `nox -s bench`). It always exits
0 and prints PASS or MISS per target.
"""

from __future__ import annotations

import abc
import argparse
import json
import math
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from harness import Row, Timing, print_table, print_versions, ratio_row

JSON = dict[str, Any]

#: 2023-11-14T22:13:20Z: where the generated run starts.
EPOCH_NS = 1_700_000_000 * 10**9
SECOND_NS = 10**9
#: The SDK's default explicit bucket boundaries (15 of them, 16 buckets).
DEFAULT_BOUNDS = (
    *(0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0),
    *(500.0, 750.0, 1000.0, 2500.0, 5000.0, 7500.0, 10000.0),
)
#: Seconds between two span (and log) exports of one rank: the batch processors' delay.
BATCH_EVERY_S = 5
RANKS = (0, 1)
COMPACT = (",", ":")
SMALL_FILE_MB = 2.0

BASELINE_SCRIPT = """\
import json, sys
lines = 0
with open(sys.argv[1], "rb") as file:
    for raw in file:
        json.loads(raw)
        lines += 1
print(f"read {lines} lines")
"""
COUNTS_LINE = re.compile(
    r"(\d+) metric points, (\d+) spans, (\d+) logs from .*\((\d+) malformed lines skipped\)"
)

# --- the file ------------------------------------------------------------------------------


def attribute(key: str, value: object) -> JSON:
    """One OTLP KeyValue, as protobuf's JSON mapping writes it (int64 as a string)."""
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": str(value)}}


def attributes(items: dict[str, object]) -> list[JSON]:
    return [attribute(key, value) for key, value in items.items()]


def trace_id(rng: random.Random) -> str:
    return f"{rng.getrandbits(128):032x}"


def span_id(rng: random.Random) -> str:
    return f"{rng.getrandbits(64):016x}"


@dataclass
class Written:
    """What the generator wrote: bytes, lines and records of each signal."""

    bytes: int = 0
    lines: int = 0
    points: int = 0
    spans: int = 0
    logs: int = 0


class Series(abc.ABC):
    """One data point of one metric of one rank: a dict reused every export, its numbers
    changed in place before the request holding it is encoded."""

    def __init__(self, point: JSON) -> None:
        self.point = point

    @abc.abstractmethod
    def update(self, time_ns: int, elapsed_s: float, rng: random.Random) -> None:
        """Move the point's numbers to `time_ns`, `elapsed_s` into the run."""


class Gauge(Series):
    def __init__(self, point: JSON, level: float, trend: float, noise: float) -> None:
        super().__init__(point)
        self.level, self.trend, self.noise = level, trend, noise

    def update(self, time_ns: int, elapsed_s: float, rng: random.Random) -> None:
        # Drifts by `trend` of its level over the first hour, then stays there, noisily.
        drift = 1.0 + self.trend * min(elapsed_s / 3600.0, 1.0)
        self.point["timeUnixNano"] = str(time_ns)
        self.point["asDouble"] = self.level * drift + self.noise * (rng.random() - 0.5)


class Counter(Series):
    """A monotonic sum, cumulative: its start time stays, its total only grows."""

    def __init__(self, point: JSON, per_second: int) -> None:
        super().__init__(point)
        self.per_second, self.total = per_second, 0

    def update(self, time_ns: int, elapsed_s: float, rng: random.Random) -> None:
        self.total += int(self.per_second * (0.8 + 0.4 * rng.random()))
        self.point["timeUnixNano"] = str(time_ns)
        self.point["asInt"] = str(self.total)


class UpDown(Series):
    """A non-monotonic sum: a queue length walking up and down within [0, limit]."""

    def __init__(self, point: JSON, limit: int) -> None:
        super().__init__(point)
        self.limit, self.value = limit, limit // 2

    def update(self, time_ns: int, elapsed_s: float, rng: random.Random) -> None:
        self.value = min(self.limit, max(0, self.value + rng.randint(-2, 2)))
        self.point["timeUnixNano"] = str(time_ns)
        self.point["asInt"] = str(self.value)


class Histogram(Series):
    """A cumulative explicit-bucket histogram. Values recorded since the last export wait in
    `pending` (the steps' span durations); a series nothing feeds draws its own."""

    def __init__(self, point: JSON, typical_ms: float, fed: bool) -> None:
        super().__init__(point)
        self.typical_ms, self.fed = typical_ms, fed
        self.pending: list[float] = []
        self.exemplar: tuple[str, str] | None = None
        self.counts = [0] * (len(DEFAULT_BOUNDS) + 1)
        self.count, self.total = 0, 0.0
        self.low, self.high = math.inf, -math.inf

    def record(self, value_ms: float) -> None:
        self.pending.append(value_ms)

    def update(self, time_ns: int, elapsed_s: float, rng: random.Random) -> None:
        values = self.pending
        if not self.fed:
            values = [self.typical_ms * rng.lognormvariate(0.0, 0.35) for _ in range(4)]
        for value in values:
            bucket = 0
            while bucket < len(DEFAULT_BOUNDS) and value > DEFAULT_BOUNDS[bucket]:
                bucket += 1
            self.counts[bucket] += 1
            self.count += 1
            self.total += value
            self.low, self.high = min(self.low, value), max(self.high, value)
        point = self.point
        point["timeUnixNano"] = str(time_ns)
        point["count"] = str(self.count)
        point["sum"] = self.total
        point["bucketCounts"] = [str(count) for count in self.counts]
        if self.count:
            point["min"], point["max"] = self.low, self.high
        if values and self.exemplar is not None:
            point["exemplars"] = [
                {
                    "timeUnixNano": str(time_ns - SECOND_NS // 3),
                    "asDouble": values[-1],
                    "spanId": self.exemplar[1],
                    "traceId": self.exemplar[0],
                }
            ]
        else:
            point.pop("exemplars", None)
        self.pending = []


@dataclass(frozen=True)
class MetricKind:
    """One metric the generated job declares: its kind, unit and attribute sets."""

    name: str
    kind: str  # gauge, counter, updown, histogram
    unit: str
    description: str
    attribute_sets: tuple[dict[str, object], ...]
    #: gauge: (level, trend, noise); counter: (per second,); updown: (limit,);
    #: histogram: (typical ms,)
    shape: tuple[float, ...]


PHASES: tuple[dict[str, object], ...] = ({"phase": "train"}, {"phase": "eval"})
GPUS: tuple[dict[str, object], ...] = tuple({"gpu.id": gpu} for gpu in range(4))
WORKERS: tuple[dict[str, object], ...] = tuple({"worker": worker} for worker in range(4))
NONE: tuple[dict[str, object], ...] = ({},)
#: 20 gauge series, 5 counters, 5 up-down sums, 11 histograms: 41 per rank.
METRICS = (
    MetricKind("train.loss", "gauge", "1", "Training loss.", PHASES, (2.4, -0.7, 0.2)),
    MetricKind("train.grad_norm", "gauge", "1", "Gradient norm.", NONE, (1.2, -0.3, 0.4)),
    MetricKind("train.learning_rate", "gauge", "1", "Learning rate.", NONE, (3e-4, -0.5, 0.0)),
    MetricKind("train.throughput", "gauge", "{token}/s", "Tokens/s.", NONE, (52e3, 0.05, 4e3)),
    MetricKind("gpu.utilization", "gauge", "%", "GPU busy.", GPUS, (91.0, 0.02, 8.0)),
    MetricKind("gpu.memory.used", "gauge", "By", "GPU memory.", GPUS, (61e9, 0.1, 2e9)),
    MetricKind("gpu.temperature", "gauge", "Cel", "GPU temperature.", GPUS, (64.0, 0.1, 3.0)),
    MetricKind(
        "rl.reward.mean",
        "gauge",
        "1",
        "Mean reward per environment.",
        ({"env": "math"}, {"env": "code"}, {"env": "chat"}),
        (0.3, 1.2, 0.1),
    ),
    MetricKind("train.tokens", "counter", "{token}", "Tokens processed.", PHASES, (52e3,)),
    MetricKind("train.samples", "counter", "{sample}", "Samples processed.", PHASES, (24.0,)),
    MetricKind("io.read", "counter", "By", "Bytes read by the data loader.", NONE, (3e8,)),
    MetricKind("dataloader.queue.size", "updown", "{batch}", "Batches ready.", WORKERS, (16,)),
    MetricKind("rollouts.in_flight", "updown", "{rollout}", "Rollouts running.", NONE, (64,)),
    MetricKind("train.step.duration", "histogram", "ms", "One step.", PHASES, (470.0,)),
    MetricKind("train.forward.duration", "histogram", "ms", "Forward pass.", NONE, (150.0,)),
    MetricKind("train.backward.duration", "histogram", "ms", "Backward pass.", NONE, (250.0,)),
    MetricKind("train.optimizer.duration", "histogram", "ms", "Optimizer step.", NONE, (30.0,)),
    MetricKind("data.load.duration", "histogram", "ms", "One batch loaded.", WORKERS, (20.0,)),
    MetricKind(
        "nccl.collective.duration",
        "histogram",
        "ms",
        "One collective.",
        ({"op": "allreduce"}, {"op": "allgather"}),
        (40.0,),
    ),
)
#: The histogram series the steps' spans feed, by (metric, its attribute set's index).
FED = {
    ("train.step.duration", 0),
    ("train.forward.duration", 0),
    ("train.backward.duration", 0),
    ("train.optimizer.duration", 0),
    ("nccl.collective.duration", 0),
    *(("data.load.duration", worker) for worker in range(4)),
}


def build_metric(metric: MetricKind, start_ns: int) -> tuple[JSON, dict[int, Series]]:
    """One OTLP metric (points reused each export) and its series by attribute set."""
    series: dict[int, Series] = {}
    points: list[JSON] = []
    for index, attribute_set in enumerate(metric.attribute_sets):
        point: JSON = {"attributes": attributes(attribute_set)} if attribute_set else {}
        if metric.kind != "gauge":
            point["startTimeUnixNano"] = str(start_ns)
        if metric.kind == "gauge":
            level, trend, noise = metric.shape
            series[index] = Gauge(point, level, trend, noise)
        elif metric.kind == "counter":
            series[index] = Counter(point, int(metric.shape[0]))
        elif metric.kind == "updown":
            series[index] = UpDown(point, int(metric.shape[0]))
        else:
            point["explicitBounds"] = list(DEFAULT_BOUNDS)
            fed = (metric.name, index) in FED
            series[index] = Histogram(point, metric.shape[0], fed)
        points.append(point)
    data: JSON = {"dataPoints": points}
    if metric.kind in ("counter", "updown", "histogram"):
        data["aggregationTemporality"] = 2
    if metric.kind == "counter":
        data["isMonotonic"] = True
    field_name = {"gauge": "gauge", "counter": "sum", "updown": "sum"}.get(metric.kind, metric.kind)
    otlp: JSON = {"name": metric.name, "description": metric.description, "unit": metric.unit}
    otlp[field_name] = data
    return otlp, series


@dataclass
class Step:
    """The spans of one training step, children before parents (the order they end)."""

    trace_id: str
    root_id: str
    spans: list[JSON] = field(default_factory=list)


class RankJob:
    """One rank of the generated job: its resource, its metric request (reused), its steps."""

    def __init__(self, rank: int, rng: random.Random, written: Written) -> None:
        self.rank, self.rng, self.written = rank, rng, written
        self.start_ns = EPOCH_NS + rank * 7_919_000  # the ranks start a few ms apart
        resource = {
            "attributes": attributes(
                {
                    "telemetry.sdk.language": "python",
                    "telemetry.sdk.name": "opentelemetry",
                    "telemetry.sdk.version": "1.45.1",
                    "service.instance.id": f"a41f0c9e77d2-rank{rank}",
                    "service.name": "trainer",
                    "service.version": "0.4.0",
                    "dl.rank": rank,
                    "dl.world_size": len(RANKS),
                    "nemo.run.id": "a41f0c9e77d2",
                    "host.name": "dgx-a100-017",
                    "process.pid": 41_207 + 13 * rank,
                }
            )
        }
        self.resource = resource
        self.scope = {"name": "trainer", "version": "0.4.0"}
        self.series: list[Series] = []
        self.histograms: dict[tuple[str, int], Histogram] = {}
        otlp_metrics = []
        for metric in METRICS:
            otlp, series = build_metric(metric, self.start_ns)
            otlp_metrics.append(otlp)
            self.series.extend(series.values())
            for index, one in series.items():
                if isinstance(one, Histogram):
                    self.histograms[(metric.name, index)] = one
        self.metrics_request: JSON = {
            "resourceMetrics": [
                {
                    "resource": resource,
                    "scopeMetrics": [{"scope": self.scope, "metrics": otlp_metrics}],
                }
            ]
        }
        self.points_per_export = len(self.series)
        self.clock_ns = self.start_ns + 250_000_000
        self.iteration = 0
        self.spans: list[JSON] = []
        self.logs: list[JSON] = []

    # -- steps --------------------------------------------------------------------------

    def run_steps(self, until_ns: int) -> None:
        """Run training steps until the clock passes `until_ns`: spans, logs, histograms."""
        while self.clock_ns < until_ns:
            self.step()

    def _span(
        self,
        step: Step,
        name: str,
        parent: str,
        start_ns: int,
        duration_ms: float,
        extra: dict[str, object] | None = None,
    ) -> JSON:
        span: JSON = {
            "traceId": step.trace_id,
            "spanId": span_id(self.rng),
            "parentSpanId": parent,
            "name": name,
            "kind": 1,
            "startTimeUnixNano": str(start_ns),
            "endTimeUnixNano": str(start_ns + int(duration_ms * 1e6)),
            "status": {},
            "flags": 256,
        }
        if extra:
            span["attributes"] = attributes(extra)
        step.spans.append(span)
        return span

    def step(self) -> None:
        rng, iteration = self.rng, self.iteration
        step = Step(trace_id(rng), span_id(rng))
        begin = self.clock_ns
        at = begin + 200_000
        # data loading: now and then a stall
        worker = iteration % 4
        load_ms = 20.0 * rng.lognormvariate(0.0, 0.3) * (12.0 if rng.random() < 0.01 else 1.0)
        load = self._span(step, "train.data_load", step.root_id, at, load_ms, {"worker": worker})
        self.histograms[("data.load.duration", worker)].record(load_ms)
        at += int(load_ms * 1e6) + 150_000
        # forward: attention then MLP inside it
        forward_ms = 150.0 * rng.lognormvariate(0.0, 0.08)
        forward_id = span_id(rng)
        attention_ms, mlp_ms = forward_ms * 0.58, forward_ms * 0.36
        self._span(step, "train.forward.attention", forward_id, at + 400_000, attention_ms)
        mlp_at = at + 400_000 + int(attention_ms * 1e6) + 100_000
        self._span(step, "train.forward.mlp", forward_id, mlp_at, mlp_ms)
        forward = self._span(step, "train.forward", step.root_id, at, forward_ms)
        forward["spanId"] = forward_id
        self.histograms[("train.forward.duration", 0)].record(forward_ms)
        at += int(forward_ms * 1e6) + 120_000
        # backward: the gradient all-reduce at its end
        backward_ms = 250.0 * rng.lognormvariate(0.0, 0.08)
        backward_id = span_id(rng)
        reduce_ms = 40.0 * rng.lognormvariate(0.0, 0.25)
        reduce_at = at + int((backward_ms - reduce_ms) * 1e6) - 50_000
        self._span(
            step, "nccl.allreduce", backward_id, reduce_at, reduce_ms, {"nccl.bytes": 1 << 28}
        )
        self.histograms[("nccl.collective.duration", 0)].record(reduce_ms)
        backward = self._span(step, "train.backward", step.root_id, at, backward_ms)
        backward["spanId"] = backward_id
        self.histograms[("train.backward.duration", 0)].record(backward_ms)
        at += int(backward_ms * 1e6) + 90_000
        optimizer_ms = 30.0 * rng.lognormvariate(0.0, 0.1)
        self._span(step, "train.optimizer", step.root_id, at, optimizer_ms)
        self.histograms[("train.optimizer.duration", 0)].record(optimizer_ms)
        at += int(optimizer_ms * 1e6) + 80_000
        failed: JSON | None = None
        if iteration % 200 == 199:  # a checkpoint; one in four fails
            checkpoint_ms = 2400.0 * rng.lognormvariate(0.0, 0.2)
            checkpoint = self._span(
                step, "train.checkpoint", step.root_id, at, checkpoint_ms, {"path": "/ckpt"}
            )
            if rng.random() < 0.25:
                checkpoint["status"] = {"message": "checkpoint disk full", "code": 2}
                checkpoint["events"] = [
                    {
                        "timeUnixNano": checkpoint["endTimeUnixNano"],
                        "name": "exception",
                        "attributes": attributes(
                            {
                                "exception.type": "OSError",
                                "exception.message": "[Errno 28] No space left on device",
                                "exception.stacktrace": "Traceback (most recent call last):\n"
                                '  File "train.py", line 412, in save\nOSError: [Errno 28]\n',
                                "exception.escaped": "False",
                            }
                        ),
                    }
                ]
                failed = checkpoint
            at += int(checkpoint_ms * 1e6)
        end = at + 300_000
        step_ms = (end - begin) / 1e6
        root = self._span(step, "train.step", "", begin, step_ms, {"dl.iteration": iteration})
        del root["parentSpanId"]  # protobuf's JSON leaves an empty id out
        root["spanId"] = step.root_id
        step_histogram = self.histograms[("train.step.duration", 0)]
        step_histogram.record(step_ms)
        step_histogram.exemplar = (step.trace_id, step.root_id)
        self.spans.extend(step.spans)
        if iteration % 4 == 0:
            self._log(end, 9, "INFO", f"iteration {iteration}: step took {step_ms:.1f} ms", step)
        if load_ms > 150.0:
            message = f"data loader worker {worker} stalled for {load_ms:.0f} ms"
            self._log(end, 13, "WARN", message, step, load["spanId"])
        if failed is not None:
            message = f"checkpoint at iteration {iteration} failed: disk full"
            self._log(end, 17, "ERROR", message, step, failed["spanId"])
        self.clock_ns = end + 500_000
        self.iteration += 1

    def _log(
        self,
        time_ns: int,
        severity: int,
        text: str,
        body: str,
        step: Step | None,
        in_span: str | None = None,
    ) -> None:
        record: JSON = {
            "timeUnixNano": str(time_ns),
            "severityNumber": severity,
            "severityText": text,
            "body": {"stringValue": body},
            "attributes": attributes(
                {
                    "code.file.path": "/workspace/train.py",
                    "code.function.name": "train_step",
                    "code.line.number": 212 + severity,
                }
            ),
            "flags": 1 if step is not None else 0,
        }
        if step is not None:
            record["traceId"] = step.trace_id
            record["spanId"] = in_span or step.root_id
        record["observedTimeUnixNano"] = str(time_ns + 41_000)
        self.logs.append(record)

    # -- exports ------------------------------------------------------------------------

    def export_metrics(self, time_ns: int, out: TextIO) -> None:
        elapsed_s = (time_ns - self.start_ns) / 1e9
        for series in self.series:
            series.update(time_ns, elapsed_s, self.rng)
        write(out, self.metrics_request, self.written)
        self.written.points += self.points_per_export

    def export_batches(self, time_ns: int, out: TextIO) -> None:
        if time_ns // SECOND_NS % 60 == 0:
            message = f"heartbeat: rank {self.rank} at iteration {self.iteration}"
            self._log(time_ns, 9, "INFO", message, None)
        if self.spans:
            self._write_batch(out, ("resourceSpans", "scopeSpans", "spans"), self.spans)
            self.written.spans += len(self.spans)
            self.spans = []
        if self.logs:
            self._write_batch(out, ("resourceLogs", "scopeLogs", "logRecords"), self.logs)
            self.written.logs += len(self.logs)
            self.logs = []

    def _write_batch(self, out: TextIO, keys: tuple[str, str, str], records: list[JSON]) -> None:
        """One export request of `records`: keys are (signal, scope list, record list)."""
        signal, scopes, records_key = keys
        entry = {"resource": self.resource, scopes: [{"scope": self.scope, records_key: records}]}
        write(out, {signal: [entry]}, self.written)


def write(out: TextIO, request: JSON, written: Written) -> None:
    line = json.dumps(request, separators=COMPACT) + "\n"  # ASCII: len() is the byte count
    out.write(line)
    written.bytes += len(line)
    written.lines += 1


def generate(path: Path, size_bytes: int, seed: int = 20240611) -> Written:
    """Write the job's OTLP/JSON lines to `path` until it holds `size_bytes`, one simulated
    second at a time, ending after a batch export; return what was written."""
    rng = random.Random(seed)
    written = Written()
    jobs = [RankJob(rank, rng, written) for rank in RANKS]
    with path.open("w", encoding="ascii", newline="\n") as out:
        second = 1
        while True:
            for job in jobs:
                now = job.start_ns + second * SECOND_NS
                job.run_steps(now)
                job.export_metrics(now, out)
            if second % BATCH_EVERY_S == 0:
                for job in jobs:
                    job.export_batches(job.start_ns + second * SECOND_NS + 3_000_000, out)
                if written.bytes >= size_bytes:
                    return written
            second += 1


# --- the children -------------------------------------------------------------------------


@dataclass(frozen=True)
class ChildRun:
    """One child interpreter: its exit, times, peak RSS and output."""

    exit_code: int | None  # None: killed at the timeout
    wall_s: float
    cpu_s: float
    peak_rss_kib: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def run_child(argv: Sequence[str], timeout_s: float, scratch: Path) -> ChildRun:
    """Run `argv` in a fresh process (stdout and stderr to files), killed after
    `timeout_s`; its own rusage comes from `os.wait4`."""
    stdout, stderr = scratch / "child.out", scratch / "child.err"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(stdout), flags, 0o644),
        (os.POSIX_SPAWN_OPEN, 2, str(stderr), flags, 0o644),
    ]
    start = time.perf_counter()
    pid = os.posix_spawn(sys.executable, list(argv), dict(os.environ), file_actions=actions)
    deadline = start + timeout_s
    timed_out = False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.perf_counter() > deadline:
            os.kill(pid, signal.SIGKILL)
            done, status, usage = os.wait4(pid, 0)
            timed_out = True
            break
        time.sleep(0.005)
    wall_s = time.perf_counter() - start
    return ChildRun(
        exit_code=None if timed_out else os.waitstatus_to_exitcode(status),
        wall_s=wall_s,
        cpu_s=usage.ru_utime + usage.ru_stime,
        peak_rss_kib=usage.ru_maxrss,
        stdout=stdout.read_text(errors="replace"),
        stderr=stderr.read_text(errors="replace"),
    )


def lens_view(path: Path, out: Path, timeout_s: float, scratch: Path) -> ChildRun:
    argv = [sys.executable, "-m", "nemo.lens.cli", "view", str(path), "-o", str(out)]
    return run_child(argv, timeout_s, scratch)


def json_loads_baseline(path: Path, timeout_s: float, scratch: Path) -> ChildRun:
    return run_child([sys.executable, "-c", BASELINE_SCRIPT, str(path)], timeout_s, scratch)


def describe_failure(name: str, run: ChildRun, timeout_s: float) -> None:
    if run.exit_code is None:
        print(f"  {name}: killed after {timeout_s:g} s")
    else:
        print(f"  {name}: exit status {run.exit_code}")
    for line in run.stderr.strip().splitlines()[-15:]:
        print(f"    {line}")


# --- the table ----------------------------------------------------------------------------


def mb(size_bytes: float) -> str:
    return f"{size_bytes / 1e6:,.1f} MB"


def rss_mb(kib: float) -> str:
    return f"{kib * 1024 / 1e6:,.1f} MB"


def failed_row(figure: str, target: str) -> Row:
    return Row(figure, "failed", "-", "-", target, "MISS")


def count_rows(run: ChildRun | None, written: Written) -> list[Row]:
    """What lens view says it read, against what was written."""
    match = COUNTS_LINE.search(run.stdout) if run is not None and run.ok else None
    names = ("metric points", "spans", "log records")
    if match is None:
        return [failed_row(f"{name} lens view read / written", "same") for name in names] + [
            failed_row("malformed lines lens view skipped", "0")
        ]
    points, spans, logs, skipped = (int(group) for group in match.groups())
    rows = [
        Row(
            f"{name} lens view read / written",
            f"{read:,}",
            f"{wrote:,}",
            f"{read / wrote:.3f}" if wrote else "-",
            "same",
            "PASS" if read == wrote and read > 0 else "MISS",
        )
        for name, read, wrote in zip(
            names, (points, spans, logs), (written.points, written.spans, written.logs), strict=True
        )
    ]
    rows.append(
        Row(
            "malformed lines lens view skipped",
            f"{skipped:,}",
            "-",
            "-",
            "0",
            "PASS" if skipped == 0 else "MISS",
        )
    )
    return rows


def measure(args: argparse.Namespace, scratch: Path) -> list[Row]:
    path = scratch / "two-ranks.jsonl"
    small = scratch / "two-ranks-small.jsonl"
    report = scratch / "report.html"
    timeout_s: float = args.timeout

    started = time.perf_counter()
    written = generate(path, int(args.size_mb * 1e6))
    seconds = time.perf_counter() - started
    print(
        f"generated {mb(written.bytes)} in {seconds:.1f} s ({written.bytes / 1e6 / seconds:.0f}"
        f" MB/s): {written.lines:,} lines, {written.points:,} metric points, "
        f"{written.spans:,} spans, {written.logs:,} log records"
    )
    small_written = generate(small, int(SMALL_FILE_MB * 1e6))

    baselines: list[ChildRun] = []
    candidates: list[ChildRun] = []
    for round_number in range(1, args.rounds + 1):
        base = json_loads_baseline(path, timeout_s, scratch)
        cand = lens_view(path, report, timeout_s, scratch)
        print(
            f"round {round_number}: json.loads {base.wall_s:.2f} s ({rss_mb(base.peak_rss_kib)}),"
            f" lens view {cand.wall_s:.2f} s ({rss_mb(cand.peak_rss_kib)})"
        )
        for name, run in (("json.loads baseline", base), ("lens view", cand)):
            if not run.ok:
                describe_failure(name, run, timeout_s)
        baselines.append(base)
        candidates.append(cand)
    small_run = lens_view(small, scratch / "small.html", timeout_s, scratch)
    if not small_run.ok:
        describe_failure(f"lens view of the {SMALL_FILE_MB:.0f} MB file", small_run, timeout_s)

    size_label = f"{written.bytes / 1e6:.0f} MB"
    rows = [
        Row(
            "OTLP/JSON-lines file (2 ranks)",
            f"{mb(written.bytes)}, {written.lines:,} lines",
            "-",
            "-",
            "report",
            "-",
        )
    ]
    good = all(run.ok for run in baselines + candidates)
    if not good:
        for figure, target in (
            (f"lens view wall time, {size_label} file", "< 60 s"),
            ("wall time: lens view / read + json.loads", "<= 4.0"),
            ("peak RSS: lens view of the file / of a small one", "<= 1.6"),
            ("HTML report size", "< 10 MB"),
        ):
            rows.append(failed_row(figure, target))
    else:
        wall = statistics.median(run.wall_s for run in candidates)
        base_wall = statistics.median(run.wall_s for run in baselines)
        ratios = [
            cand.wall_s / base.wall_s for base, cand in zip(baselines, candidates, strict=True)
        ]
        rows.append(
            Row(
                f"lens view wall time, {size_label} file",
                f"{wall:.2f} s",
                "-",
                "-",
                "< 60 s",
                "PASS" if wall < 60.0 else "MISS",
            )
        )
        timing = Timing(wall * 1e9, base_wall * 1e9, statistics.median(ratios))
        rows.append(ratio_row("wall time: lens view / read + json.loads", timing, 4.0, unit="ms"))
        cpu = statistics.median(run.cpu_s for run in candidates)
        base_cpu = statistics.median(run.cpu_s for run in baselines)
        rows.append(
            Row(
                "CPU time (user + system): lens view / read + json.loads",
                f"{cpu:.2f} s",
                f"{base_cpu:.2f} s",
                f"{cpu / base_cpu:.3f}",
                "report",
                "-",
            )
        )
        rss = statistics.median(run.peak_rss_kib for run in candidates)
        base_rss = statistics.median(run.peak_rss_kib for run in baselines)
        rows.append(
            Row(
                "peak RSS: lens view / read + json.loads",
                rss_mb(rss),
                rss_mb(base_rss),
                f"{rss / base_rss:.3f}",
                "report",
                "-",
            )
        )
        if small_run.ok:
            growth = rss / small_run.peak_rss_kib
            rows.append(
                Row(
                    f"peak RSS: lens view of {size_label} / of {SMALL_FILE_MB:.0f} MB",
                    rss_mb(rss),
                    rss_mb(small_run.peak_rss_kib),
                    f"{growth:.3f}",
                    "<= 1.6",
                    "PASS" if growth <= 1.6 else "MISS",
                )
            )
        html_bytes = report.stat().st_size if report.exists() else 0
        rows.append(
            Row(
                "HTML report size",
                mb(html_bytes),
                "-",
                "-",
                "< 10 MB",
                "PASS" if 0 < html_bytes < 10e6 else "MISS",
            )
        )
    rows.append(
        Row(
            f"lens view of a {mb(small_written.bytes)} file of the same shape (fixed cost)",
            f"{small_run.wall_s:.2f} s, {rss_mb(small_run.peak_rss_kib)}"
            if small_run.ok
            else "failed",
            "-",
            "-",
            "report",
            "-",
        )
    )
    rows.extend(count_rows(candidates[-1] if candidates else None, written))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--size-mb", type=float, default=200.0, help="the file's size in MB")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per side")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per child")
    args = parser.parse_args(argv)
    args.rounds = max(args.rounds, 1)

    print_versions()
    with tempfile.TemporaryDirectory(prefix="lens-bench-view-") as scratch:
        rows = measure(args, Path(scratch))
    print()
    print_table(rows, header=Row("figure", "lens view", "baseline", "ratio", "target", "result"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
