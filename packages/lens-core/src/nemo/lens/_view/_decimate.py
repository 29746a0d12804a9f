"""Min-max decimation: fewer points to draw, every peak and trough kept.

A series is put in time order and its time range cut into runs of equal width; each run
keeps its lowest and its highest point (the method plotly-resampler calls MinMax, a
cousin of M4). Unlike keeping every k-th point, a one-step spike survives any amount of
decimation; and because runs are equal in time, not in points, a series decimated again
and again while it is read (older points already thinned) stays evenly dense.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence


def kept_indices(times: Sequence[float], values: Sequence[float], runs: int) -> list[int]:
    """Indices of the points to keep, in time order: at most two per run, `runs` runs.

    A run whose values are all missing (NaN: an interval with nothing to show) keeps its
    first point, so the gap still shows.
    """
    order = sorted(range(len(times)), key=times.__getitem__)
    if len(order) <= 2 * runs:
        return order
    first = times[order[0]]
    width = (times[order[-1]] - first) / runs or 1.0
    # Each point's run, in time order: a list that never decreases, so each run's points
    # are found by bisection.
    run_of = [int((time - first) / width) for time in map(times.__getitem__, order)]
    last = bisect_left(run_of, runs - 1)
    run_of[last:] = [runs - 1] * (len(run_of) - last)  # the last point's run, and rounding's
    ordered = list(map(values.__getitem__, order))
    gaps = any(map(math.isnan, ordered))
    kept: list[int] = []
    start = 0
    while start < len(order):
        end = bisect_right(run_of, run_of[start], start)
        if gaps:
            kept.extend(_extremes(order[start:end], times, values))
        else:
            # The first lowest and first highest, as min() and max() with a key find them.
            run = ordered[start:end]
            low, high = order[start + run.index(min(run))], order[start + run.index(max(run))]
            kept.extend(sorted({low, high}, key=times.__getitem__))
        start = end
    return kept


def _extremes(members: list[int], times: Sequence[float], values: Sequence[float]) -> list[int]:
    """The lowest and highest point of one run, in time order."""
    present = [index for index in members if not math.isnan(values[index])]
    if not present:
        return members[:1]
    low = min(present, key=values.__getitem__)
    high = max(present, key=values.__getitem__)
    return sorted({low, high}, key=times.__getitem__)
