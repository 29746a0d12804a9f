"""The report's data: two streaming passes over the files.

The first pass reads every line and feeds metrics, spans and logs to their summaries;
the second reads only the lines that hold spans, for the traces the timeline draws (the
slowest, and those the shown logs point at). The result is plain data the page embeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from nemo.lens._view._log_table import LogTable
from nemo.lens._view._metric_charts import MetricCharts
from nemo.lens._view._otlp_json import (
    Malformed,
    ReadCounts,
    Sources,
    SpanLines,
    read_requests,
    record_lists,
    reread_requests,
)
from nemo.lens._view._span_tables import SpanTables, Timelines

#: Traces drawn on the timeline because a shown log record points at them.
LOGGED_TRACES: Final = 20
# What a record's summary raises on a record it cannot read: counted, never a traceback.
# (ArithmeticError: a number past what a float holds, a rate over no time.)
_RECORD_PROBLEMS: Final = (
    Malformed,
    TypeError,
    ValueError,
    KeyError,
    AttributeError,
    ArithmeticError,
)


@dataclass(frozen=True)
class Report:
    """What the page shows, and the counts the command prints."""

    data: dict[str, Any]

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.data["counts"])


def build_report(paths: Sequence[Path]) -> Report:
    """Read `paths` (OTLP/JSON lines) and summarise them for the page."""
    counts = ReadCounts()
    sources = Sources()
    metrics, spans, logs = MetricCharts(), SpanTables(), LogTable()
    summaries = {
        "resourceMetrics": metrics.add,
        "resourceSpans": spans.add,
        "resourceLogs": logs.add,
    }
    span_lines = SpanLines()
    for signal, entries in read_requests(paths, counts, span_lines=span_lines):
        add = summaries[signal]
        for resource, batch in record_lists(signal, entries):
            source = sources.id_of_written(resource)
            for record in batch:
                try:
                    add(source, record)
                except _RECORD_PROBLEMS:
                    counts.skipped_records += 1
    counts.skipped_records += metrics.skipped
    chosen = spans.slowest_traces()
    chosen += [trace for trace in logs.trace_ids(LOGGED_TRACES) if trace not in chosen]
    timelines = Timelines(chosen)
    if chosen:
        for _, entries in reread_requests(paths, span_lines, timelines.may_hold):
            for resource, batch in record_lists("resourceSpans", entries):
                for record in batch:
                    try:
                        if timelines.wants(record):
                            timelines.add(sources.id_of_written(resource), record)
                    except _RECORD_PROBLEMS:
                        pass  # a span the timeline cannot draw: the tables above still count it
    labels = sources.labels()
    traces = timelines.drawn(labels)
    extents = (metrics.first_ns, metrics.last_ns, spans.first_ns, spans.last_ns)
    times = [value for value in (*extents, logs.first_ns, logs.last_ns) if value is not None]
    data = {
        "files": [str(path) for path in paths],
        "sources": [
            {**row, "label": label} for row, label in zip(sources.rows, labels, strict=True)
        ],
        "startMs": min(times) / 1e6 if times else None,
        "endMs": max(times) / 1e6 if times else None,
        "counts": {
            "lines": counts.lines,
            "skippedLines": counts.skipped_lines,
            "skippedRecords": counts.skipped_records,
            "points": metrics.points,
            "metrics": len(metrics.charts) + len(metrics.uncharted),
            "spans": spans.spans,
            "logs": logs.logs,
        },
        "skippedExamples": counts.examples,
        "metrics": metrics.drawn(labels),
        "uncharted": [{"name": name, "points": n} for name, n in sorted(metrics.uncharted.items())],
        "spanTable": spans.table(),
        "traces": traces,
        "otherTraces": spans.others(
            len(set(spans.slowest_traces()) & {t["traceId"] for t in traces})
        ),
        "logs": logs.drawn(labels),
        "logsBySeverity": dict(logs.by_severity),
    }
    return Report(data)
