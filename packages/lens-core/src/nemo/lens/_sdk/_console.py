"""The console exporters: OTLP/JSON, one export request a line.

Each export call of a span, metric or log exporter becomes one `ExportTraceServiceRequest`,
`ExportMetricsServiceRequest` or `ExportLogsServiceRequest`, encoded by the OTLP exporters'
own protobuf encoder and written as one compact line of the OTLP/JSON mapping: the
protobuf JSON mapping (lowerCamelCase names, int64 as decimal strings, enums as numbers)
with trace and span ids as hex strings, as the OTLP specification asks. That is what the
OpenTelemetry Collector's file exporter writes and its `otlpjsonfile` receiver reads, so
a run's file can be replayed into any backend later.

Setup's `console` exporter writes to `console_output(path)`: the stream following
`sys.stdout`, or one shared append-mode file per path. `lens demo` needs stdout for its
progress view, so it builds the same exporters on a `JsonLinesFile` and hands them to
`setup_telemetry(span_exporter=..., metric_reader=...)`.
"""

from __future__ import annotations

import base64
import errno
import io
import json
import logging
import os
import stat
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, cast

from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from nemo.lens import _otel_env
from nemo.lens._sdk._logging import LogRecordExporter, LogRecordExportResult
from nemo.lens._warn_once import WarnOnce

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

_logger = logging.getLogger(__name__)
_write_warnings = WarnOnce(_logger, "console exporter")

#: The OTLP/JSON fields that hold ids: hex strings there, where protobuf JSON has base64.
ID_FIELDS: Final = frozenset({"traceId", "spanId", "parentSpanId"})


class JsonLinesFile:
    """A text file that exporter threads append whole lines to.

    The span, metric and log exporters run on their own threads; one lock keeps each
    written line whole, and every write goes to the file at once (one `write` call on a
    descriptor without a buffer) so an interrupted run leaves only complete lines behind.

    The file is opened without waiting: a FIFO that no process reads fails at once (an
    `OSError` saying so) instead of blocking until a reader comes; a FIFO with a reader,
    a character device (`/dev/null`, a terminal) and `/dev/stdout` are written like a
    file. A write the disk cuts short (no space left, a file-size limit) is taken back:
    a regular file is truncated to the end of its last complete line, so the next
    record starts a line of its own. Where it cannot be (a pipe, a device, or another
    process appended in between), the next write first ends the broken line.

    Args:
        path: The file.
        append: Keep what the file holds and add to its end (created if missing); by
            default the file is emptied first.

    Raises:
        OSError: The file cannot be opened for writing, or is a FIFO no process reads.
    """

    def __init__(self, path: Path, *, append: bool = False) -> None:
        self.path = path
        self.lines_written = 0
        #: What the written lines hold: "spans", "metric points", "log records" -> count.
        self.records_written: dict[str, int] = {}
        self._lock = threading.Lock()
        self._fd: int | None = _open_without_waiting(path, append=append)
        self._regular = stat.S_ISREG(os.fstat(self._fd).st_mode)
        # The file ends inside a line that a cut-short write left and could not take back.
        self._in_broken_line = False

    @property
    def closed(self) -> bool:
        """True after `close`."""
        return self._fd is None

    def write(self, text: str, *, what: str = "", count: int = 0) -> int:
        """Append `text` (whole lines), holding `count` records of kind `what`; after
        `close` the text is dropped.

        Raises:
            OSError: The file cannot take the text (a full disk, for example); what part
                of it was written is taken back, or ended by the next write.
        """
        data = text.encode("utf-8", "replace")
        with self._lock:
            if self._fd is None:
                return 0
            if self._in_broken_line:
                data = b"\n" + data
            self._write_all(self._fd, data)
            self._in_broken_line = False
            self.lines_written += text.count("\n")
            if what:
                self.records_written[what] = self.records_written.get(what, 0) + count
        return len(text)

    def _write_all(self, fd: int, data: bytes) -> None:
        """Write all of `data`, or raise with none of it left in a regular file."""
        view, written = memoryview(data), 0
        try:
            while written < len(data):
                written += os.write(fd, view[written:])
        except OSError:
            if written and not self._take_back(fd, written):
                self._in_broken_line = not data[:written].endswith(b"\n")
            raise

    def _take_back(self, fd: int, written: int) -> bool:
        """Truncate the `written` bytes just appended; False where that is not safe."""
        if not self._regular:
            return False
        try:
            # With O_APPEND the offset is the end of this write: truncating is safe only
            # while nothing (another process on the same file) has appended after it.
            end = os.lseek(fd, 0, os.SEEK_CUR)
            if os.fstat(fd).st_size != end:
                return False
            os.ftruncate(fd, end - written)
        except OSError:
            return False
        return True

    def flush(self) -> None:
        """Nothing to do: every `write` has already reached the file."""

    def close(self) -> None:
        """Close the file; exports that arrive later are dropped."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _open_without_waiting(path: Path, *, append: bool) -> int:
    """A blocking write descriptor on `path`, opened without blocking.

    open() of a FIFO for writing waits for a reader; O_NONBLOCK makes it fail with ENXIO
    instead (and changes nothing for a regular file or a device). Writes then block as
    usual, so each line goes out whole.

    Raises:
        OSError: It cannot be opened; for a FIFO without a reader the message says so.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO and _is_fifo(path):
            raise OSError(
                exc.errno,
                f"{str(path)!r} is a FIFO and no process has it open for reading; start "
                "its reader before setup, or write to a regular file",
            ) from exc
        raise
    os.set_blocking(fd, True)
    return fd


def _is_fifo(path: Path) -> bool:
    try:
        return stat.S_ISFIFO(path.stat().st_mode)
    except OSError:
        return False


class _CurrentStdout(io.TextIOBase):
    """Writes to whatever `sys.stdout` is at write time (it may be replaced after setup)."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()

    def close(self) -> None:
        # stdout is not ours to close. IOBase's finaliser calls close() (which would flush)
        # at interpreter exit too, when this module's `sys` may already be torn down.
        pass


def current_stdout() -> IO[str]:
    """A stream that follows `sys.stdout` (tests and notebooks replace it after setup)."""
    return cast("IO[str]", _CurrentStdout())


# Locks and files are per process: a forked child gets its own, never a copy of one that a
# parent's exporter thread held at the moment of fork().
_process_locks: dict[tuple[int, str], threading.Lock] = {}
_shared_files: dict[tuple[int, Path], JsonLinesFile] = {}


def _process_lock(purpose: str) -> threading.Lock:
    # setdefault is atomic under the GIL: every thread of a process gets the same lock.
    return _process_locks.setdefault((os.getpid(), purpose), threading.Lock())


def console_output(path: str | None) -> IO[str] | JsonLinesFile:
    """Where the console exporters write: stdout, or the file at `path`.

    For None or "" the stream following the current `sys.stdout`. Otherwise one shared
    `JsonLinesFile` per resolved path, opened to append (created if missing): asking for
    the same path again returns the same object, so spans, metrics and logs interleave
    whole lines in one file. Opening never waits (see `JsonLinesFile`).

    Raises:
        OSError: The file cannot be opened for writing, or is a FIFO that no process
            reads (the message names it).
    """
    if not path:
        return current_stdout()
    given = Path(path).expanduser().absolute()
    key = (os.getpid(), given.resolve())
    with _process_lock("shared files"):
        shared = _shared_files.get(key)
        if shared is None or shared.closed:
            # Opened by the name given, not the resolved one: /dev/stdout on a pipe
            # resolves to "/proc/<pid>/fd/pipe:[...]", which names nothing.
            shared = _shared_files[key] = JsonLinesFile(given, append=True)
    return shared


@dataclass(frozen=True)
class _Encoders:
    spans: Callable[[Sequence[Any]], Any]
    metrics: Callable[[Any], Any]
    logs: Callable[[Sequence[Any]], Any]
    to_dict: Callable[..., dict[str, Any]]


def _encoders() -> _Encoders:
    """The OTLP exporters' protobuf encoders and protobuf's JSON mapping.

    The logs encoder lives in `common._log_encoder` in every release from 1.23 to 1.45:
    like `opentelemetry._logs`, the underscore marks the signal as not yet stable, and it
    is the module the OTLP log exporters themselves import (its `__all__` has
    `encode_logs`). This function is the one place lens names it.

    Raises:
        ImportError: opentelemetry-exporter-otlp-proto-common (or protobuf) is missing.
    """
    # Imported here, unlike the SDK at the top: opentelemetry-exporter-otlp-proto-common
    # is a package of its own that an SDK install may lack, and its absence must be an
    # ImportError naming lens-core[sdk] when a console exporter is built, not a failure to
    # import this module (`_exporters` imports it for every exporter, OTLP and Prometheus
    # included).
    try:
        from google.protobuf.json_format import (  # type: ignore[import-untyped,unused-ignore]
            MessageToDict,
        )
        from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
        from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    except ImportError as exc:
        raise ImportError(
            "the console exporter writes OTLP/JSON with the OTLP exporters' encoder, and "
            f"opentelemetry-exporter-otlp-proto-common is not importable ({exc}); "
            f"{_otel_env.install_hint(_otel_env.SDK_EXTRA)}"
        ) from exc
    return _Encoders(encode_spans, encode_metrics, encode_logs, MessageToDict)


def _hex_ids(node: Any) -> None:
    # Attribute keys are values of "key" fields, never dict keys, so only ids match here.
    if isinstance(node, dict):
        for field, value in node.items():
            if field in ID_FIELDS and isinstance(value, str):
                node[field] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


def otlp_json_line(request: Any, to_dict: Callable[..., dict[str, Any]]) -> str:
    """One OTLP/JSON line (with its newline) for an OTLP export request message."""
    document = to_dict(request, use_integers_for_enums=True)
    _hex_ids(document)
    # ASCII with \u escapes: still valid JSON, and it cannot fail on a stdout that is not
    # UTF-8 (PYTHONIOENCODING=ascii, some consoles), which would drop the whole batch.
    return json.dumps(document, separators=(",", ":")) + "\n"


#: What one record of each signal is called in `JsonLinesFile.records_written`.
_RECORD_KINDS: Final = {"spans": "spans", "metrics": "metric points", "logs": "log records"}


def _record_count(signal: str, request: Any) -> int:
    """The spans, metric data points or log records in one OTLP export request."""
    if signal == "spans":
        return sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
    if signal == "logs":
        return sum(len(s.log_records) for r in request.resource_logs for s in r.scope_logs)
    count = 0
    for resource in request.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                data = metric.WhichOneof("data")  # gauge, sum, histogram, ...
                count += len(getattr(metric, data).data_points) if data else 0
    return count


def _write_request(
    out: IO[str] | JsonLinesFile,
    signal: str,
    encode: Callable[[], Any],
    to_dict: Callable[..., dict[str, Any]],
) -> bool:
    """Encode and write one request; False (and one warning) instead of raising."""
    try:
        request = encode()
        if not any(field.name.startswith("resource_") for field, _ in request.ListFields()):
            return True  # nothing to export (a collection with no points)
        line = otlp_json_line(request, to_dict)
        if isinstance(out, JsonLinesFile):
            out.write(line, what=_RECORD_KINDS[signal], count=_record_count(signal, request))
        else:
            with _process_lock("stream"):
                out.write(line)
                out.flush()
    except Exception as exc:
        _write_warnings.warn(
            (signal, type(exc)),
            "console exporter: cannot write %s as OTLP/JSON (%s: %s); dropping the batch",
            signal,
            type(exc).__name__,
            exc,
        )
        return False
    return True


class OtlpJsonSpanExporter(SpanExporter):
    """Writes each batch of spans into `out` as one OTLP/JSON line."""

    def __init__(self, out: IO[str] | JsonLinesFile, encoders: _Encoders) -> None:
        super().__init__()
        self._out = out
        self._encoders = encoders

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        encoders = self._encoders
        written = _write_request(
            self._out, "spans", lambda: encoders.spans(spans), encoders.to_dict
        )
        return SpanExportResult.SUCCESS if written else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        """`out` belongs to the caller: shutting down leaves it open."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every export has been written already


class OtlpJsonMetricExporter(MetricExporter):
    """Writes each collection into `out` as one OTLP/JSON line (cumulative temporality)."""

    def __init__(self, out: IO[str] | JsonLinesFile, encoders: _Encoders) -> None:
        super().__init__()  # the SDK's defaults: cumulative, each instrument's aggregation
        self._out = out
        self._encoders = encoders

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        encoders = self._encoders
        written = _write_request(
            self._out, "metrics", lambda: encoders.metrics(metrics_data), encoders.to_dict
        )
        return MetricExportResult.SUCCESS if written else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True  # every export has been written already

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """`out` belongs to the caller: shutting down leaves it open."""


class OtlpJsonLogExporter(LogRecordExporter):  # type: ignore[misc]  # base chosen by release
    """Writes each batch of log records into `out` as one OTLP/JSON line.

    Each release's encoder takes what its own processors hand the exporter.
    """

    def __init__(self, out: IO[str] | JsonLinesFile, encoders: _Encoders) -> None:
        super().__init__()
        self._out = out
        self._encoders = encoders

    def export(self, batch: Sequence[Any]) -> Any:
        encoders = self._encoders
        written = _write_request(self._out, "logs", lambda: encoders.logs(batch), encoders.to_dict)
        return LogRecordExportResult.SUCCESS if written else LogRecordExportResult.FAILURE

    def shutdown(self) -> None:
        """`out` belongs to the caller: shutting down leaves it open."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every export has been written already


def console_span_exporter(out: IO[str] | JsonLinesFile) -> SpanExporter:
    """A span exporter writing one OTLP/JSON `ExportTraceServiceRequest` per batch into `out`.

    Raises:
        ImportError: The OTLP encoder is not installed (the message names lens-core[sdk]).
    """
    return OtlpJsonSpanExporter(out, _encoders())


def console_metric_exporter(out: IO[str] | JsonLinesFile) -> MetricExporter:
    """A metric exporter writing one OTLP/JSON `ExportMetricsServiceRequest` per collection.

    Cumulative temporality for every instrument, like the SDK's console exporter.

    Raises:
        ImportError: The OTLP encoder is not installed (the message names lens-core[sdk]).
    """
    return OtlpJsonMetricExporter(out, _encoders())


def console_log_exporter(out: IO[str] | JsonLinesFile) -> Any:
    """A log record exporter writing one OTLP/JSON `ExportLogsServiceRequest` per batch.

    Typed Any: its base class (`LogRecordExporter` here) is the installed release's.

    Raises:
        ImportError: The OTLP encoder is not installed (the message names lens-core[sdk]).
    """
    return OtlpJsonLogExporter(out, _encoders())


def console_metric_reader(out: IO[str] | JsonLinesFile) -> MetricReader:
    """A periodic reader over `console_metric_exporter(out)`.

    Its interval is the SDK's: `OTEL_METRIC_EXPORT_INTERVAL` milliseconds.

    Raises:
        ImportError: The OTLP encoder is not installed (the message names lens-core[sdk]).
    """
    return PeriodicExportingMetricReader(console_metric_exporter(out))
