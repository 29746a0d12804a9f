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
the recording path. Thread-safe: `record_metrics` holds the buffer's lock for one call
(a few dict operations per value), and a flush holds it only to take the values, never
while handing them to the SDK. A forked child forgets every buffer (its parent's pending
values are the parent's to export; see `nemo.lens._fork`).
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

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "record_metrics: coalesced recording")

#: The kinds that coalesce: the SDK keeps their last value or their sum per interval.
COALESCED_KINDS: Final = frozenset({"gauge", "counter", "up_down_counter"})

_NO_ATTRIBUTES: Final[frozenset[Any]] = frozenset()
# Marks a value whose series key carries its type (see `_typed_value`); never equal to
# any attribute value.
_TYPED: Final = object()


def _typed_value(value: object) -> object:
    """`value` with its type, so 1, True and 1.0 (equal in Python) key apart."""
    if type(value) is tuple:
        return (_TYPED, tuple, type(value[0]) if value else None, value)
    return (_TYPED, type(value), value)


def plain_series_key(attributes: Mapping[str, object]) -> frozenset[Any]:
    """The series an attribute set records on where the SDK keys by `frozenset(items)`."""
    return frozenset(attributes.items())


def typed_series_key(attributes: Mapping[str, object]) -> frozenset[Any]:
    """The series where the SDK keys by value and type (1, True and 1.0 are three series).

    Strings and ints cannot be confused with each other, so only other values are typed.
    """
    for value in attributes.values():
        value_type = type(value)
        if value_type is not str and value_type is not int:
            return frozenset(
                [
                    (key, item if type(item) is str or type(item) is int else _typed_value(item))
                    for key, item in attributes.items()
                ]
            )
    return frozenset(attributes.items())


class CoalescingBuffer:
    """The values recorded on one pipeline's coalesced instruments since its last collection.

    `record_metrics` holds `lock` for the whole of one call on a coalescing meter, so the
    record methods below take no lock of their own and a call's attribute set is keyed
    and copied once, not once per value.

    Args:
        series_key: How the installed SDK tells attribute sets apart
            (`plain_series_key` or `typed_series_key`): a buffered series must be exactly
            one SDK series, or a gauge's last value could be handed over out of order.
        coalesce_sums: Also buffer counters and up-down counters. Only right with one
            reader: every reader's storage gets what a flush hands over, so a second
            reader, collecting at other moments, would sum the same floats in another
            grouping (and round differently) than direct recording.
    """

    __slots__ = (
        "__weakref__",
        "_call_attributes",
        "_call_series",
        "_dirty",
        "_flush_lock",
        "coalesce_sums",
        "lock",
        "series_key",
    )

    def __init__(
        self,
        series_key: Callable[[Mapping[str, object]], frozenset[Any]],
        *,
        coalesce_sums: bool,
    ) -> None:
        self.series_key = series_key
        self.coalesce_sums = coalesce_sums
        #: Held by `record_metrics` around one call, and by a flush to take the values.
        #: Re-entrant: a logging handler that records from inside a call still works.
        self.lock = threading.RLock()
        # Held while a flush hands values to the SDK. Neither lock is taken across fork():
        # a child never touches its parent's buffers (see `_forget_buffers_in_child`).
        self._flush_lock = threading.Lock()
        #: The instruments holding values, in the order they first got one.
        self._dirty: list[PendingInstrument] = []
        # The attributes of the call in progress, and their (series key, copy).
        self._call_attributes: object = None
        self._call_series: tuple[frozenset[Any], dict[str, object]] = (_NO_ATTRIBUTES, {})

    def coalesces(self, kind: str) -> bool:
        """True when values of instruments of `kind` are buffered here."""
        return kind == "gauge" or (self.coalesce_sums and kind in COALESCED_KINDS)

    def instrument(self, record: Callable[..., object], kind: str) -> Callable[..., None]:
        """The record method `record_metrics` calls for an SDK instrument of `kind`.

        `record` is the instrument's own `set` or `add`; the returned method has its
        signature, `(value, attributes)`, and keeps the value for the next collection.
        """
        pending = PendingInstrument(self, record)
        return pending.set if kind == "gauge" else pending.add

    def begin_call(self) -> None:
        """A new `record_metrics` call (the lock is held): forget the last call's
        attributes, whose dict the caller may have changed since."""
        self._call_attributes = None

    def series_of(self, attributes: Mapping[str, object]) -> tuple[frozenset[Any], Any]:
        """The series key of `attributes` and a copy of them, made once per call."""
        if attributes is not self._call_attributes:
            # A copy: the caller may reuse and change its dict before the collection.
            self._call_series = (self.series_key(attributes), dict(attributes))
            self._call_attributes = attributes
        return self._call_series

    def flush(self) -> None:
        """Hand every buffered series to its SDK instrument, then forget it; never raises.

        Called before each collection of the pipeline's readers. Flushes run one at a
        time, so a collection starts only once every value recorded before it reached the
        SDK, even while another reader's flush is still handing values over.
        """
        with self._flush_lock:
            with self.lock:
                batches = [(pending, pending.take()) for pending in self._dirty]
                self._dirty.clear()
            if batches:
                self._hand_over(batches)

    def _hand_over(self, batches: list[tuple[PendingInstrument, dict[Any, list[Any]]]]) -> None:
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
                        _warnings.warn(
                            ("flush", type(exc).__name__),
                            "record_metrics: handing a buffered value to the SDK at "
                            "collection failed (%s: %s); that value was dropped",
                            type(exc).__name__,
                            exc,
                        )
        finally:
            otel_context.detach(token)


class PendingInstrument:
    """One SDK instrument's buffered series: key -> [value, attributes as first given].

    Its record methods run with the buffer's lock held (by `record_metrics`).
    """

    __slots__ = ("_buffer", "_dirty", "_series", "record")

    def __init__(self, buffer: CoalescingBuffer, record: Callable[..., object]) -> None:
        self._buffer = buffer
        self._dirty = buffer._dirty
        self.record = record
        self._series: dict[frozenset[Any], list[Any]] = {}

    def _entry(self, value: float, attributes: Mapping[str, object] | None) -> list[Any] | None:
        """The interval's entry of `attributes`' series; None when there was none, after
        starting it with `value`."""
        key, copied = self._buffer.series_of(attributes) if attributes else _NONE
        series = self._series
        entry = series.get(key)
        if entry is None:
            if not series:
                self._dirty.append(self)
            series[key] = [value, copied]
        return entry

    def take(self) -> dict[frozenset[Any], list[Any]]:
        """Return the buffered series and start afresh (the buffer's lock is held)."""
        series, self._series = self._series, {}
        return series

    def set(self, value: float, attributes: Mapping[str, object] | None = None) -> None:
        """A gauge's `set`: the last value of the interval wins."""
        entry = self._entry(value, attributes)
        if entry is not None:
            entry[0] = value

    def add(self, value: float, attributes: Mapping[str, object] | None = None) -> None:
        """A counter's or up-down counter's `add`: the interval's values are summed."""
        entry = self._entry(value, attributes)
        if entry is None:
            return
        copied = entry[1]
        total = entry[0]
        if total is _HANDED_OVER:
            self.record(value, copied)
            return
        summed = total + value
        if summed - summed != 0:
            # Finite values whose sum overflows: the SDK would sum them to an infinity
            # itself but refuses an infinite value, so it gets them one by one, for the
            # rest of the interval.
            entry[0] = _HANDED_OVER
            self.record(total, copied)
            self.record(value, copied)
        else:
            entry[0] = summed


# The series of a value recorded without attributes.
_NONE: Final = (_NO_ATTRIBUTES, None)
# A sum series recorded directly until the next collection (see `add`).
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
