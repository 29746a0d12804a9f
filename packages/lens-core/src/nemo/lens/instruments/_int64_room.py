"""The int64 guard of a coalesced sum's ints, as each thread's shard keeps it (`_coalesce`).

A sum's ints are kept within int64 as `record_metrics`'s guard keeps direct recording's
(see `_coalesce.PendingInstrument`): each thread spends a budget taken in chunks from the
instrument's room, and a counter's buffered entry holds part of that budget itself, so
its next int costs one comparison against the entry's cap (`entry[3]`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final, Protocol


class Pending(Protocol):
    """What the guard reads of `_coalesce.PendingInstrument`."""

    int64_lock: Any

    def take_int64_room(self, magnitude: int, budget: int, *, chunk: int = ...) -> int: ...


#: The cap of an entry holding no int64 room: no sum is at most it.
NO_ROOM: Final = -math.inf
#: How much of its thread's int64 budget a counter's entry holds at most: its later ints
#: then cost one comparison. Ints past it take more; what it does not spend goes back at
#: the flush, or when the thread's budget runs short (so the switch to floats stays exact).
ENTRY_ROOM: Final = 2**40


def spend_int64(
    budgets: dict[Any, int],
    series: Mapping[Any, dict[Any, list[Any]]],
    pending: Pending,
    entry: list[Any] | None,
    value: int,
) -> int | float:
    """`value`, an int for sum `pending` (into `entry`, None for a new series), as it may
    be summed: its magnitude spent from the thread's budget, which first takes back the
    room `entry` holds, then more room from the instrument and, before giving up, the
    room every other entry of the thread holds; a float once ints could take the SDK's
    sum past int64. `budgets` and `series` are the thread's shard's, whose lock is held."""
    magnitude = value if value >= 0 else -value
    if entry is not None and entry[3] is not NO_ROOM:
        return_room(budgets, pending, entry)
    budget = budgets.get(pending, 0)
    if magnitude > budget:
        with pending.int64_lock:
            budget = pending.take_int64_room(magnitude, budget)
        if magnitude > budget:
            # Room other entries hold would let this int pass: with one thread, the ints
            # switch to floats exactly where direct recording switches.
            for held in series.get(pending, {}).values():
                if held[3] is not NO_ROOM:
                    budget += held[3] - held[0]
                    held[3] = NO_ROOM
            if magnitude > budget:
                budgets[pending] = budget
                return float(value)
    budgets[pending] = budget - magnitude
    return value


def grant_room(budgets: dict[Any, int], pending: Pending, entry: list[Any]) -> None:
    """Let counter `entry`, whose sum is an int, take later ints without the thread's
    budget: it holds up to `ENTRY_ROOM` of that budget (what is left of it), so its sum
    may grow to the cap in `entry[3]`. The shard's lock is held."""
    budget = budgets.get(pending, 0)
    room = budget if budget < ENTRY_ROOM else ENTRY_ROOM
    budgets[pending] = budget - room
    entry[3] = entry[0] + room


def return_room(budgets: dict[Any, int], pending: Pending, entry: list[Any]) -> None:
    """Give the room counter `entry` holds and did not spend back to the thread's budget
    (its sum is still the int it was granted on). The shard's lock is held."""
    budgets[pending] = budgets.get(pending, 0) + entry[3] - entry[0]
    entry[3] = NO_ROOM
