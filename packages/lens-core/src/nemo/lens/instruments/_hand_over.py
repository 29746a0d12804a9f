"""How a buffered interval reaches the SDK at a flush (see `_coalesce`).

Where lens can reach the aggregations the SDK keeps an instrument's series in
(`_otel_internals.series_match`: one reader, one view match, the kind's own aggregation),
a series the SDK holds takes its interval into that state in one step: a gauge's last
value, a sum's interval sum added to the running one, a histogram's bucket counts, sum,
min and max. That is the state recording each value leaves, for a fraction of one SDK
call (no measurement, no exemplar filter, no attribute hashing). A series the SDK holds
no aggregation of is recorded as direct recording would: one `set` or `add`; a histogram
series is made by recording one of its values, and then takes the rest.

Each instrument remembers the aggregation it found per series (`PendingInstrument.known`,
with the SDK mapping it was found in), so a later interval finds it in one look-up; where
the SDK replaces that mapping at a collection (a release forgetting delta series), the
remembered ones are dropped, each interval looks its series up afresh, and only the last
interval's series count as held.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from nemo.lens import _otel_internals

#: A buffered series whose values go to the SDK at once for the rest of the interval (its
#: entry's first field): a sum's that overflowed, a histogram's whose buckets were unknown.
HANDED_OVER: Final = object()

#: The series per instrument whose aggregations are remembered (and which count as ones
#: the SDK holds, so their values are buffered): about 300 bytes each (the series key
#: and a dict slot), beside the SDK's own kilobyte per series.
KNOWN_MAX: Final = 2**16


class PendingInstrument(Protocol):
    """What a hand-over reads of `_coalesce.PendingInstrument`."""

    record: Callable[..., object]
    match: _otel_internals.SeriesMatch | None
    known: dict[frozenset[Any], Any]
    forgets: bool
    last_wins: bool

    def current_aggregations(self, match: _otel_internals.SeriesMatch) -> Mapping[Any, Any]: ...


def hand_over_series(
    pending: PendingInstrument, series: dict[frozenset[Any], list[Any]], failures: list[Exception]
) -> None:
    """Hand one thread's buffered series of a gauge or a sum to the SDK. A failure is
    appended to `failures`, and the other series still go. The flush lock is held."""
    record = pending.record
    match = pending.match
    if match is not None and match.lock is not None:
        _hand_over_locked(pending, match, series, failures)
        return
    aggregations = None
    if match is not None:
        try:
            aggregations = pending.current_aggregations(match)
        except Exception as exc:  # a release lens does not know: each series is recorded
            failures.append(exc)
    if match is None or aggregations is None:
        for entry in series.values():
            if entry[0] is not HANDED_OVER:  # (no sum's first value was sent: see keep_call)
                try:
                    record(entry[0], entry[1])
                except Exception as exc:
                    failures.append(exc)
        return
    sums = not pending.last_wins
    known = pending.known
    hand_into = match.add_to_sum if sums else match.set_last_value
    for key, entry in series.items():
        value = entry[0]
        if value is HANDED_OVER:
            continue
        try:
            if sums and entry[2] is not None:  # the SDK holds the interval's first value
                if not _only_the_first(value, entry[2]):
                    aggregation = _aggregation_of(pending, match, aggregations, key, entry[1])
                    if aggregation is None:  # it lost that value: the rest still goes
                        record(value - entry[2], entry[1])
                    else:
                        match.replace_sum(aggregation, entry[2], value)
                continue
            aggregation = known.get(key)
            if aggregation is None:
                aggregation = _aggregation_of(pending, match, aggregations, key, entry[1])
                if aggregation is None:
                    record(value, entry[1])
                    if not pending.forgets:  # remembered for the next interval
                        _aggregation_of(pending, match, aggregations, key, entry[1])
                    continue
            hand_into(aggregation, value)
        except Exception as exc:
            failures.append(exc)
    if pending.forgets:
        _remember_interval(pending, series)


def _hand_over_locked(
    pending: PendingInstrument,
    match: _otel_internals.SeriesMatch,
    series: dict[frozenset[Any], list[Any]],
    failures: list[Exception],
) -> None:
    """`hand_over_series` where the SDK discards a series' aggregation at each delta
    collection: each series is looked up and written under the lock the SDK's own
    recording and collection take (its view match's, then the aggregation's), so no value
    lands in an aggregation a concurrent collection has just discarded."""
    assert match.lock is not None
    sums = not pending.last_wins
    for entry in series.values():
        value, attributes, sent = entry[0], entry[1], entry[2] if sums else None
        if value is HANDED_OVER or (sent is not None and _only_the_first(value, sent)):
            continue
        try:
            with match.lock:
                aggregation = match.find(match.aggregations(), attributes)
                if aggregation is not None:
                    if sent is not None:
                        match.replace_sum(aggregation, sent, value)
                    elif sums:
                        match.add_to_sum(aggregation, value)
                    else:
                        match.set_last_value(aggregation, value)
            if aggregation is None:  # made by recording (the rest, if the first was sent)
                pending.record(value if sent is None else value - sent, attributes)
        except Exception as exc:
            failures.append(exc)
    _remember_interval(pending, series)


def _only_the_first(total: float, sent: float) -> bool:
    """True when a sum's interval holds only the value the SDK got at once."""
    return type(total) is type(sent) and total == sent


def hand_over_histogram(
    pending: PendingInstrument, series: dict[frozenset[Any], list[Any]], failures: list[Exception]
) -> None:
    """Hand one thread's buffered series of a histogram to the SDK (kept as buckets only
    once `pending.match` was found). A failure is appended to `failures`, and the other
    series still go. The flush lock is held."""
    record = pending.record
    match = pending.match
    if match is None:  # before it is found, every kept value went to the SDK at once
        return
    for key, entry in series.items():
        counts, attributes, total, low, high = entry
        if counts is HANDED_OVER:
            continue
        try:
            if counts is None:  # one value: in its bucket
                counts = [0] * (len(match.boundaries or ()) + 1)
                counts[bisect_left(match.boundaries or (), low)] = 1
            interval = (counts, total, low, high)
            if _histogram_into(pending, match, key, attributes, interval, None):
                continue
            # A series the SDK has not seen: one value makes it, the rest joins it.
            record(low, attributes)
            if not _histogram_into(pending, match, key, attributes, interval, low):
                raise LookupError("the SDK made no series for a histogram's attributes")
        except Exception as exc:
            failures.append(exc)
    if pending.forgets:
        _remember_interval(pending, series)


def _histogram_into(
    pending: PendingInstrument,
    match: _otel_internals.SeriesMatch,
    key: frozenset[Any],
    attributes: Mapping[str, object] | None,
    interval: tuple[list[int], float, float, float],
    recorded: float | None,
) -> bool:
    """Hand a histogram series' interval into its aggregation (see
    `add_histogram_interval` for `recorded`); False while the SDK holds none. Under the
    SDK's lock where it discards aggregations at delta collections."""
    counts, total, low, high = interval
    if match.lock is None:
        aggregations = pending.current_aggregations(match)
        aggregation = _aggregation_of(pending, match, aggregations, key, attributes)
        if aggregation is None:
            return False
        _otel_internals.add_histogram_interval(
            aggregation, counts, total, low, high, recorded=recorded
        )
        return True
    with match.lock:
        aggregation = match.find(match.aggregations(), attributes)
        if aggregation is None:
            return False
        _otel_internals.add_histogram_interval(
            aggregation, counts, total, low, high, recorded=recorded
        )
        return True


def _aggregation_of(
    pending: PendingInstrument,
    match: _otel_internals.SeriesMatch,
    aggregations: Mapping[Any, Any],
    key: frozenset[Any],
    attributes: Mapping[str, object] | None,
) -> Any:
    """The aggregation the SDK keeps series `key` in (remembered, or found and then
    remembered while there is room), or None while it holds none."""
    known = pending.known
    aggregation = known.get(key)
    if aggregation is None:
        aggregation = match.find(aggregations, attributes)
        if (
            aggregation is not None
            and not pending.forgets
            and (key in known or len(known) < KNOWN_MAX)
        ):
            known[key] = aggregation
    return aggregation


def _remember_interval(pending: PendingInstrument, series: dict[frozenset[Any], list[Any]]) -> None:
    """Where the SDK forgets its series at each collection, lens remembers only the series
    of the interval just handed over (each flush starts afresh), as the ones likely to
    come back: memory follows the live series, not every series ever seen."""
    known = pending.known
    for key in series:
        if len(known) >= KNOWN_MAX:
            return
        known[key] = None
