"""Coalesced recording: gauges and sums on lens's own meters reach the SDK at collection.

A synchronous SDK call costs 2.6 to 9 us per value (a `Measurement`, the exemplar filter,
the attribute hash, a lock per reader storage). Between two collections the SDK keeps
only the last value of a gauge series and the sum of a counter or up-down counter series,
so `record_metrics` can keep exactly that itself, for a dict store, and hand each series
to the SDK's own instrument once (one `set` or `add`) when a reader of the pipeline
collects, just before the SDK aggregates. The exported data is the same: same
instruments, series, values and per-interval presence (the interval sum is added in the
order the SDK would add it, starting from 0). Histograms are recorded directly: a
distribution cannot be coalesced.

Only meters of a provider that lens's pipeline built coalesce: the pipeline registers a
`CoalescingBuffer` for its provider and flushes it before each of its readers collects
(`nemo.lens._sdk._coalescing`). Every other meter keeps the direct path.

What differs: the SDK samples no exemplars for coalesced values (they reach it outside
the span that recorded them), and a measurement's timestamp is its collection's.

Values are validated by `record_metrics` before they get here; nothing here raises on
the recording path. A series is keyed as the cardinality limit keys it, as the installed
SDK does (`nemo.lens.instruments._series`). Thread-safe: one lock per buffer, held for a
few dict operations per value (and by a flush to take the values), never while logging
or calling the SDK. A flush also holds its own lock while it hands the values to the SDK,
so flushes run one at a time; `record_metrics` never takes that one, and nothing is
logged under it. A forked child forgets every buffer: its parent's pending values are
the parent's to export (`_forget_buffers_in_child`, a fork hook).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Final

from opentelemetry import context as otel_context

from nemo.lens import _fork_hooks, _otel_internals
from nemo.lens._warn_once import WarnOnce
from nemo.lens.instruments._series import SeriesAttributes, keyed

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "record_metrics: coalesced recording")

#: The kinds that coalesce: the SDK keeps their last value or their sum per interval.
COALESCED_KINDS: Final = frozenset({"gauge", "counter", "up_down_counter"})

#: The series key of a value recorded without attributes.
_NO_ATTRIBUTES: Final[frozenset[Any]] = frozenset()


class CoalescingBuffer:
    """The values recorded on one pipeline's coalesced instruments since its last collection.

    Its lock guards only dict operations: no logging and no SDK call ever runs under it,
    so a logging handler that records metrics, in any thread, cannot deadlock with it.

    A buffered series is exactly one SDK series (keyed by `_series.series_key`), or a
    gauge's last value could be handed over out of order.

    Args:
        coalesce_sums: Also buffer counters and up-down counters. Only right with one
            reader (lens's pipeline builds one): every reader's storage gets what a flush
            hands over, so a second reader, collecting at other moments, would sum the
            same floats in another grouping (and round differently) than direct recording.
    """

    __slots__ = ("__weakref__", "_dirty", "_flush_lock", "_lock", "_pending", "coalesce_sums")

    def __init__(self, *, coalesce_sums: bool) -> None:
        self.coalesce_sums = coalesce_sums
        # Neither lock is taken across fork(): a child never touches its parent's buffers
        # (see `_forget_buffers_in_child`). `_lock` guards the buffered series; a flush
        # holds `_flush_lock` while it hands values to the SDK.
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        #: The instruments holding values, in the order they first got one.
        self._dirty: list[PendingInstrument] = []
        #: One per SDK instrument, however many groups or registrations record on it.
        self._pending: dict[object, PendingInstrument] = {}

    def coalesces(self, kind: str) -> bool:
        """True when values of instruments of `kind` are buffered here."""
        return kind == "gauge" or (self.coalesce_sums and kind in COALESCED_KINDS)

    def instrument(self, instrument: object, record_name: str, kind: str) -> Callable[..., None]:
        """The record method `record_metrics` calls for SDK `instrument` of `kind`.

        It has the signature of the instrument's own `set` or `add` (`record_name`),
        `(value, attributes)`, and keeps the value for the next collection. Called under
        the registry lock.
        """
        pending = self._pending.get(instrument)
        if pending is None:
            pending = self._pending[instrument] = PendingInstrument(
                self, getattr(instrument, record_name), last_wins=kind == "gauge"
            )
        return pending.keep

    def flush(self) -> None:
        """Hand every buffered series to its SDK instrument, then forget it; never raises.

        Called before each collection of the pipeline's readers. Flushes run one at a
        time, so a collection starts only once every value recorded before it reached the
        SDK, even while another reader's flush is still handing values over.
        """
        failures: list[Exception] = []
        with self._flush_lock:
            with self._lock:
                batches = [(pending, pending.take()) for pending in self._dirty]
                self._dirty.clear()
            if batches:
                self._hand_over(batches, failures)
        # Logged once the flush lock is released: a logging handler may call back into
        # lens, and a flush of its own there must not wait for this one.
        for exc in failures:
            _warnings.warn(
                ("flush", type(exc).__name__),
                "record_metrics: handing a buffered value to the SDK at collection failed "
                "(%s: %s); that value was dropped",
                type(exc).__name__,
                exc,
            )

    def _hand_over(
        self,
        batches: list[tuple[PendingInstrument, dict[Any, list[Any]]]],
        failures: list[Exception],
    ) -> None:
        # An empty context: a collection started inside a span must not lend that span's
        # trace to exemplars of values recorded elsewhere.
        token = otel_context.attach(otel_context.Context())
        try:
            for pending, series in batches:
                record = pending.record
                for value, attributes in series.values():
                    if value is _HANDED_OVER:
                        continue
                    try:
                        record(value, attributes)
                    except Exception as exc:
                        failures.append(exc)
        finally:
            otel_context.detach(token)


class PendingInstrument:
    """One SDK instrument's buffered series: key -> [value, attributes as first given]."""

    __slots__ = ("_dirty", "_lock", "_series", "last_wins", "record")

    def __init__(
        self, buffer: CoalescingBuffer, record: Callable[..., object], *, last_wins: bool
    ) -> None:
        self._lock = buffer._lock
        self._dirty = buffer._dirty
        #: A gauge's (its interval's last value wins); else a sum's (its values add up).
        self.last_wins = last_wins
        self.record = record
        self._series: dict[frozenset[Any], list[Any]] = {}

    def take(self) -> dict[frozenset[Any], list[Any]]:
        """Return the buffered series and start afresh (the buffer's lock is held)."""
        series, self._series = self._series, {}
        return series

    def keep(self, value: float, attributes: Mapping[str, object] | None = None) -> None:
        """The instrument's `set` or `add`: keep `value` for the next collection.

        `record_metrics` passes each call's attributes keyed once (`SeriesAttributes`);
        any other mapping is keyed and copied here.
        """
        if attributes:
            if type(attributes) is not SeriesAttributes:
                attributes = keyed(attributes)
            key = attributes.series_key
            if key is None:  # a set no series key can hold: the SDK decides
                self.record(value, attributes)
                return
        else:
            key, attributes = _NO_ATTRIBUTES, None
        with self._lock:
            series = self._series
            entry = series.get(key)
            if entry is None:
                if not series:
                    self._dirty.append(self)
                series[key] = [value, attributes]
                return
            if self.last_wins:
                entry[0] = value
                return
            total = entry[0]
            if total is _HANDED_OVER:
                direct: tuple[Any, ...] = (value,)
            else:
                summed = total + value
                if summed - summed == 0:
                    entry[0] = summed
                    return
                # Finite values whose sum overflows: the SDK would sum them to an infinity
                # itself but refuses an infinite value, so it gets them one by one (after
                # the lock is released), for the rest of the interval.
                entry[0] = _HANDED_OVER
                direct = (total, value)
            first_given = entry[1]
        for number in direct:
            self.record(number, first_given)


# A sum series recorded directly until the next collection (see `keep`).
_HANDED_OVER: Final = object()


# The buffer of each provider lens's pipelines built, keyed by the provider's measurement
# consumer (what its meters share); weak both ways, so a discarded pipeline goes.
_buffers: weakref.WeakKeyDictionary[Any, weakref.ReferenceType[CoalescingBuffer]] = (
    weakref.WeakKeyDictionary()
)
# The SDK's meter class: only its own instances coalesce, never a wrapper around one
# (which may expect its instruments to be called at record time).
_sdk_meter_type: type | None = None


def register(consumer: object, buffer: CoalescingBuffer, meter_type: type) -> None:
    """Make SDK meters (of `meter_type`) sharing measurement consumer `consumer` coalesce
    into `buffer`."""
    global _sdk_meter_type
    _sdk_meter_type = meter_type
    _buffers[consumer] = weakref.ref(buffer)


def buffer_for(meter: object) -> CoalescingBuffer | None:
    """The buffer `meter` coalesces into, or None for a meter lens's pipeline did not build."""
    if type(meter) is not _sdk_meter_type or not _buffers:
        return None
    try:
        reference = _buffers.get(_otel_internals.meter_consumer(meter))
    except TypeError:  # a consumer that is not weakly referenceable: not one of lens's
        return None
    return None if reference is None else reference()


def _forget_buffers_in_child() -> None:
    # The parent's pending values are the parent's to export; the child's own setup
    # registers buffers of its own.
    global _buffers
    _buffers = weakref.WeakKeyDictionary()


_fork_hooks.register("coalescing buffers", after_in_child=_forget_buffers_in_child)
