"""The spans part of the report: where a step's time goes, and a timeline of traces.

The first pass over the files (`SpanTables.add`) keeps per span name the count, the errors
and every duration (8 bytes each, for exact percentiles), the run's wall-clock extent, and
the `TIMELINE_TRACES` slowest root spans (a bounded heap). The second pass
(`Timelines.add`) reads only the spans of the traces chosen for the timeline, at most
`MAX_TIMELINE_SPANS` each; every other trace is summarised by its root's duration.
"""

from __future__ import annotations

import heapq
import math
import re
from array import array
from dataclasses import dataclass, field
from typing import Any, Final

from nemo.lens._redaction import redact_url_credentials
from nemo.lens._view._otlp_json import (
    SPANS_KEY,
    Malformed,
    decode_attributes,
    enum,
    hex_id,
    nanos,
    shown_attributes,
    shown_text,
)

#: The slowest traces (by their root span) drawn on the timeline.
TIMELINE_TRACES: Final = 20
#: Spans drawn of one trace; the rest are counted.
MAX_TIMELINE_SPANS: Final = 300
#: Span names the table gets a row for; spans of further names share one row.
MAX_NAMES: Final = 500
OTHER_NAMES: Final = "(other span names)"
# A trace id as a line writes it (JSON's whitespace allowed around the colon).
_WRITTEN_TRACE_ID: Final = re.compile(rb'"traceId"\s*:\s*"([^"]*)"')
_STATUS: Final = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_ERROR: Final = 2


@dataclass
class NameStats:
    """What the spans of one name cost."""

    count: int = 0
    errors: int = 0
    durations_ms: array[float] = field(default_factory=lambda: array("d"))


@dataclass(slots=True)
class SpanTimes:
    """The fields of a span both passes read."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start_ns: int
    end_ns: int
    error: bool


def span_times(span: dict[str, Any]) -> SpanTimes:
    """The ids, name, times and error status of an OTLP span."""
    trace_id, span_id = hex_id(span, "traceId"), hex_id(span, "spanId")
    if not trace_id or not span_id:
        raise Malformed("a span without traceId or spanId")
    start_ns, end_ns = nanos(span, "startTimeUnixNano"), nanos(span, "endTimeUnixNano")
    status = span.get("status")
    code = enum(status.get("code"), _STATUS) if isinstance(status, dict) else 0
    name = span.get("name")
    return SpanTimes(  # by position: one is made per span of the file
        trace_id,
        span_id,
        hex_id(span, "parentSpanId"),
        shown_text(name) if isinstance(name, str) and name else "(unnamed)",
        start_ns,
        end_ns if end_ns > start_ns else start_ns,
        code == _ERROR,
    )


class SpanTables:
    """First pass: the per-name table and the choice of traces for the timeline."""

    def __init__(self) -> None:
        self.names: dict[str, NameStats] = {}
        self.spans = 0
        # Each source's [first start, last end]: the wall time the shares are of.
        self.extents: dict[int, list[int]] = {}
        # (root duration, trace id, root name): a min-heap of the slowest roots.
        self._slowest: list[tuple[int, str, str]] = []
        self._slowest_ids: set[str] = set()
        self.root_durations_ms = array("d")

    @property
    def first_ns(self) -> int | None:
        return min((first for first, _ in self.extents.values()), default=None)

    @property
    def last_ns(self) -> int | None:
        return max((last for _, last in self.extents.values()), default=None)

    def add(self, source: int, span: dict[str, Any]) -> None:
        times = span_times(span)
        start_ns, end_ns = times.start_ns, times.end_ns
        extent = self.extents.get(source)
        if extent is None:
            self.extents[source] = [start_ns, end_ns]
        else:
            if start_ns < extent[0]:
                extent[0] = start_ns
            if end_ns > extent[1]:
                extent[1] = end_ns
        self.spans += 1
        stats = self.names.get(times.name)
        if stats is None:
            name = times.name if len(self.names) < MAX_NAMES else OTHER_NAMES
            stats = self.names.get(name)
            if stats is None:
                stats = self.names[name] = NameStats()
        stats.count += 1
        stats.errors += times.error
        duration_ns = end_ns - start_ns
        stats.durations_ms.append(duration_ns / 1e6)
        if not times.parent_id:
            self.root_durations_ms.append(duration_ns / 1e6)
            entry = (duration_ns, times.trace_id, times.name)
            if times.trace_id in self._slowest_ids:
                return  # the same trace again (a batch written twice, a file given twice)
            if len(self._slowest) < TIMELINE_TRACES:
                heapq.heappush(self._slowest, entry)
                self._slowest_ids.add(times.trace_id)
            elif entry > self._slowest[0]:
                self._slowest_ids.discard(heapq.heapreplace(self._slowest, entry)[1])
                self._slowest_ids.add(times.trace_id)

    def slowest_traces(self) -> list[str]:
        """The trace ids of the slowest roots, slowest first."""
        return [trace_id for _, trace_id, _ in sorted(self._slowest, reverse=True)]

    def table(self) -> list[dict[str, Any]]:
        """One row per span name, the most total time first; `share` is of the wall time
        of the processes the spans came from, summed."""
        # Several processes (ranks) each spend their own wall time: a step span on every
        # rank takes 100 %, not one hundred per rank.
        wall_ms = sum(last - first for first, last in self.extents.values()) / 1e6
        rows: list[dict[str, Any]] = []
        for name, stats in self.names.items():
            ordered = sorted(stats.durations_ms)
            total = math.fsum(ordered)
            rows.append(
                {
                    "name": name,
                    "count": stats.count,
                    "errors": stats.errors,
                    "totalMs": total,
                    "meanMs": total / stats.count,
                    "p50Ms": _percentile(ordered, 0.5),
                    "p99Ms": _percentile(ordered, 0.99),
                    "share": total / wall_ms if wall_ms > 0 else None,
                }
            )
        rows.sort(key=lambda row: (-float(row["totalMs"]), str(row["name"])))
        return rows

    def others(self, shown: int) -> dict[str, Any]:
        """The traces the timeline leaves out, summarised by their roots' durations."""
        ordered = sorted(self.root_durations_ms)
        return {
            "traces": len(ordered),
            "notShown": max(len(ordered) - shown, 0),
            "p50Ms": _percentile(ordered, 0.5),
            "p99Ms": _percentile(ordered, 0.99),
        }


def _percentile(ordered: list[float], q: float) -> float | None:
    """The nearest-rank percentile of sorted values (None for none)."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(math.ceil(q * len(ordered)) - 1, 0))]


@dataclass
class _TraceSpans:
    spans: list[tuple[SpanTimes, int, dict[str, str], str]] = field(default_factory=list)
    left_out: int = 0


class Timelines:
    """Second pass: the spans of the chosen traces, drawn nested."""

    def __init__(self, trace_ids: list[str]) -> None:
        self.order = trace_ids
        self._traces = {trace_id: _TraceSpans() for trace_id in trace_ids}

    def may_hold(self, line: bytes) -> bool:
        """Whether a line of the files can hold a span of a chosen trace. Where a line
        escapes no character (and is not UTF-16 or -32: no NUL) its bytes are the text
        json.loads reads, so the trace ids it writes tell; any other line is parsed."""
        if SPANS_KEY not in line:
            return False
        if b"\\" in line or b"\x00" in line:
            return True
        try:
            written = [found.decode() for found in _WRITTEN_TRACE_ID.findall(line)]
        except UnicodeDecodeError:
            return True  # not UTF-8: json.loads tells it apart
        return any(trace_id.lower() in self._traces for trace_id in written)

    def wants(self, span: dict[str, Any]) -> bool:
        trace_id = span.get("traceId")
        return isinstance(trace_id, str) and trace_id.lower() in self._traces

    def add(self, source: int, span: dict[str, Any]) -> None:
        times = span_times(span)
        trace = self._traces[times.trace_id]
        if len(trace.spans) >= MAX_TIMELINE_SPANS:
            trace.left_out += 1
            return
        status = span.get("status")
        message = status.get("message") if isinstance(status, dict) else None
        shown = shown_attributes(decode_attributes(span.get("attributes")))
        # The status message passes the redaction rule as lens's exporters apply it.
        status_text = redact_url_credentials(shown_text(message)) if message else ""
        trace.spans.append((times, source, shown, status_text))

    def drawn(self, source_labels: list[str]) -> list[dict[str, Any]]:
        """Each chosen trace with spans, its rows in depth-first order (a child right under
        its parent, siblings by start time)."""
        drawn = []
        for trace_id in self.order:
            trace = self._traces[trace_id]
            if not trace.spans:
                continue
            start_ns = min(times.start_ns for times, *_ in trace.spans)
            end_ns = max(times.end_ns for times, *_ in trace.spans)
            rows = [
                {
                    "name": times.name,
                    "spanId": times.span_id,
                    "parentId": times.parent_id,
                    "depth": depth,
                    "startMs": (times.start_ns - start_ns) / 1e6,
                    "durationMs": (times.end_ns - times.start_ns) / 1e6,
                    "error": times.error,
                    "status": message,
                    "source": source_labels[source],
                    "attributes": attributes,
                }
                for depth, (times, source, attributes, message) in _depth_first(trace.spans)
            ]
            roots = [row for row in rows if row["depth"] == 0]
            drawn.append(
                {
                    "traceId": trace_id,
                    "name": roots[0]["name"],
                    "startMs": start_ns / 1e6,
                    "durationMs": (end_ns - start_ns) / 1e6,
                    "spans": rows,
                    "leftOut": trace.left_out,
                }
            )
        return drawn


def _depth_first(spans: list[Any]) -> list[tuple[int, Any]]:
    """(depth, span) in depth-first order; a span whose parent is not here is a root."""
    ids = {entry[0].span_id for entry in spans}
    children: dict[str, list[Any]] = {}
    roots = []
    for entry in spans:
        parent = entry[0].parent_id
        if parent and parent in ids and parent != entry[0].span_id:
            children.setdefault(parent, []).append(entry)
        else:
            roots.append(entry)
    ordered: list[tuple[int, Any]] = []
    seen: set[str] = set()
    stack = [(0, entry) for entry in sorted(roots, key=_start, reverse=True)]
    while stack:
        depth, entry = stack.pop()
        if entry[0].span_id in seen:
            continue
        seen.add(entry[0].span_id)
        ordered.append((depth, entry))
        below = sorted(children.get(entry[0].span_id, ()), key=_start, reverse=True)
        stack.extend((depth + 1, child) for child in below)
    # A cycle of parents (a corrupt file) leaves spans unreached: show them as roots.
    ordered.extend((0, entry) for entry in spans if entry[0].span_id not in seen)
    return ordered


def _start(entry: Any) -> int:
    return int(entry[0].start_ns)
