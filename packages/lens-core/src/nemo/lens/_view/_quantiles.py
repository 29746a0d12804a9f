"""Quantiles from histogram bucket counts, and exponential buckets as explicit ones.

A quantile falls in the bucket where the running count reaches its rank and is placed by
linear interpolation inside that bucket, as Prometheus's `histogram_quantile` does. The
open ends use the point's min and max when the point carries them, else the nearest
finite boundary.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate

#: The quantiles a histogram's chart draws, highest first (as its columns are).
DRAWN: tuple[float, ...] = (0.99, 0.9, 0.5)


def quantile(
    q: float,
    bounds: Sequence[float],
    counts: Sequence[int],
    low: float | None = None,
    high: float | None = None,
) -> float:
    """The `q`-quantile of the values counted in buckets `counts` split at `bounds`
    (len(counts) == len(bounds) + 1, the SDK's upper-inclusive buckets); NaN for no
    values. `low`/`high` are the smallest and largest value, where known."""
    total = sum(counts)
    if total <= 0 or len(counts) != len(bounds) + 1:
        return math.nan
    rank = q * total
    running = 0
    for index, count in enumerate(counts):
        if count <= 0:
            continue
        if running + count >= rank:
            return _placed(index, rank - running, bounds, counts, low, high)
        running += count
    return _past_the_last(bounds, high)


def quantiles(
    qs: Sequence[float],
    bounds: Sequence[float],
    counts: Sequence[int],
    low: float | None = None,
    high: float | None = None,
) -> list[float]:
    """`quantile(q, ...)` for each of `qs` (each above 0), the counts summed once and each
    rank's bucket found by bisection (what a histogram point's three quantiles cost)."""
    if not counts or min(counts) < 0 or len(counts) != len(bounds) + 1:
        return [quantile(q, bounds, counts, low, high) for q in qs]  # the rare cases
    running = list(accumulate(counts))
    total = running[-1]
    if total <= 0:
        return [math.nan for _ in qs]
    found = []
    for q in qs:
        rank = q * total
        # No count is negative: the first bucket whose running count reaches the rank
        # is the one the walk in quantile() stops at (an empty one never is: rank > 0).
        index = bisect_left(running, rank)
        if index == len(running):
            found.append(_past_the_last(bounds, high))
        else:
            before = running[index - 1] if index else 0
            found.append(_placed(index, rank - before, bounds, counts, low, high))
    return found


def _placed(
    index: int,
    rank: float,
    bounds: Sequence[float],
    counts: Sequence[int],
    low: float | None,
    high: float | None,
) -> float:
    """The value of rank `rank` (counted from the bucket's start) inside bucket `index`."""
    lower = bounds[index - 1] if index > 0 else _open_low(bounds, low)
    upper = bounds[index] if index < len(bounds) else _open_high(bounds, high)
    if low is not None:
        lower = max(lower, low)
    if high is not None:
        upper = min(upper, high)
    if upper < lower:
        return lower
    return lower + (upper - lower) * rank / counts[index]


def _past_the_last(bounds: Sequence[float], high: float | None) -> float:
    return high if high is not None else (bounds[-1] if bounds else math.nan)


def _open_low(bounds: Sequence[float], low: float | None) -> float:
    if low is not None:
        return low
    if not bounds:
        return 0.0
    return min(0.0, bounds[0])


def _open_high(bounds: Sequence[float], high: float | None) -> float:
    if high is not None:
        return high
    return bounds[-1] if bounds else 0.0


#: The scales OTLP allows an exponential histogram.
MIN_SCALE, MAX_SCALE = -10, 20


def exponential_buckets(
    scale: int,
    zero_count: int,
    positive: tuple[int, Sequence[int]],
    negative: tuple[int, Sequence[int]],
    zero_threshold: float = 0.0,
) -> tuple[list[float], list[int]]:
    """An exponential histogram's buckets as (bounds, counts) of explicit buckets.

    Bucket `i` of the positive range holds (base**i, base**(i+1)] with base = 2**(2**-scale);
    the negative range mirrors it. The zero bucket holds [-threshold, threshold]; with no
    threshold its width is the smallest a float has, so its values sit at 0. An empty
    bucket at each end keeps the outermost buckets' own limits. `positive` and `negative`
    are (offset, counts). Raises OverflowError when a bound is past any float.
    """
    base = 2.0 ** (2.0**-scale)
    negative_offset, negative_counts = negative
    positive_offset, positive_counts = positive
    bounds = [-(base ** (negative_offset + len(negative_counts)))]
    counts = [0]
    for index in range(len(negative_counts) - 1, -1, -1):
        counts.append(negative_counts[index])
        bounds.append(-(base ** (negative_offset + index)))
    # Below the zero bucket, an empty one up to it; then the zero bucket itself.
    counts += [0, zero_count]
    bounds += [-zero_threshold if zero_threshold > 0 else -5e-324, zero_threshold]
    counts.append(0)  # the empty gap between the zero bucket and the first positive one
    for index, count in enumerate(positive_counts):
        bounds.append(base ** (positive_offset + index))
        counts.append(count)
    bounds.append(base ** (positive_offset + len(positive_counts)))
    counts.append(0)
    return bounds, counts
