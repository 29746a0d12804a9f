"""Files for `lens view` to read: a real two-rank run, and OTLP/JSON lines built by hand.

`two_rank_run` starts two processes, ranks 0 and 1 of 2, each set up through
lens with the console exporter, logs and the logging bridge on, recording `STEPS` steps of
metrics, nested spans (one ending in an error) and a warning log inside each step, each
step flushed: what a job writes. `Expected` reads a file back independently of lens view
(per metric: points per series; per span name: the count).

The `*_request` builders write the protobuf JSON mapping by hand, for the cases a real run
cannot be made to produce on demand (delta temporality, resets, a given bucket layout).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lens_children import child_env, run_python

STEPS = 4
RANK_SCRIPT = """\
import contextlib, logging, sys
from nemo.lens import (
    MetricSpec, NemoLensConfig, managed_span, record_metrics, register_metric_group,
    setup_telemetry,
)
from nemo.lens.logging_bridge import setup_logging_bridge

path, steps, rank = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
register_metric_group("train", [
    MetricSpec("loss", "train.loss", "gauge"),
    MetricSpec("tokens", "train.tokens", "counter", unit="{token}"),
    MetricSpec("step_ms", "train.step.duration", "histogram", unit="ms"),
    MetricSpec("queue", "train.queue.size", "up_down_counter", unit="{batch}"),
])
handle = setup_telemetry(NemoLensConfig(
    enabled=True, service_name="trainer", exporter="console", console_path=path,
    export_strategy="all_ranks", span_groups="step", logs_enabled=True,
), rank=rank, world_size=2)
setup_logging_bridge("trainer", logging.INFO)
log = logging.getLogger("trainer")
log.setLevel(logging.INFO)
tracer = handle.tracer
for step in range(steps):
    with managed_span("step", "train.step", tracer=tracer, **{"dl.iteration": step}):
        with managed_span("step", "train.forward", tracer=tracer):
            with managed_span("step", "train.attention", tracer=tracer):
                pass
        with managed_span("step", "train.backward", tracer=tracer):
            pass
        if step == 1:
            with contextlib.suppress(RuntimeError):
                with managed_span("step", "train.checkpoint", tracer=tracer):
                    raise RuntimeError("checkpoint disk full")
        for phase in ("train", "eval"):
            record_metrics(handle.meter, "train", loss=1.0 / (step + 1), tokens=100 * (step + 1),
                           step_ms=10.0 * (step + 1), queue=1, attributes={"phase": phase})
        log.warning("step %d took longer than planned", step)
    handle.force_flush()
handle.shutdown()
"""


def two_rank_run(directory: Path, steps: int = STEPS) -> list[Path]:
    """Run the two ranks (one after the other) and return their files, rank 0 first."""
    files = []
    for rank in (0, 1):
        path = directory / f"rank{rank}.jsonl"
        env = child_env({"OTEL_METRIC_EXPORT_INTERVAL": "600000"})
        done = run_python("-c", RANK_SCRIPT, str(path), str(steps), str(rank), env=env)
        assert done.returncode == 0, done.stderr
        files.append(path)
    return files


# --- reading a file back, without lens view --------------------------------------------


@dataclass
class Expected:
    """What a report of some files must show, read from them directly."""

    #: metric name -> series key (resource's rank, attributes) -> points.
    points: dict[str, Counter[tuple[str, str]]] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    #: metric name -> series key -> time-ordered (count) of each histogram point.
    histogram_counts: dict[str, dict[tuple[str, str], list[int]]] = field(default_factory=dict)
    span_counts: Counter[str] = field(default_factory=Counter)
    logs: int = 0

    @classmethod
    def of(cls, paths: Iterable[Path]) -> Expected:
        expected = cls()
        for path in paths:
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    expected._read(json.loads(line))
        return expected

    def _read(self, request: dict[str, Any]) -> None:
        for entry in request.get("resourceMetrics", []):
            rank = _rank(entry)
            for scope in entry.get("scopeMetrics", []):
                for metric in scope.get("metrics", []):
                    self._read_metric(rank, metric)
        for entry in request.get("resourceSpans", []):
            for scope in entry.get("scopeSpans", []):
                self.span_counts.update(span["name"] for span in scope.get("spans", []))
        for entry in request.get("resourceLogs", []):
            for scope in entry.get("scopeLogs", []):
                self.logs += len(scope.get("logRecords", []))

    def _read_metric(self, rank: str, metric: dict[str, Any]) -> None:
        name = metric["name"]
        for kind in ("gauge", "sum", "histogram"):
            if kind in metric:
                data = metric[kind]
                break
        else:
            return
        if kind == "sum":
            kind = "counter" if data.get("isMonotonic") else "updown"
        self.kinds[name] = kind
        for point in data.get("dataPoints", []):
            attributes = ",".join(
                f"{item['key']}={next(iter(item['value'].values()))}"
                for item in point.get("attributes", [])
            )
            key = (rank, attributes)
            self.points.setdefault(name, Counter())[key] += 1
            if kind == "histogram":
                counts = self.histogram_counts.setdefault(name, {}).setdefault(key, [])
                counts.append(int(point["count"]))

    def series_points(self, name: str) -> list[int]:
        """Points per series of metric `name`, largest first."""
        return sorted(self.points[name].values(), reverse=True)

    def histogram_intervals(self, name: str) -> list[int]:
        """Per series, the cumulative points that added values (what p50/p90/p99 draw)."""
        found = []
        for counts in self.histogram_counts[name].values():
            previous = 0
            added = 0
            for count in counts:
                added += count > previous
                previous = count
            found.append(added)
        return sorted(found, reverse=True)


def _rank(entry: dict[str, Any]) -> str:
    for item in entry.get("resource", {}).get("attributes", []):
        if item["key"] == "dl.rank":
            return str(next(iter(item["value"].values())))
    return ""


# --- OTLP/JSON built by hand --------------------------------------------------------------


def attributes(**values: Any) -> list[dict[str, Any]]:
    """A KeyValue list: str, bool, int (as a string, as protobuf's JSON writes int64), float."""
    encoded = []
    for key, value in values.items():
        if isinstance(value, bool):
            held: dict[str, Any] = {"boolValue": value}
        elif isinstance(value, int):
            held = {"intValue": str(value)}
        elif isinstance(value, float):
            held = {"doubleValue": value}
        else:
            held = {"stringValue": str(value)}
        encoded.append({"key": key, "value": held})
    return encoded


def resource(service: str = "svc", rank: int | None = None, pid: int = 1) -> dict[str, Any]:
    extra = {} if rank is None else {"dl.rank": rank}
    return {"attributes": attributes(**{"service.name": service, "process.pid": pid, **extra})}


def metrics_request(metrics: Sequence[dict[str, Any]], **resource_args: Any) -> str:
    return json.dumps(
        {
            "resourceMetrics": [
                {
                    "resource": resource(**resource_args),
                    "scopeMetrics": [{"scope": {"name": "test"}, "metrics": list(metrics)}],
                }
            ]
        }
    )


def spans_request(spans: Sequence[dict[str, Any]], **resource_args: Any) -> str:
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": resource(**resource_args),
                    "scopeSpans": [{"scope": {"name": "test"}, "spans": list(spans)}],
                }
            ]
        }
    )


def logs_request(records: Sequence[dict[str, Any]], **resource_args: Any) -> str:
    return json.dumps(
        {
            "resourceLogs": [
                {
                    "resource": resource(**resource_args),
                    "scopeLogs": [{"scope": {"name": "test"}, "logRecords": list(records)}],
                }
            ]
        }
    )


SECOND = 1_000_000_000
T0 = 1_800_000_000 * SECOND


def span(
    name: str,
    trace: str,
    span_id: str,
    parent: str = "",
    start_s: float = 0.0,
    end_s: float = 1.0,
    error: bool = False,
) -> dict[str, Any]:
    return {
        "traceId": trace,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(T0 + int(start_s * SECOND)),
        "endTimeUnixNano": str(T0 + int(end_s * SECOND)),
        "status": {"code": 2, "message": "boom"} if error else {},
    }
