"""The gate spans pass on their way into the batch span processor.

The SDK's batch processor drops spans once its queue is full, silently or with a log
line per span depending on the release. `SpanQueueGate` keeps that queue from
overflowing: it counts the spans it let in and the spans the processor handed to its
exporter, refuses a span when the difference reaches the queue's size, and counts every
span it refuses, in the `nemo.lens.spans.dropped` counter and in one warning at shutdown.
`add_gated_batch_processor` builds the processor behind a gate and wires the counter.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from nemo.lens import _fork_hooks, _otel_env
from nemo.lens._process import BuiltHere
from nemo.lens.version import __version__

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider


_logger = logging.getLogger(__name__)

#: The counter of spans lens refused because the batch queue was full.
DROPPED_SPANS_METRIC: Final = "nemo.lens.spans.dropped"
DROPPED_SPANS_UNIT: Final = "{span}"


class SpanQueueGate:
    """Admits a span into the batch processor only while its queue has room; counts the rest.

    The SDK's batch processor drops spans once its queue is full, and releases differ in
    how (or whether) they report it. The gate counts the spans it let in and the spans
    the processor handed to its exporter; the difference bounds the processor's queue,
    so with `capacity` equal to the processor's queue size the processor never drops a
    span: the gate refuses it instead, and counts it. Counting is exact and needs no
    SDK internals.

    Only the process that built the pipeline counts (a forked child's inherited pipeline
    exports nothing, and the gate's lock may have been held at the fork).

    Args:
        capacity: The batch processor's queue size.
        built: The process that built the pipeline.
    """

    def __init__(self, capacity: int, built: BuiltHere) -> None:
        self.capacity = capacity
        # False in a forked child (set by a fork hook): os.getpid() is a system call, and
        # `admit` runs for every span.
        self._in_owner = built.here()
        _live_gates.add(self)
        self._lock = threading.Lock()
        self._admitted = 0
        self._handed = 0
        self._dropped = 0
        self._closed = False
        self._drained = False
        self._reported = False
        #: Called with each refused span's count (the dropped-spans counter's `add`).
        self.on_drop: Callable[[int], object] | None = None

    @property
    def closed(self) -> bool:
        """True once the batch processor behind the gate began to shut down."""
        return self._closed

    @property
    def dropped(self) -> int:
        """Spans refused so far because the queue was full."""
        return self._dropped

    def admit(self, span: ReadableSpan) -> bool:
        """True if `span` may go into the batch processor; False if it is dropped."""
        if self._closed:
            return False  # shut down: the SDK would warn once per span and drop it anyway
        if not self._in_owner:
            return True
        context = span.context
        if context is None or not context.trace_flags.sampled:
            return True  # the processor ignores it without queueing it
        with self._lock:
            if self._admitted - self._handed < self.capacity:
                self._admitted += 1
                return True
            self._dropped += 1
        on_drop = self.on_drop
        if on_drop is not None:
            try:
                on_drop(1)
            except Exception as exc:
                _logger.debug("counting a dropped span failed: %s: %s", type(exc).__name__, exc)
        return False

    def handed(self, count: int) -> None:
        """The processor handed `count` spans to its exporter (they left the queue)."""
        if not self._in_owner:
            return
        with self._lock:
            self._handed += count

    def close(self) -> None:
        """The processor is shutting down: admit nothing more."""
        self._closed = True

    def drained(self) -> None:
        """The processor finished its shutdown: everything admitted was handed over."""
        self._drained = True

    def report(self) -> int:
        """Log, once, one warning with the number of spans dropped; return that number.

        After a complete shutdown, a span let in but never handed to the exporter was
        lost inside the processor; it is counted too.
        """
        if self._reported or not self._in_owner:
            return 0
        self._reported = True
        with self._lock:
            dropped = self._dropped
            lost = self._admitted - self._handed if self._drained else 0
        total = dropped + max(0, lost)
        if total:
            _logger.warning(
                "%d span(s) were dropped because the batch span queue (%d spans) was full "
                "(counted in %s); set OTEL_BSP_MAX_QUEUE_SIZE to a larger queue, or "
                "OTEL_BSP_MAX_EXPORT_BATCH_SIZE / OTEL_BSP_SCHEDULE_DELAY to drain it sooner",
                total,
                self.capacity,
                DROPPED_SPANS_METRIC,
            )
        return total


_live_gates: weakref.WeakSet[SpanQueueGate] = weakref.WeakSet()


def _gates_left_in_parent() -> None:
    for gate in list(_live_gates):
        gate._in_owner = False


_fork_hooks.register("span queue gates", after_in_child=_gates_left_in_parent)


def add_gated_batch_processor(
    tracer_provider: TracerProvider,
    exporter: SpanExporter,
    settings: _otel_env.BatchSpanSettings,
    built: BuiltHere,
    meter_provider: MeterProvider | None,
    instrumentation_scope: str,
) -> SpanQueueGate:
    """Add a batch processor for `exporter` behind a new gate to `tracer_provider`.

    The gate's refusals are counted in `nemo.lens.spans.dropped` on the meter
    `instrumentation_scope` (with lens's version) of `meter_provider`, when there is one.

    Returns:
        The gate, whose `report()` logs the spans dropped at shutdown.
    """
    gate = SpanQueueGate(settings.max_queue_size, built)
    if meter_provider is not None:
        dropped = meter_provider.get_meter(instrumentation_scope, __version__)
        gate.on_drop = dropped.create_counter(
            DROPPED_SPANS_METRIC,
            unit=DROPPED_SPANS_UNIT,
            description="Spans lens dropped because the batch span queue was full",
        ).add
    tracer_provider.add_span_processor(build_gated_batch_processor(exporter, settings, gate))
    return gate


class QueueCountingExporter(SpanExporter):
    """Forwards to `exporter`; tells `gate` how many spans left the batch queue."""

    def __init__(self, exporter: SpanExporter, gate: SpanQueueGate) -> None:
        self._exporter = exporter
        self._gate = gate

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._gate.handed(len(spans))
        return self._exporter.export(spans)

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)


class QueueGatedSpanProcessor(SpanProcessor):
    """The batch processor `batch`, entered only through `gate`."""

    def __init__(self, batch: BatchSpanProcessor, gate: SpanQueueGate) -> None:
        self._batch = batch
        self._gate = gate

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self._batch.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if self._gate.admit(span):
            self._batch.on_end(span)

    def shutdown(self) -> None:
        if self._gate.closed:
            return  # shut down already (the SDK would warn about a second time)
        self._gate.close()
        self._batch.shutdown()  # type: ignore[no-untyped-call,unused-ignore]
        self._gate.drained()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self._batch.force_flush(timeout_millis))


def build_gated_batch_processor(
    exporter: SpanExporter, settings: _otel_env.BatchSpanSettings, gate: SpanQueueGate
) -> SpanProcessor:
    """An SDK `BatchSpanProcessor` sized by `settings`, behind `gate`.

    The processor exports through a `QueueCountingExporter` of `exporter`, which tells the
    gate how many spans left the queue; the returned processor asks the gate before queueing.
    """
    batch = BatchSpanProcessor(
        QueueCountingExporter(exporter, gate),
        max_queue_size=settings.max_queue_size,
        schedule_delay_millis=settings.schedule_delay_ms,
        max_export_batch_size=settings.max_export_batch_size,
        export_timeout_millis=settings.export_timeout_ms,
    )
    return QueueGatedSpanProcessor(batch, gate)
