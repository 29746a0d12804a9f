"""Min-max decimation: fewer points to draw, every peak and trough kept.

A series is put in time order and cut into runs of consecutive points; each run keeps its
lowest and its highest point (the method plotly-resampler calls MinMax, a cousin of M4).
Unlike keeping every k-th point, a one-step spike survives any amount of decimation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def kept_indices(times: Sequence[float], values: Sequence[float], runs: int) -> list[int]:
    """Indices of the points to keep, in time order: at most two per run, `runs` runs.

    A run whose values are all missing (NaN: an interval with nothing to show) keeps its
    first point, so the gap still shows.
    """
    order = sorted(range(len(times)), key=times.__getitem__)
    total = len(order)
    if total <= 2 * runs:
        return order
    kept: list[int] = []
    for run in range(runs):
        members = order[run * total // runs : (run + 1) * total // runs]
        if not members:
            continue
        present = [index for index in members if not math.isnan(values[index])]
        if not present:
            kept.append(members[0])
            continue
        low = min(present, key=values.__getitem__)
        high = max(present, key=values.__getitem__)
        kept.extend(sorted({low, high}, key=times.__getitem__))
    return kept
