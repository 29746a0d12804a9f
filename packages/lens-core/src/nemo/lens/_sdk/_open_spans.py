"""Ending the spans still open when the tracer provider shuts down.

A training job that is stopped mid-step (SIGTERM, an exception) leaves its job and step
spans open, and the SDK exports only ended spans, so the most interesting spans would
vanish. lens's processor remembers every open span; at shutdown it ends them, innermost
first, marked as truncated. It is registered before the batch processor, so the batch
processor is still running when those spans end and exports them.

The spans are held weakly: a span that was started, never ended and then dropped by its
code (nothing can end it any more) is freed as it would be without lens, instead of being
kept for the life of the process (about 3 KB each).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Final

from opentelemetry.sdk.trace import SpanProcessor

from nemo.lens import _fork_hooks, semconv

_logger = logging.getLogger(__name__)

# The event that marks a truncated span shares the attribute's name.
TRUNCATED_EVENT: Final = semconv.NEMO_SPAN_TRUNCATED
SHUTDOWN_REASON: Final = "telemetry shutdown while the span was open"
# Open spans a tracker holds before it first looks for dropped ones.
_FIRST_PRUNE: Final = 1024


class OpenSpanTracker:
    """The spans started and not yet ended, in start order.

    No lock: it runs twice per span, and storing, popping or copying a plain dict is
    atomic under the GIL.
    """

    def __init__(self) -> None:
        # Span id -> a weak reference to the span (on_end gets a readable copy, not the
        # started object). The dict keeps start order, so reversing it ends every child
        # (which always starts after its parent) before its parent. Weak: a span dropped
        # without being ended goes, and its dead entry is pruned once the dict has grown.
        self._open: dict[int, weakref.ReferenceType[Any]] = {}
        self._prune_above = _FIRST_PRUNE
        _live_trackers.add(self)

    def started(self, span: Any) -> None:
        open_spans = self._open
        open_spans[span.context.span_id] = weakref.ref(span)
        if len(open_spans) > self._prune_above:
            self._prune()

    def ended(self, span: Any) -> None:
        self._open.pop(span.context.span_id, None)

    def open_count(self) -> int:
        return sum(1 for reference in list(self._open.values()) if reference() is not None)

    def _prune(self) -> None:
        open_spans = self._open
        for span_id, reference in list(open_spans.items()):
            if reference() is None:
                open_spans.pop(span_id, None)
        # Amortized: the next prune waits until the live spans could have doubled.
        self._prune_above = max(_FIRST_PRUNE, 2 * len(open_spans))

    def end_all(self, reason: str = SHUTDOWN_REASON) -> int:
        """End every open span, innermost first, marked truncated; return how many."""
        open_spans, self._open = self._open, {}
        spans = [span for span in (ref() for ref in list(open_spans.values())) if span is not None]
        for span in reversed(spans):
            try:
                if not span.is_recording():
                    continue
                span.set_attribute(semconv.NEMO_SPAN_TRUNCATED, True)
                span.add_event(TRUNCATED_EVENT, {semconv.NEMO_SPAN_TRUNCATED_REASON: reason})
                span.end()
            except Exception as exc:  # one broken span must not keep the others open
                _logger.warning(
                    "could not end open span %r at shutdown (%s: %s)",
                    getattr(span, "name", span),
                    type(exc).__name__,
                    exc,
                )
        return len(spans)

    def forget_inherited(self) -> None:
        """In a forked child: the parent's open spans are the parent's to end."""
        self._open = {}


class OpenSpanCloser(SpanProcessor):
    """Feeds `tracker` the spans that start and end; its shutdown ends those still open."""

    def __init__(self, tracker: OpenSpanTracker) -> None:
        self._tracker = tracker

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self._tracker.started(span)

    def on_end(self, span: Any) -> None:
        self._tracker.ended(span)

    def shutdown(self) -> None:
        count = self._tracker.end_all()
        if count:
            _logger.info("ended %d span(s) still open at shutdown, marked truncated", count)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def build_open_span_closer(tracker: OpenSpanTracker) -> SpanProcessor:
    """Return an SDK span processor that feeds `tracker` and ends its spans at shutdown."""
    return OpenSpanCloser(tracker)


_live_trackers: weakref.WeakSet[OpenSpanTracker] = weakref.WeakSet()


def _forget_inherited_in_child() -> None:
    for tracker in list(_live_trackers):
        tracker.forget_inherited()


_fork_hooks.register("open spans", after_in_child=_forget_inherited_in_child)
