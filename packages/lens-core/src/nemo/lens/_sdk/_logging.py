"""The SDK side of the logging bridge: the global SDK logger provider, its handler, and the
gated batch log record processor the logs pipeline exports through."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import Any, Final

from opentelemetry._logs import get_logger_provider
from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

from nemo.lens import _otel_env
from nemo.lens._sdk._console import LogRecordExporter
from nemo.lens._sdk._span_queue import QueueCounting, QueueGate, QueueGated

#: Loggers whose records never enter the logs pipeline: the exporters' and the SDK's own
#: (a failed export logs there, and bridging that record would export, fail and log again)
#: and lens's (its warnings about the pipeline itself).
INTERNAL_LOGGERS: Final = ("opentelemetry", "nemo.lens")
_INTERNAL_PREFIXES: Final = tuple(name + "." for name in INTERNAL_LOGGERS)


def is_internal_logger(name: str) -> bool:
    """True for the loggers `INTERNAL_LOGGERS` names and every logger below them."""
    return name in INTERNAL_LOGGERS or name.startswith(_INTERNAL_PREFIXES)


def sdk_logger_provider() -> LoggerProvider | None:
    """The global logger provider if it is the SDK's, else None."""
    provider = get_logger_provider()
    return provider if isinstance(provider, LoggerProvider) else None


class BridgeHandler(logging.Handler):
    """The handler `setup_logging_bridge` attaches: forwards to the OpenTelemetry handler
    `inner`, skipping the records of `INTERNAL_LOGGERS`, and never raises.

    A record that cannot be translated (a message whose arguments do not fit, an object
    whose `str()` raises) goes to `handleError`, as with every standard handler: one
    "--- Logging error ---" on stderr unless `logging.raiseExceptions` is False.
    """

    def __init__(self, inner: logging.Handler, level: int) -> None:
        super().__init__(level)
        self.inner = inner

    def emit(self, record: logging.LogRecord) -> None:
        if is_internal_logger(record.name):
            return
        try:
            # Fails here, on every release, for a message that cannot be formatted (SDK
            # 1.23 hands an object message on unformatted, to fail the whole export batch).
            record.getMessage()
            # The inner handler formats with the formatter given to this one.
            self.inner.formatter = self.formatter
            self.inner.emit(record)
        except RecursionError:  # as the standard library's handlers do
            raise
        except Exception:
            self.handleError(record)

    def flush(self) -> None:
        try:
            self.inner.flush()
        except Exception:
            return  # flushing the bridge never breaks logging.shutdown() or the caller

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            super().close()


def new_logging_handler(level: int, provider: Any) -> logging.Handler:
    """A `BridgeHandler` over the logging instrumentation's handler where installed,
    else the SDK's."""
    # Looked for here, not at the top: the instrumentation package is the user's choice,
    # not a lens dependency, and the SDK's own handler stands in for it.
    try:
        from opentelemetry.instrumentation.logging.handler import (  # type: ignore[import-not-found]
            LoggingHandler,
        )
    except ImportError:
        from opentelemetry.sdk._logs import LoggingHandler
    with warnings.catch_warnings():
        # SDK 1.40+ deprecates its handler in favour of the instrumentation package's; the
        # two take the same arguments, and which one is installed is the user's choice.
        warnings.simplefilter("ignore", DeprecationWarning)
        inner: logging.Handler = LoggingHandler(level=logging.NOTSET, logger_provider=provider)
    return BridgeHandler(inner, level)


class QueueCountingLogExporter(QueueCounting, LogRecordExporter):  # type: ignore[misc]  # base chosen by release
    """A log record exporter that tells its gate how many records left the batch queue."""

    def export(self, batch: Sequence[Any]) -> Any:
        return super().export(batch)


class QueueGatedLogProcessor(QueueGated, LogRecordProcessor):
    """The batch log record processor `batch`, entered only through `gate`.

    SDK 1.23 to 1.3x hand a processor each record through `emit`, newer releases through
    `on_emit`; both are gated.
    """

    def on_emit(self, log_record: Any) -> None:
        if self._gate.admit():
            self._batch.on_emit(log_record)

    def emit(self, log_data: Any) -> None:
        if self._gate.admit():
            self._batch.emit(log_data)


def build_gated_log_processor(
    exporter: Any, settings: _otel_env.BatchSpanSettings, gate: QueueGate
) -> QueueGatedLogProcessor:
    """An SDK `BatchLogRecordProcessor` sized by `settings`, behind `gate`; it exports
    through a `QueueCountingLogExporter` of `exporter`."""
    batch = BatchLogRecordProcessor(
        QueueCountingLogExporter(exporter, gate),
        max_queue_size=settings.max_queue_size,
        schedule_delay_millis=settings.schedule_delay_ms,
        max_export_batch_size=settings.max_export_batch_size,
        export_timeout_millis=settings.export_timeout_ms,
    )
    return QueueGatedLogProcessor(batch, gate)
