"""The console exporters: the SDK's console exporters writing one compact JSON object a line.

Spans and log records are one object each; a metric collection is one object.

Setup's `console` exporter writes to whatever `sys.stdout` is at write time. `lens demo`
needs stdout for its progress view, so it builds the same exporters on a `JsonLinesFile`
and hands them to `setup_telemetry(span_exporter=..., metric_reader=...)`.
"""

from __future__ import annotations

import io
import json
import sys
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader, MetricsData
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter


class JsonLinesFile:
    """A text file that exporter threads append whole lines to.

    The span and metric exporters run on their own threads; one lock keeps each written
    line whole, and every write is flushed so an interrupted run leaves only complete
    lines behind.
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


class _CurrentStdout(io.TextIOBase):
    """Writes to whatever `sys.stdout` is at write time (it may be replaced after setup)."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


def current_stdout() -> IO[str]:
    """A stream that follows `sys.stdout` (tests and notebooks replace it after setup)."""
    return _as_text_stream(_CurrentStdout())


def _as_text_stream(stream: object) -> IO[str]:
    # The SDK's exporters are typed for `typing.IO`, which no `io` base class declares.
    return cast("IO[str]", stream)


def _one_line(document: str) -> str:
    # The SDK's to_json pretty-prints; one compact object per line is what tools expect.
    return json.dumps(json.loads(document), separators=(",", ":")) + "\n"


def _span_line(span: ReadableSpan) -> str:
    return _one_line(span.to_json(indent=None))


def _metrics_line(data: MetricsData) -> str:
    return _one_line(data.to_json(indent=None))


def console_span_exporter(out: IO[str] | JsonLinesFile) -> SpanExporter:
    """An SDK `ConsoleSpanExporter` writing one JSON object per span into `out`."""
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    return ConsoleSpanExporter(out=_as_text_stream(out), formatter=_span_line)


def console_metric_exporter(out: IO[str] | JsonLinesFile) -> MetricExporter:
    """An SDK `ConsoleMetricExporter` writing one JSON object per collection into `out`."""
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

    return ConsoleMetricExporter(out=_as_text_stream(out), formatter=_metrics_line)


def console_log_exporter(out: IO[str] | JsonLinesFile) -> Any:
    """The SDK's console log exporter writing one JSON object per log record into `out`.

    Newer SDKs name it `ConsoleLogRecordExporter` and deprecate `ConsoleLogExporter`, the
    only name older releases have; both call the formatter with an object that has
    `to_json`.
    """
    from opentelemetry.sdk._logs import export

    exporter_class = getattr(export, "ConsoleLogRecordExporter", None) or export.ConsoleLogExporter
    return exporter_class(out=_as_text_stream(out), formatter=_log_line)


def _log_line(record: Any) -> str:
    return _one_line(record.to_json(indent=None))


def console_metric_reader(out: IO[str] | JsonLinesFile) -> MetricReader:
    """A periodic reader over `console_metric_exporter(out)`.

    Its interval is the SDK's: `OTEL_METRIC_EXPORT_INTERVAL` milliseconds.
    """
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    return PeriodicExportingMetricReader(console_metric_exporter(out))
