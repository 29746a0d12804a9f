"""What a forked child does with the telemetry pipeline its parent built: it stays quiet.

A child forked from a process with telemetry running (a data-loader worker, a launcher
that forks its ranks) inherits the parent's providers, their accumulated metric points
(SDK 1.44+ keeps them in the child) and the parent's service identity. Exporting from
there would send the parent's points a second time under the parent's name. So:

- Nothing leaves a child through an inherited pipeline. Every metric collection returns
  nothing outside the process that built the pipeline, and every span or log exporter lens
  puts behind its batch processors drops its batches there (the SDK's batch processors
  also empty their inherited queues in the child). `record_metrics` does not record
  through the parent's instruments in the child at all (see
  `nemo.lens.instruments._registry`): the SDK's aggregation locks may be held there.
- The child never deadlocks on the SDK's metric storage: collection runs under lens's
  collection gate, which `fork()` takes first, so the SDK's reader thread is never
  halfway through a collection (holding storage locks) when the child is created. (The
  hand-over of coalesced values just before runs outside the gate: like recording, it only
  adds to storage the child never touches.)
- The child may call `setup_telemetry` to start a pipeline of its own (the init guard is
  per process); that pipeline's `service.instance.id` carries the child's pid. Which
  providers a child inherited is `nemo.lens._inheritance`'s to know.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from nemo.lens import _fork_hooks, _otel_internals
from nemo.lens._process import BuiltHere
from nemo.lens._warn_once import WarnOnce

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricReader


_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "nemo.lens metric collection")

#: How long fork() waits for an in-flight metric collection before going ahead.
FORK_GATE_TIMEOUT_S: Final = 5.0

# Held around every metric collection and taken by fork(); re-entrant so a collection
# callback that itself collects cannot deadlock.
_gate = threading.RLock()
_gate_held_for_fork = False


def gate_metric_reader(
    reader: MetricReader, built: BuiltHere, before_collect: Callable[[], None] | None = None
) -> bool:
    """Make `reader` collect nothing outside the process `built` names, and collect under
    the fork gate.

    The gate wraps the collection callback the `MeterProvider` gave the reader (the one
    point every reader, periodic, pull or in-memory, collects through). `before_collect`,
    if given, runs just before each collection, outside the gate (coalesced recording
    hands its buffered values to the SDK there). Returns False, leaving the reader as it was, on
    an SDK release without that callback.
    """
    original = _otel_internals.collect_callback(reader)
    if original is None:
        _logger.warning(
            "this OpenTelemetry SDK gives %s no collection callback; a forked child of "
            "this process may export metric points its parent recorded",
            type(reader).__name__,
        )
        return False

    def collect_in_owner(*args: Any, **kwargs: Any) -> Any:
        if not built.here():
            return None  # a forked child: the inherited points are the parent's to export
        if before_collect is not None:
            # Outside the gate: like recording, it only adds to the SDK's storage, and a
            # fork need not wait for it (a child never touches its parent's instruments).
            try:
                before_collect()
            except Exception as exc:  # never stop the reader: it would export no more
                _warnings.warn(
                    ("before collect", type(exc).__name__),
                    "handing buffered metric values to the SDK before a collection failed "
                    "(%s: %s); the collection goes ahead without them",
                    type(exc).__name__,
                    exc,
                )
        with _gate:
            return original(*args, **kwargs)

    _otel_internals.replace_collect_callback(reader, collect_in_owner)
    return True


class ProcessBound:
    """Forwards to `exporter` in the process that built it (`built`); drops batches in a
    forked child, which must not send its parent's spans or logs a second time. The span
    exporter is below; the log one is `_logging.ProcessBoundLogExporter` (only a logs
    pipeline loads the SDK's logs modules)."""

    #: The SDK's success value for this exporter's signal.
    _SUCCESS: Any

    def __init__(self, exporter: Any, built: BuiltHere) -> None:
        super().__init__()
        self._exporter = exporter
        self._built = built

    def export(self, batch: Sequence[Any]) -> Any:
        if not self._built.here():
            return self._SUCCESS
        return self._exporter.export(batch)

    def shutdown(self) -> None:
        # A child must not close connections its parent is still using.
        if self._built.here():
            self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        if not self._built.here():
            return True
        flush = getattr(self._exporter, "force_flush", None)  # absent from SDK 1.23's log base
        return True if flush is None else bool(flush(timeout_millis))


class ProcessBoundSpanExporter(ProcessBound, SpanExporter):
    """A span exporter that exports only in the process that built it."""

    _SUCCESS = SpanExportResult.SUCCESS


def _take_gate_before_fork() -> None:
    global _gate_held_for_fork
    # Bounded: a collection stuck in an exporter must not block fork() forever. Past
    # the bound the fork goes ahead, as it would have without lens.
    _gate_held_for_fork = _gate.acquire(timeout=FORK_GATE_TIMEOUT_S)


def _release_gate_in_parent() -> None:
    global _gate_held_for_fork
    if _gate_held_for_fork:
        _gate_held_for_fork = False
        _gate.release()


def _reset_in_child() -> None:
    global _gate, _gate_held_for_fork
    _gate = threading.RLock()
    _gate_held_for_fork = False


_fork_hooks.register(
    "metric collection gate",
    before=_take_gate_before_fork,
    after_in_parent=_release_gate_in_parent,
    after_in_child=_reset_in_child,
)
