"""Coalesced recording: lens's own meters' values reach the SDK at collection.

A synchronous SDK call costs 2.6 to 9 us per value (a `Measurement`, the exemplar filter,
the attribute hash, a lock per reader storage). Between two collections the SDK keeps
only the last value of a gauge series and the sum of a counter or up-down counter series,
so `record_metrics` can keep exactly that itself, for a dict store, and hand each series
to the SDK once when a reader of the pipeline collects, just before the SDK aggregates.
The exported data is the same: same instruments, series, values and per-interval
presence (the interval sum is added in the order the SDK would add it, starting from 0).
A histogram series keeps its interval as the SDK's explicit-bucket aggregation does,
with the boundaries learned from it once the SDK holds a series (values are recorded
directly until then, and where the SDK aggregates otherwise). `_hand_over` hands each
series over: into the SDK's aggregation of it where lens can reach that (a fraction of
an SDK call), else by recording it.

A series new to the SDK (not among the instrument's `known` ones) gets its first value
at once, as direct recording sends it, so the SDK makes the series at record time, as it
would without lens, not inside a collection; a gauge's later values are buffered. A
sum's entry then keeps the interval from that first value and notes what the SDK holds:
the hand-over replaces that with the whole interval, added in the SDK's order
(`SeriesMatch.replace_sum`; where a collection took the first value meanwhile, it adds
the rest). A new histogram series' values all go at once for its first interval (an
interval split between the SDK and the buffer could not keep the sum's bits). An
instrument whose SDK aggregations lens cannot reach buffers a sum's new series instead
(`unmatched`), and records a histogram's values directly.

Only meters of a provider that lens's pipeline built coalesce: the pipeline registers a
`CoalescingBuffer` for its provider and flushes it before each of its readers collects
(`nemo.lens._sdk._coalescing`). Every other meter keeps the direct path.

What differs: the SDK samples no exemplars for coalesced values (they reach it outside
the span that recorded them), and a measurement's timestamp is its collection's. Where
something other than this buffer records a sum or histogram series in the same interval,
the two parts' sums are added as two (the last bits of a float sum may differ).

Values are validated by `record_metrics` before they get here; nothing here raises on
the recording path. A series is keyed as the cardinality limit keys it, as the installed
SDK does (`nemo.lens.instruments._series`). Thread-safe, and threads do not wait for each
other: each thread buffers into a shard of its own, behind a lock that only it and a flush
take, held once per `record_metrics` call for a few dict operations per value and never
while logging or calling the SDK. Within one thread the SDK gets a series' values in the
order given; across threads a sum reaches it as one partial sum per thread, and a gauge
as the value set last. A flush also holds a lock of its own while it hands the values to
the SDK, so flushes run one at a time; `record_metrics` never takes that one, and nothing
is logged under it. A forked child forgets every buffer: its parent's pending values are
the parent's to export (`_forget_buffers_in_child`, a fork hook).
"""

from __future__ import annotations

import itertools
import logging
import threading
import weakref
from bisect import bisect_left
from collections.abc import Callable, Mapping
from typing import Any, Final

from opentelemetry import context as otel_context

from nemo.lens import _fork_hooks, _otel_internals
from nemo.lens._attributes import INT64_MAX
from nemo.lens._warn_once import WarnOnce
from nemo.lens.instruments._hand_over import (
    HANDED_OVER,
    KNOWN_MAX,
    hand_over_histogram,
    hand_over_series,
)
from nemo.lens.instruments._int64_room import NO_ROOM, grant_room, return_room, spend_int64
from nemo.lens.instruments._series import SeriesAttributes, keyed
from nemo.lens.instruments._shard import (
    ROW_GAUGE,
    ROW_HISTOGRAM,
    ROW_SUM,
    Shard,
    ShardSeries,
    ThreadToken,
    new_row,
)

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "record_metrics: coalesced recording")

#: The kinds that coalesce: the SDK keeps their last value, sum or buckets per interval.
COALESCED_KINDS: Final = frozenset({"gauge", "counter", "up_down_counter", "histogram"})

#: The series key of a value recorded without attributes.
_NO_ATTRIBUTES: Final[frozenset[Any]] = frozenset()


class CoalescingBuffer:
    """The values recorded on one pipeline's coalesced instruments since its last collection.

    Each thread keeps the values it records in a shard of its own (`Shard`), behind a
    lock only that thread and a flush take: threads never wait for each other, and one
    `record_metrics` call takes that lock once for all its coalesced values (`keep_call`).
    No logging and no SDK call ever runs under a shard's lock or the buffer's, so a
    logging handler that records metrics, in any thread, cannot deadlock with them.

    A buffered series is exactly one SDK series (keyed by `_series.series_key`), or a
    gauge's last value could be handed over out of order.

    Args:
        single_reader: Also buffer counters, up-down counters and histograms. Only right with one
            reader (lens's pipeline builds one): every reader's storage gets what a flush
            hands over, so a second reader, collecting at other moments, would sum the
            same floats in another grouping (and round differently) than direct recording.
    """

    __slots__ = (
        "__weakref__",
        "_flush_lock",
        "_local",
        "_lock",
        "_pending",
        "_shards",
        "single_reader",
        "threaded",
    )

    def __init__(self, *, single_reader: bool) -> None:
        self.single_reader = single_reader
        # No lock here is taken across fork(): a child never touches its parent's buffers
        # (see `_forget_buffers_in_child`). `_lock` guards the list of shards; a flush
        # holds `_flush_lock` while it hands values to the SDK.
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        #: The calling thread's shard, once it kept a value here.
        self._local = threading.local()
        #: Every thread's shard, in the order the threads first kept a value here.
        self._shards: list[Shard] = []
        #: True once a second thread kept values here: gauge values then carry the order
        #: they were set in, so the value set last wins across threads.
        self.threaded = False
        #: One per SDK instrument, however many groups or registrations record on it.
        self._pending: dict[object, PendingInstrument] = {}

    def coalesces(self, kind: str) -> bool:
        """True when values of instruments of `kind` are buffered here."""
        return kind == "gauge" or (self.single_reader and kind in COALESCED_KINDS)

    def instrument(self, instrument: object, record_name: str, kind: str) -> PendingInstrument:
        """The buffer's side of SDK `instrument` of `kind`, whose own record method is
        `record_name` (`set`, `add` or `record`). Called under the registry lock."""
        pending = self._pending.get(instrument)
        if pending is None:
            pending = self._pending[instrument] = PendingInstrument(
                self, instrument, getattr(instrument, record_name), kind
            )
        return pending

    def shard(self) -> Shard:
        """The calling thread's shard, made on its first value.

        The thread's local storage also holds a token the shard watches: it is freed when
        the thread's state is (a `threading` thread, or one Python never started, at its
        end; the main thread only at interpreter exit, so atexit handlers record), and
        only then is the shard marked ended, to be taken one last time and dropped.
        """
        try:
            shard: Shard = self._local.shard
        except AttributeError:
            token = ThreadToken()
            shard = Shard(token)
            self._local.shard, self._local.token = shard, token
            with self._lock:
                self._shards.append(shard)
                # Back to False only at the end of a flush (see `_hand_over`).
                self.threaded = self.threaded or len(self._shards) > 1
        return shard

    def keep_call(
        self,
        kept: Mapping[str, tuple[PendingInstrument, float]],
        items: Mapping[Any, Any],
        attributes: Mapping[str, object] | None,
    ) -> dict[Any, Any]:
        """Keep the values of one `record_metrics` call that need nothing but a store, under
        one hold of the thread's shard lock; return the rest, for the caller's full path.

        `kept` maps a key whose instrument coalesces here to it and the lowest value its
        kind takes; a value kept is a float in [lowest, inf) or an int in [lowest, int64].
        """
        rest: dict[Any, Any] = {}
        if attributes:
            if type(attributes) is not SeriesAttributes:
                attributes = keyed(attributes)
            key = attributes.series_key
            if key is None:  # a set no series key can hold: the SDK decides, at once
                return dict(items)
        else:
            key, attributes = _NO_ATTRIBUTES, None
        try:
            shard = self._local.shard
        except AttributeError:
            shard = self.shard()
        # What the SDK must get at once, after the lock is released: a new series of an
        # instrument that records directly, or a sum past a float (see below).
        direct: list[tuple[PendingInstrument, Any, Mapping[str, object] | None]] = []
        threaded = self.threaded
        lock = shard.lock
        lock.acquire()  # not `with`: that costs a lock ~80 ns more per hold
        try:
            rows = shard.rows
            by_kept = rows.get(id(kept))
            row = None if by_kept is None else by_kept[1].get(key)
            for name, value in items.items():
                value_type = type(value)
                if row is not None and (hit := row.get(name)) is not None:
                    # A series kept before in this interval, as the full path below
                    # keeps it: what needs more than a store goes that path still.
                    kept_entry, row_kind, detail = hit
                    if row_kind == ROW_GAUGE:
                        if value_type is float and value - value == 0:
                            kept_entry[0] = value
                            if threaded:  # else its mark is 1 already: set again
                                kept_entry[2] = next(_order)
                            continue
                    elif row_kind == ROW_SUM:
                        if value_type is int:  # a counter's, within the room it holds
                            if (
                                value >= 0
                                and kept_entry[3] is not NO_ROOM
                                and (summed := kept_entry[0] + value) <= kept_entry[3]
                            ):
                                kept_entry[0] = summed
                                continue
                        elif (
                            value_type is float
                            and detail <= value < _INFINITY
                            and type(total := kept_entry[0]) is float
                        ):
                            summed = total + value
                            if summed - summed == 0:
                                kept_entry[0] = summed
                                continue
                    elif (value_type is float and 0 <= value < _INFINITY) or (
                        value_type is int and 0 <= value <= INT64_MAX
                    ):  # a histogram's, with its bucket counts
                        kept_entry[0][bisect_left(detail, value)] += 1
                        kept_entry[2] += value
                        if value < kept_entry[3]:
                            kept_entry[3] = value
                        elif value > kept_entry[4]:
                            kept_entry[4] = value
                        continue
                entry = kept.get(name)
                if entry is None:
                    rest[name] = value
                    continue
                pending, lowest = entry
                if value_type is float:
                    if not lowest <= value < _INFINITY:
                        rest[name] = value
                        continue
                elif value_type is not int or not lowest <= value <= INT64_MAX:
                    rest[name] = value
                    continue
                series = shard.series.get(pending)
                if series is None:
                    series = shard.series[pending] = {}
                kept_entry = series.get(key)
                if pending.last_wins:
                    if kept_entry is not None:
                        kept_entry[0] = value
                        kept_entry[2] = next(_order) if threaded else 1
                        if value_type is float:
                            if row is None:
                                row = new_row(rows, kept, key)
                            row[name] = (kept_entry, ROW_GAUGE, None)
                    elif key not in pending.known and pending.may_record_now(key):
                        direct.append((pending, value, attributes))
                        pending.remember(key)
                    else:
                        series[key] = [value, attributes, next(_order) if threaded else 0, NO_ROOM]
                    continue
                if pending.holds_room and value_type is int and kept_entry is not None:
                    # A counter's entry within the int64 room it holds (`ENTRY_ROOM`)
                    # takes an int with one comparison against its cap.
                    total = kept_entry[0]
                    if total is not HANDED_OVER and (summed := total + value) <= kept_entry[3]:
                        kept_entry[0] = summed
                        if row is None:
                            row = new_row(rows, kept, key)
                        row[name] = (kept_entry, ROW_SUM, lowest)
                        continue
                if pending.histogram:
                    boundaries = pending.boundaries
                    if kept_entry is None:
                        if pending.unmatched:  # never handed over: the SDK gets it all
                            direct.append((pending, value, attributes))
                        elif boundaries is None or (
                            key not in pending.known and pending.may_record_now(key)
                        ):
                            # New to the SDK (or its buckets unknown yet): its values go
                            # at once for the rest of the interval, as the SDK sums them.
                            direct.append((pending, value, attributes))
                            series[key] = [HANDED_OVER, attributes, 0, 0, 0]
                            pending.remember(key)
                        else:
                            series[key] = [None, attributes, 0 + value, value, value]
                    elif kept_entry[0] is HANDED_OVER or boundaries is None:
                        direct.append((pending, value, kept_entry[1]))
                    else:
                        counts = kept_entry[0]
                        if counts is None:  # the second value: the first gets its bucket
                            counts = kept_entry[0] = [0] * (len(boundaries) + 1)
                            counts[bisect_left(boundaries, kept_entry[3])] += 1
                        counts[bisect_left(boundaries, value)] += 1
                        kept_entry[2] += value  # in order from 0 + the first: the SDK's sum
                        if value < kept_entry[3]:
                            kept_entry[3] = value
                        elif value > kept_entry[4]:
                            kept_entry[4] = value
                        if row is None:
                            row = new_row(rows, kept, key)
                        row[name] = (kept_entry, ROW_HISTOGRAM, boundaries)
                    continue
                if value_type is int:
                    if not pending.passed_int64:
                        # The int64 guard (see `PendingInstrument`).
                        value = spend_int64(
                            shard.int64_budgets, shard.series, pending, kept_entry, value
                        )
                    else:
                        value = float(value)
                if kept_entry is None:
                    if (
                        key not in pending.known
                        and not pending.unmatched
                        and pending.may_record_now(key)
                    ):
                        # New to the SDK: it gets the value at once; the entry sums the
                        # interval from it (as the SDK does, from 0) and notes what the
                        # SDK then holds, for the hand-over to replace. Before lens
                        # found where the SDK aggregates, it cannot replace: the values
                        # go at once until it has (see below).
                        direct.append((pending, value, attributes))
                        first = 0 + value
                        kept_entry = series[key] = [
                            first if pending.match is not None else HANDED_OVER,
                            attributes,
                            first,
                            NO_ROOM,
                        ]
                        pending.remember(key)
                    else:
                        kept_entry = series[key] = [value, attributes, None, NO_ROOM]
                    if type(kept_entry[0]) is int and pending.holds_room:
                        grant_room(shard.int64_budgets, pending, kept_entry)
                    continue
                total = kept_entry[0]
                if total is HANDED_OVER:
                    sent = kept_entry[2]
                    if sent is None or pending.match is None:
                        direct.append((pending, value, kept_entry[1]))
                        continue
                    total = sent  # what the SDK holds: the interval is kept from here on
                    kept_entry[0] = sent
                if kept_entry[3] is not NO_ROOM:  # a float joins a counter's int sum
                    return_room(shard.int64_budgets, pending, kept_entry)
                summed = total + value
                if summed - summed == 0:
                    kept_entry[0] = summed
                    if type(summed) is int:
                        if pending.holds_room:
                            grant_room(shard.int64_budgets, pending, kept_entry)
                    else:
                        if row is None:
                            row = new_row(rows, kept, key)
                        row[name] = (kept_entry, ROW_SUM, lowest)
                    continue
                _hand_over_overflow(pending, kept_entry, value, direct)
        finally:
            lock.release()
        if direct:
            _record_now(direct)
        return rest

    def buffered_entries(self) -> list[tuple[PendingInstrument, list[Any]]]:
        """Every buffered entry with its instrument, thread by thread (for tests)."""
        with self._lock:
            shards = list(self._shards)
        entries: list[tuple[PendingInstrument, list[Any]]] = []
        for shard in shards:
            with shard.lock:
                for pending, series in shard.series.items():
                    entries.extend((pending, entry) for entry in series.values())
        return entries

    def flush(self) -> None:
        """Hand every buffered series to its SDK instrument, then forget it; never raises.

        Called before each collection of the pipeline's readers. Flushes run one at a
        time, so a collection starts only once every value recorded before it reached the
        SDK, even while another reader's flush is still handing values over.
        """
        failures: list[Exception] = []
        with self._flush_lock:
            with self._lock:
                shards = list(self._shards)
            # A thread that had ended before its shard is taken records no more: once
            # taken, that shard goes, and the int64 room it had not spent goes back (one
            # found ended only later waits for the next flush).
            ended = [shard for shard in shards if shard.ended]
            taken = [series for series in map(Shard.take, shards) if series]
            if ended:
                with self._lock:
                    self._shards = [shard for shard in self._shards if shard not in ended]
                for shard in ended:
                    for pending, budget in shard.int64_budgets.items():
                        with pending.int64_lock:
                            pending.give_back_int64_room(budget)
            self._hand_over(taken, failures)
        # Logged once the flush lock is released: a logging handler may call back into
        # lens, and a flush of its own there must not wait for this one.
        for pending in list(self._pending.values()):
            if pending.passed_int64 == 1:
                pending.passed_int64 = 2
                _warnings.warn(
                    ("int64-sum", pending.name),
                    "record_metrics: the running sum of %r would pass int64, which OTLP "
                    "cannot carry; its values are recorded as floats from now on",
                    pending.name,
                )
        for exc in failures:
            _warnings.warn(
                ("flush", type(exc).__name__),
                "record_metrics: handing a buffered value to the SDK at collection failed "
                "(%s: %s); that value was dropped",
                type(exc).__name__,
                exc,
            )

    def _hand_over(self, taken: list[ShardSeries], failures: list[Exception]) -> None:
        """Hand `taken` to the SDK (see `_hand_over`); then each instrument not yet
        handing intervals into the SDK's aggregations looks for them."""
        if len(taken) > 1:
            _keep_latest_gauge_values(taken)
        for pending in list(self._pending.values()):
            if pending.forgets:  # only this interval's series will count as held
                pending.known = {}
        # An empty context: a collection started inside a span must not lend that span's
        # trace to exemplars of values recorded elsewhere (a reader's thread has one).
        # Nothing taken, nothing to hand: the context is left unread (on 1.23 the first
        # read of a process loads the runtime context, an entry-point scan).
        token = None
        if taken and otel_context.get_current():
            token = otel_context.attach(otel_context.Context())
        try:
            # A sum several threads added to reaches the SDK as one value per thread,
            # which it adds up.
            for series_by_instrument in taken:
                for pending, series in series_by_instrument.items():
                    if pending.histogram:
                        hand_over_histogram(pending, series, failures)
                    else:
                        hand_over_series(pending, series, failures)
        finally:
            if token is not None:
                otel_context.detach(token)
            # Several threads kept values this interval, or keep them now: buffer all.
            with self._lock:
                self.threaded = len(self._shards) > 1
            for pending in list(self._pending.values()):
                pending.in_flight = None
                if pending.match is None:
                    pending.learn_match()


#: Orders gauge values across threads: the last one set wins, whichever thread set it.
#: From 2: a mark of 1 says only "set again" (before a second thread came), which any
#: order number set later beats.
_order = itertools.count(2)

_INFINITY: Final = float("inf")


def _record_now(direct: list[tuple[PendingInstrument, Any, Mapping[str, object] | None]]) -> None:
    """Hand the SDK what `keep_call` could not keep; a failure is warned and the other
    values still record. An instrument that has not found its SDK aggregations looks
    for them once the SDK holds a series."""
    for pending, number, given in direct:
        try:
            pending.record(number, given)
        except Exception as exc:
            _warnings.warn(
                ("direct", pending.name, type(exc).__name__),
                "record_metrics: recording %r failed (%s: %s); the value was dropped",
                pending.name,
                type(exc).__name__,
                exc,
            )
        if pending.match is None and not pending.unmatched:
            pending.learn_match()
            pending.unmatched = pending.match is None


def _hand_over_overflow(
    pending: PendingInstrument,
    entry: list[Any],
    value: float,
    direct: list[tuple[PendingInstrument, Any, Mapping[str, object] | None]],
) -> None:
    """Finite values whose sum overflows: the SDK would sum them to an infinity itself but
    refuses an infinite value, so it gets them one by one (`direct`), for the rest of the
    interval. Where the SDK holds the interval's first value already, it gets the rest of
    the sum (the two then add up to within a rounding of it, on the way to infinity). The
    shard's lock is held."""
    total, entry[0] = entry[0], HANDED_OVER
    sent, entry[2] = entry[2], None
    direct.append((pending, total if sent is None else total - sent, entry[1]))
    direct.append((pending, value, entry[1]))


def _keep_latest_gauge_values(taken: list[ShardSeries]) -> None:
    """Of a gauge series several threads set, keep only the value set last."""
    latest: dict[tuple[PendingInstrument, frozenset[Any]], list[Any]] = {}
    for series_by_instrument in taken:
        for pending, series in series_by_instrument.items():
            if pending.last_wins:
                for key, entry in series.items():
                    seen = latest.setdefault((pending, key), entry)
                    if entry[2] > seen[2]:
                        latest[pending, key] = entry
    for series_by_instrument in taken:
        for pending, series in series_by_instrument.items():
            if pending.last_wins:
                for key in [
                    key for key, entry in series.items() if latest[pending, key] is not entry
                ]:
                    del series[key]


class PendingInstrument:
    """One SDK instrument of a buffer: how its values are kept and handed over.

    A sum's ints are kept within int64 here, as `record_metrics`'s int64 guard does for
    direct recording (the SDK sums the ints it is given, and a sum past int64 makes every
    export fail to encode): the bound is the total of the magnitudes of the ints
    recorded, and once the next one would pass INT64_MAX, it and every later value are
    kept as floats, which makes the SDK's sum a double. Each thread spends a budget taken
    from the instrument's remaining room in chunks, so it checks the bound under its
    shard's lock alone; with one thread that is the exact bound, with several it may
    switch a little early (never past the bound). A counter's buffered series holds part
    of its thread's budget itself (its values are never negative, so its int sum is their
    magnitude): a later int within it costs one comparison (`_int64_room.grant_room`),
    and with several threads a series of another thread sums its ints within that room
    until the next flush, after the switch.
    """

    __slots__ = (
        "_as_kept",
        "_instrument",
        "_int64_left",
        "_kind",
        "_known_in",
        "boundaries",
        "buffer",
        "forgets",
        "histogram",
        "holds_room",
        "in_flight",
        "int64_lock",
        "known",
        "last_wins",
        "match",
        "name",
        "passed_int64",
        "record",
        "unmatched",
    )

    def __init__(
        self, buffer: CoalescingBuffer, instrument: object, record: Callable[..., object], kind: str
    ) -> None:
        self.buffer = buffer
        self.name = str(getattr(instrument, "name", ""))
        self._instrument = instrument
        self._kind = kind
        #: How `keep` hands its one value to `CoalescingBuffer.keep_call`.
        lowest = 0 if kind in ("counter", "histogram") else -_INFINITY
        self._as_kept = {"": (self, lowest)}
        #: Where the SDK aggregates the instrument's series, once found (`learn_match`),
        #: and a histogram's bucket boundaries: its values are recorded directly while
        #: `boundaries` is None.
        self.histogram = kind == "histogram"
        self.match: _otel_internals.SeriesMatch | None = None
        self.boundaries: tuple[float, ...] | None = None
        #: True once the SDK held a series but lens found no aggregations to hand into:
        #: a sum's new series are then buffered, not sent at once (the hand-over could not
        #: replace the value sent), a histogram's values all sent at once, until a flush
        #: finds them after all.
        self.unmatched = False
        #: The series the SDK holds, as far as lens saw (at most `KNOWN_MAX`), each with
        #: its aggregation once found; the SDK mapping they were found in; and True once
        #: the SDK replaced that mapping at a collection (it forgets its series there).
        self.known: dict[frozenset[Any], Any] = {}
        self._known_in: object | None = None
        self.forgets = False
        #: A gauge's (its interval's last value wins); else a sum's (its values add up).
        self.last_wins = kind == "gauge"
        #: A counter's: its values are never negative, so the sum of an entry's ints is
        #: their magnitude, and an entry may hold int64 room (see `_int64_room.grant_room`).
        self.holds_room = kind == "counter"
        self.record = record
        # The int64 guard: the room no thread has taken yet (under `int64_lock`), and 0,
        # 1 (passed, not yet warned) or 2 (warned).
        self.int64_lock = threading.Lock()
        self._int64_left = INT64_MAX
        self.passed_int64 = 0
        #: The series a flush has taken and not yet handed over (under a shard's lock).
        self.in_flight: dict[frozenset[Any], list[Any]] | None = None

    def keep(self, value: float, attributes: Mapping[str, object] | None = None) -> None:
        """The instrument's `set` or `add`: keep `value` (already checked by the caller) for
        the next collection.

        Any mapping of attributes works; `record_metrics`'s are keyed once a call
        (`SeriesAttributes`), others are keyed and copied here.
        """
        if not self.buffer.keep_call(self._as_kept, {"": value}, attributes):
            return
        # A set no series key can hold, or a negative value for a counter (whose held room
        # counts on none): the SDK decides, at once (a sum's int behind the int64 guard).
        if type(value) is int and not self.last_wins and not self.histogram:
            if self.passed_int64:
                value = float(value)
            else:
                magnitude = value if value >= 0 else -value
                with self.int64_lock:
                    if magnitude > self.take_int64_room(magnitude, 0, chunk=0):
                        value = float(value)
        self.record(value, attributes)

    def learn_match(self) -> None:
        """Find where the SDK aggregates this instrument's series, to hand intervals into
        them from now on (a histogram's values are buffered only from then on); never
        raises. Called at the end of a flush, and by a recording thread once the SDK got
        a value of it at once."""
        try:
            match = _otel_internals.series_match(self._instrument, self._kind)
        except Exception:  # an SDK lens does not know: no hand-over into it
            match = None
        if match is not None:
            self.match = match
            self.boundaries = match.boundaries
            self.unmatched = False
            if match.lock is not None:  # the SDK discards its series at delta collections
                self.forgets = True

    def current_aggregations(self, match: _otel_internals.SeriesMatch) -> Mapping[Any, Any]:
        """The SDK's current mapping of the instrument's series to their aggregations. Where
        it replaced the one the known aggregations were found in, they are dropped for good
        (the SDK forgets its series at each collection). The flush lock is held."""
        aggregations = match.aggregations()
        if not self.forgets and aggregations is not self._known_in:
            if self._known_in is None:
                self._known_in = aggregations
            else:  # the SDK replaced it at a collection: it forgets its series there
                self.forgets = True
                self.known = dict.fromkeys(list(self.known))
                self._known_in = None  # nothing holds the discarded mapping alive
        return aggregations

    def remember(self, key: frozenset[Any]) -> None:
        """Count series `key` as one the SDK holds (it just got a value at once)."""
        known = self.known
        if len(known) < KNOWN_MAX:
            known[key] = None

    def may_record_now(self, key: frozenset[Any]) -> bool:
        """True when series `key` (buffered nowhere in the caller's shard) may go to the
        SDK at once: one thread keeps values here, and no value of it is being handed
        over, which the SDK would otherwise get after this newer one."""
        in_flight = self.in_flight
        return not self.buffer.threaded and (in_flight is None or key not in in_flight)

    def give_back_int64_room(self, budget: int) -> None:
        """Return room an ended thread took and did not spend. `int64_lock` is held."""
        self._int64_left += budget

    def take_int64_room(self, magnitude: int, budget: int, *, chunk: int = 2**48) -> int:
        """A thread's budget of `budget` topped up for an int of `magnitude` (by at least
        `chunk`, if the room left allows); a budget still below `magnitude` means the int
        would pass int64 (and every later value is summed as a float). `int64_lock` is
        held. The chunk lets a thread check the bound without this lock for 2**48 of
        magnitude; 32,768 live threads could hold all the room (an ended one gives its
        back)."""
        taken = min(max(magnitude, chunk), self._int64_left)
        self._int64_left -= taken
        budget += taken
        if magnitude > budget:
            self.passed_int64 = self.passed_int64 or 1
        return budget


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
