"""The SDK side of the logs signal: the logging bridge's handler and the global SDK logger
provider, and the logs pipeline (its logger provider, the gated batch log record processor
it exports through, and the log record exporters stacked before its exporter).

Only a setup that exports logs, the logging bridge and the console exporters import this
module: the SDK's logs modules it loads cost a setup ~7 ms, and the other signals' parts of
the concepts below live in their own modules (`_fork`, `_redacting`, `_value_limits`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from opentelemetry._logs import get_logger_provider
from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor
from opentelemetry.sdk._logs import export as _logs_export
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

from nemo.lens import _otel_env
from nemo.lens._process import BuiltHere
from nemo.lens._sdk import _fork, _redacting
from nemo.lens._sdk._forwarding import Forwarding
from nemo.lens._sdk._span_queue import LOG_QUEUE, QueueCounting, QueueGate, QueueGated
from nemo.lens._sdk._value_limits import TruncationCount, limit_log_record
from nemo.lens._value_limits import ValueLimits

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource

    from nemo.lens._export_plan import SignalPlan

_logger = logging.getLogger(__name__)

# The SDK renamed the log record exporter's base class and result (`LogExporter` and
# `LogExportResult`, the only names in 1.23) to `LogRecordExporter` and
# `LogRecordExportResult`, deprecating the old names. Chosen once, here, under the new
# names: every log exporter lens defines (this module's, the console one) uses these.
# Typed Any: which class it is depends on the installed release.
#: This SDK's log record exporter base class.
LogRecordExporter: Any = (
    getattr(_logs_export, "LogRecordExporter", None) or _logs_export.LogExporter
)
#: This SDK's log record export result enum.
LogRecordExportResult: Any = (
    getattr(_logs_export, "LogRecordExportResult", None) or _logs_export.LogExportResult
)

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


# --- the logs pipeline ------------------------------------------------------------------------


class ProcessBoundLogExporter(_fork.ProcessBound, LogRecordExporter):  # type: ignore[misc]  # base chosen by release
    """A log record exporter that exports only in the process that built it."""

    _SUCCESS = LogRecordExportResult.SUCCESS


class RedactingLogExporter(Forwarding, LogRecordExporter):  # type: ignore[misc]  # base chosen by release
    """Forwards each batch to `exporter` with every record's secret attributes redacted
    (`_redacting.redacted_log_batch`)."""

    def export(self, batch: Sequence[Any]) -> Any:
        return self._exporter.export(_redacting.redacted_log_batch(batch))


class LimitingLogExporter(Forwarding, LogRecordExporter):  # type: ignore[misc]  # base chosen by release
    """Cuts each record's body and attribute values to `limits`, counts the cuts in
    `count`, and forwards to `exporter` (records of SDK 1.23's `LogData` and of the newer
    `ReadableLogRecord` alike: both hold the record in `log_record`)."""

    def __init__(self, exporter: Any, limits: ValueLimits, count: TruncationCount) -> None:
        super().__init__(exporter)
        self._limits = limits
        self._count = count

    def export(self, batch: Sequence[Any]) -> Any:
        cuts = 0
        for item in batch:
            try:
                cuts += limit_log_record(item.log_record, self._limits)
            except Exception as exc:  # a record that cannot be cut is still exported
                _logger.debug("cutting a log record failed: %s: %s", type(exc).__name__, exc)
        self._count.add(cuts)
        return self._exporter.export(batch)


def build_logger_provider(
    plan: SignalPlan,
    exporter: Any,
    resource: Resource,
    built: BuiltHere,
    meter_provider: MeterProvider | None,
    instrumentation_scope: str,
    truncations: TruncationCount | None = None,
) -> tuple[Any, QueueGate | None]:
    """An SDK `LoggerProvider` exporting through a batch processor to `exporter` (the one
    `plan` names), and the gate in front of that processor.

    The batch processor is sized by the plan's `OTEL_BLRP_*` settings; its exporter
    exports only in the process `built` names, like the span exporter. Records the gate
    refuses (the queue is full) are counted in `nemo.lens.log_records.dropped` on
    `meter_provider`, when there is one. Bodies and attribute values are cut to the plan's
    value limits after redaction (which sees them whole), each cut counted in `truncations`.
    """
    if plan.value_limits is not None:
        truncations = truncations or TruncationCount()
        truncations.use(plan.value_limits, meter_provider, instrumentation_scope)
        exporter = LimitingLogExporter(exporter, plan.value_limits, truncations)
    provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    settings = plan.batch if plan.batch is not None else _otel_env.batch_log_settings()
    gate = QueueGate(settings.max_queue_size, built, LOG_QUEUE)
    gate.count_drops_on(meter_provider, instrumentation_scope)
    bound = ProcessBoundLogExporter(RedactingLogExporter(exporter), built)
    provider.add_log_record_processor(build_gated_log_processor(bound, settings, gate))
    return provider, gate
