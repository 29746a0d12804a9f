"""One thread's buffered values in a coalescing buffer (`_coalesce`): its shard.

Each recording thread keeps the values it records in a shard of its own, behind a lock
that only that thread and a flush take. A shard's entries are its series; its rows are a
call's view of the entries it found there already, so the next call stores a value with
one look-up.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import Any, Final

from nemo.lens.instruments._int64_room import NO_ROOM

#: One thread's buffered values: instrument -> series key -> entry. An entry is
#: [value, attributes as first given, mark, cap]: a gauge's mark is the `_order` number of
#: its last value once several threads keep values in the buffer; otherwise the mark is 1
#: once the series got a second value in the interval (0 before). A sum's mark is None,
#: or, where the interval's first value went to the SDK at once, what the SDK then holds
#: (its value is the interval's whole sum). A sum's value is `HANDED_OVER` while its
#: values go to the SDK at once. A counter whose sum is an int may add ints up to its cap
#: without spending its thread's int64 budget value by value (`_int64_room.grant_room`);
#: every other entry's cap is `NO_ROOM`. A histogram's entry is [bucket counts (None for one value,
#: `HANDED_OVER` while its values go at once), attributes, sum, min, max].
#: (Its instruments are `_coalesce.PendingInstrument`s, which import this module.)
ShardSeries = dict[Any, dict[frozenset[Any], list[Any]]]

#: A call's view of its series' entries in a shard: key -> (entry, its kind, a detail): a
#: gauge's (no detail), a sum's (the lowest value its kind takes) or a histogram's whose
#: entry holds bucket counts (the boundaries).
Row = dict[str, tuple[list[Any], int, Any]]
ROW_GAUGE: Final = 0
ROW_SUM: Final = 1
ROW_HISTOGRAM: Final = 2


def new_row(
    rows: dict[int, tuple[Mapping[str, Any], dict[frozenset[Any], Row]]],
    kept: Mapping[str, Any],
    key: frozenset[Any],
) -> Row:
    """A new, empty row of `kept`'s series `key` in a shard's `rows` (its lock is held)."""
    by_kept = rows.get(id(kept))
    if by_kept is None:
        by_kept = rows[id(kept)] = (kept, {})
    row: Row = {}
    by_kept[1][key] = row
    return row


class ThreadToken:
    """Lives in one thread's local storage for as long as that thread's state does."""

    __slots__ = ("__weakref__",)


class Shard:
    """One thread's buffered values; its lock is taken by that thread and by a flush."""

    __slots__ = ("__weakref__", "_token", "ended", "int64_budgets", "lock", "rows", "series")

    def __init__(self, token: ThreadToken) -> None:
        self.lock = threading.Lock()
        self.series: ShardSeries = {}
        #: The entries of `series` a call found there already, by the call's `kept` map
        #: (by id: the tuple holds the map, so no other map can take that id), series
        #: key and key: a later call stores a value into one with a single look-up.
        #: Emptied with `series`, whose entries they are.
        self.rows: dict[int, tuple[Mapping[str, Any], dict[frozenset[Any], Row]]] = {}
        #: True once the thread's local storage was freed: it records here no more.
        self.ended = False
        self._token = weakref.ref(token, ShardEnder(self))
        #: Per sum instrument, how much magnitude of ints this thread may still add
        #: before it takes more room from the instrument's int64 guard (see
        #: `PendingInstrument`).
        self.int64_budgets: dict[Any, int] = {}

    def take(self) -> ShardSeries:
        """Return the buffered values and start afresh; until the flush ends, each
        instrument's taken series are in flight (see `PendingInstrument.may_record_now`)."""
        if not self.series:  # a value kept by a call that returned is seen here
            return {}
        with self.lock:
            series, self.series = self.series, {}
            self.rows = {}
            budgets = self.int64_budgets
            for pending, kept in series.items():
                pending.in_flight = kept
                if pending.holds_room:  # the room its entries hold goes back (`return_room`)
                    unspent = 0
                    for entry in kept.values():
                        if entry[3] is not NO_ROOM:
                            unspent += entry[3] - entry[0]
                    if unspent:
                        budgets[pending] = budgets.get(pending, 0) + unspent
        return series


class ShardEnder:
    """Marks a shard ended when its thread's token is freed (holds the shard weakly)."""

    __slots__ = ("_shard",)

    def __init__(self, shard: Shard) -> None:
        self._shard = weakref.ref(shard)

    def __call__(self, _token: object) -> None:
        shard = self._shard()
        if shard is not None:
            shard.ended = True
