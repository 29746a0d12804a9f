"""The gate spans and log records pass on their way into a batch processor.

The SDK's batch processors drop items once their queue is full, silently or with a log
line per item depending on the release. `QueueGate` keeps that queue from overflowing:
it counts the items it let in and the items the processor handed to its exporter,
refuses an item when the difference reaches the queue's size, and counts every item it
refuses, in a counter (`nemo.lens.spans.dropped`, `nemo.lens.log_records.dropped`) and
in one warning at shutdown. `add_gated_batch_processor` builds the span processor behind
a gate; the log side (`nemo.lens._sdk._logging`) builds its own on the same gate.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from nemo.lens import _fork_hooks, _forked_children, _otel_env
from nemo.lens._process import BuiltHere
from nemo.lens._sdk import _children_spans
from nemo.lens._sdk._forwarding import Forwarding
from nemo.lens._shared_region import SPAN_RING_BYTES
from nemo.lens._warn_once import WarnOnce
from nemo.lens.version import __version__

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider


_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "nemo.lens span queue")

#: The counter of spans lens refused because the batch queue was full.
DROPPED_SPANS_METRIC: Final = "nemo.lens.spans.dropped"
DROPPED_SPANS_UNIT: Final = "{span}"


class QueueKind(NamedTuple):
    """What a gate's queue holds, in the words its counter and its warning use."""

    #: The item, singular and plural ("span", "spans").
    item: str
    items: str
    #: The batch processor's queue, in words, and its variables' prefix (`OTEL_BSP`).
    queue: str
    variables: str
    #: The counter of refused items, its unit and description.
    metric: str
    unit: str
    description: str


SPAN_QUEUE: Final = QueueKind(
    "span",
    "spans",
    "batch span queue",
    "OTEL_BSP",
    DROPPED_SPANS_METRIC,
    DROPPED_SPANS_UNIT,
    "Spans lens dropped because the batch span queue was full",
)
LOG_QUEUE: Final = QueueKind(
    "log record",
    "log records",
    "batch log record queue",
    "OTEL_BLRP",
    "nemo.lens.log_records.dropped",
    "{log_record}",
    "Log records lens dropped because the batch log record queue was full",
)


class QueueGate:
    """Admits an item into a batch processor only while its queue has room; counts the rest.

    The SDK's batch processors drop items once their queue is full, and releases differ
    in how (or whether) they report it. The gate counts the items it let in and the items
    the processor handed to its exporter; the difference bounds the processor's queue,
    so with `capacity` equal to the processor's queue size the processor never drops an
    item: the gate refuses it instead, and counts it. Counting is exact and needs no
    SDK internals.

    Only the process that built the pipeline counts (a forked child's inherited pipeline
    exports nothing, and the gate's lock may have been held at the fork).

    Args:
        capacity: The batch processor's queue size.
        built: The process that built the pipeline.
        kind: What the queue holds (spans by default), for the warning's words.
    """

    def __init__(self, capacity: int, built: BuiltHere, kind: QueueKind = SPAN_QUEUE) -> None:
        self.capacity = capacity
        self.kind = kind
        # False in a forked child (set by a fork hook): os.getpid() is a system call, and
        # `admit` runs for every item.
        self._in_owner = built.here()
        _live_gates.add(self)
        self._lock = threading.Lock()
        self._admitted = 0
        self._handed = 0
        self._dropped = 0
        self._child_drops = 0
        self._closed = False
        self._drained = False
        self._reported = False
        #: Called with each refused item's count (the dropped counter's `add`).
        self.on_drop: Callable[[int], object] | None = None

    @property
    def closed(self) -> bool:
        """True once the batch processor behind the gate began to shut down."""
        return self._closed

    @property
    def dropped(self) -> int:
        """Items refused so far because the queue was full."""
        return self._dropped

    def admit(self) -> bool:
        """True if one more item may go into the batch processor; False if it is dropped."""
        if self._closed:
            return False  # shut down: the SDK would warn once per item and drop it anyway
        if not self._in_owner:
            return True
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
                _logger.debug("counting a dropped item failed: %s: %s", type(exc).__name__, exc)
        return False

    def handed(self, count: int) -> None:
        """The processor handed `count` items to its exporter (they left the queue)."""
        if not self._in_owner:
            return
        with self._lock:
            self._handed += count

    def count_child_drops(self, count: int) -> None:
        """`count` items ended in forked children were dropped before this process took
        them (a child's ring was full): counted like refusals, reported apart."""
        with self._lock:
            self._child_drops += count
        on_drop = self.on_drop
        if on_drop is not None:
            try:
                on_drop(count)
            except Exception as exc:
                _logger.debug("counting a dropped item failed: %s: %s", type(exc).__name__, exc)

    def close(self) -> None:
        """The processor is shutting down: admit nothing more."""
        self._closed = True

    def drained(self) -> None:
        """The processor finished its shutdown: everything admitted was handed over."""
        self._drained = True

    def count_drops_on(self, meter_provider: MeterProvider | None, scope: str) -> None:
        """Count refusals in the kind's counter on the meter `scope` (lens's version) of
        `meter_provider`, when there is one."""
        if meter_provider is None:
            return
        kind = self.kind
        meter = meter_provider.get_meter(scope, __version__)
        counter = meter.create_counter(kind.metric, unit=kind.unit, description=kind.description)
        self.on_drop = counter.add

    def report(self) -> int:
        """Log, once, one warning with the number of items dropped; return that number.

        After a complete shutdown, an item let in but never handed to the exporter was
        lost inside the processor; it is counted too.
        """
        if self._reported or not self._in_owner:
            return 0
        self._reported = True
        with self._lock:
            dropped = self._dropped
            lost = self._admitted - self._handed if self._drained else 0
            child_drops = self._child_drops
        if child_drops:
            _logger.warning(
                "%d %s(s) ended in forked children were dropped because a child's ring "
                "(%d bytes) was full before this process took them (counted in %s)",
                child_drops,
                self.kind.item,
                SPAN_RING_BYTES,
                self.kind.metric,
            )
        total = dropped + max(0, lost)
        if total:
            kind = self.kind
            _logger.warning(
                "%d %s(s) were dropped because the %s (%d %s) was full (counted in %s); "
                "set %s_MAX_QUEUE_SIZE to a larger queue, or %s_MAX_EXPORT_BATCH_SIZE / "
                "%s_SCHEDULE_DELAY to drain it sooner",
                total,
                kind.item,
                kind.queue,
                self.capacity,
                kind.items,
                kind.metric,
                kind.variables,
                kind.variables,
                kind.variables,
            )
        return total + child_drops


_live_gates: weakref.WeakSet[QueueGate] = weakref.WeakSet()


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
) -> QueueGate:
    """Add a batch processor for `exporter` behind a new gate to `tracer_provider`.

    The gate's refusals are counted in `nemo.lens.spans.dropped` on the meter
    `instrumentation_scope` (with lens's version) of `meter_provider`, when there is one.

    Returns:
        The gate, whose `report()` logs the spans dropped at shutdown.
    """
    gate = QueueGate(settings.max_queue_size, built, SPAN_QUEUE)
    gate.count_drops_on(meter_provider, instrumentation_scope)
    processor = build_gated_batch_processor(exporter, settings, gate)
    processor.take_children_spans(tracer_provider.resource)
    tracer_provider.add_span_processor(processor)
    return gate


class QueueCounting(Forwarding):
    """Forwards to `exporter`; tells `gate` how many items left the batch queue. The
    exporter base of the signal comes second (`QueueCountingExporter`, and the log one)."""

    def __init__(self, exporter: Any, gate: QueueGate) -> None:
        super().__init__(exporter)
        self._gate = gate

    def export(self, batch: Sequence[Any]) -> Any:
        self._gate.handed(len(batch))
        return self._exporter.export(batch)


class QueueCountingExporter(QueueCounting, SpanExporter):
    """A span exporter that tells its gate how many spans left the batch queue."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result: SpanExportResult = super().export(spans)
        return result


class QueueGated:
    """The batch processor `batch`, entered only through `gate` (the entering is the
    signal's: `QueueGatedSpanProcessor`, and the log one); shut down once."""

    def __init__(self, batch: Any, gate: QueueGate) -> None:
        super().__init__()
        self._batch = batch
        self._gate = gate

    def shutdown(self) -> None:
        if self._gate.closed:
            return  # shut down already (the SDK would warn about a second time)
        self._gate.close()
        self._batch.shutdown()
        self._gate.drained()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self._batch.force_flush(timeout_millis))


class QueueGatedSpanProcessor(QueueGated, SpanProcessor):
    """The batch span processor `batch`, entered only through `gate`; in a forked child,
    sampled spans go to the child's region for the parent instead (once
    `take_children_spans` made this pipeline take them)."""

    _children_token: int | None = None
    _resource: Resource | None = None

    def take_children_spans(self, resource: Resource) -> None:
        """Queue here the spans forked children end on this pipeline, as spans of
        `resource` (the pipeline's)."""
        self._resource = resource
        self._children_token = _forked_children.accept_spans(self._deliver_childrens)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self._batch.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if context is None or not context.trace_flags.sampled:
            # The processor ignores it without queueing it.
            self._batch.on_end(span)
        elif not self._gate._in_owner and self._to_parent(span):
            return
        elif self._gate.admit():
            self._batch.on_end(span)

    def _to_parent(self, span: ReadableSpan) -> bool:
        """In a forked child: write `span` for the parent; False where it does not take
        this child's spans (the batch processor then drops it at export, as before)."""
        token = self._children_token
        if token is None:
            return False
        try:
            payload = _children_spans.encode_span(span, os.getpid())
        except Exception as exc:  # an attribute with no JSON form: this span is lost
            _warnings.failure("encoding a span for the parent process", exc, "it was dropped")
            return True
        return _forked_children.write_span(token, payload) is not None

    def _deliver_childrens(self, payloads: list[bytes], dropped: int) -> None:
        """In the parent: queue the spans children wrote, count the ones they dropped."""
        if dropped:
            self._gate.count_child_drops(dropped)
        for payload in payloads:
            try:
                span = _children_spans.decode_span(payload, self._resource or Resource.get_empty())
            except Exception as exc:
                _warnings.failure("decoding a forked child's span", exc, "it was dropped")
                continue
            self.on_end(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        if self._gate._in_owner:
            _forked_children.drain_spans()  # the children's ended spans are this flush's too
        return super().force_flush(timeout_millis)

    def shutdown(self) -> None:
        if self._gate._in_owner and not self._gate.closed:
            _forked_children.drain_spans()
        if self._children_token is not None and self._gate._in_owner:
            _forked_children.stop_accepting(self._children_token)
        super().shutdown()


def build_gated_batch_processor(
    exporter: SpanExporter, settings: _otel_env.BatchSpanSettings, gate: QueueGate
) -> QueueGatedSpanProcessor:
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
