"""How a coalesced histogram's interval reaches the SDK at a flush (see `_coalesce`).

A buffered histogram series holds `[bucket counts, attributes, sum, min, max]`, kept as
the SDK's explicit-bucket aggregation keeps an interval (the counts are None while the
series has one value). The flush records a series of one value as direct recording
would, and hands a longer one into its aggregation's state in one step
(`_otel_internals.add_histogram_interval`), the same state recording each value leaves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nemo.lens import _otel_internals


def hand_over_histogram(
    match: _otel_internals.HistogramMatch,
    record: Callable[..., object],
    series: dict[frozenset[Any], list[Any]],
    failures: list[Exception],
) -> int:
    """Hand one thread's buffered series of a histogram to the SDK (its instrument's
    `record`, its aggregations' `match`); return how many got more than one value.

    A series of one value is recorded; a longer one is handed into its aggregation in one
    step (made first, where the SDK has none, by recording one of its values). A failure
    is appended to `failures`, and the other series still go. The flush lock is held.
    """
    recorded_again = 0
    for entry in series.values():
        counts, attributes, total, low, high = entry
        try:
            if counts is None:  # one value: the SDK records it as it would have
                record(low, attributes)
                continue
            recorded_again += 1
            aggregation = match.aggregation(attributes)
            recorded = None
            if aggregation is None:  # a series the SDK has not seen: one value makes it
                record(low, attributes)
                recorded = low
                aggregation = match.aggregation(attributes)
                if aggregation is None:
                    raise LookupError("the SDK made no series for a histogram's attributes")
            _otel_internals.add_histogram_interval(
                aggregation, counts, total, low, high, recorded=recorded
            )
        except Exception as exc:
            failures.append(exc)
    return recorded_again
