"""The demo's JSON-lines file and the SDK console exporters that write into it.

Setup's own console exporter writes to stdout, which the demo needs for its progress
view, so the demo builds console exporters on a file and hands them to
`setup_telemetry(span_exporter=..., metric_reader=...)`, the public injection points.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricReader, MetricsData
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["JsonLinesFile", "console_metric_reader", "console_span_exporter"]


class JsonLinesFile:
    """A text file that exporter threads append whole lines to.

    The span and metric exporters run on their own threads; one lock keeps each
    written line whole, and every write is flushed so an interrupted run leaves only
    complete lines behind.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines_written = 0
        self._lock = threading.Lock()
        self._file = path.open("w", encoding="utf-8")

    def write(self, text: str) -> int:
        """Append `text` (whole lines) and flush; after `close` the text is dropped."""
        with self._lock:
            if self._file.closed:
                return 0
            self._file.write(text)
            self._file.flush()
            self.lines_written += text.count("\n")
        return len(text)

    def flush(self) -> None:
        """Nothing to do: every `write` has already flushed."""

    def close(self) -> None:
        """Close the file; exports that arrive later are dropped."""
        with self._lock:
            self._file.close()


def _compact(document: str) -> str:
    # The SDK's to_json pretty-prints; one compact object per line is what tools expect.
    return json.dumps(json.loads(document), separators=(",", ":")) + "\n"


def _span_line(span: ReadableSpan) -> str:
    return _compact(span.to_json(indent=None))


def _metrics_line(data: MetricsData) -> str:
    return _compact(data.to_json(indent=None))


def console_span_exporter(sink: JsonLinesFile) -> SpanExporter:
    """An SDK `ConsoleSpanExporter` writing one JSON object per span into `sink`."""
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    return ConsoleSpanExporter(out=cast(IO[str], sink), formatter=_span_line)


def console_metric_reader(sink: JsonLinesFile) -> MetricReader:
    """A periodic reader over an SDK `ConsoleMetricExporter` writing into `sink`.

    Its interval is the SDK's: `OTEL_METRIC_EXPORT_INTERVAL` milliseconds.
    """
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )

    exporter = ConsoleMetricExporter(out=cast(IO[str], sink), formatter=_metrics_line)
    return PeriodicExportingMetricReader(exporter)
