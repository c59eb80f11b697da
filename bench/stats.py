"""Small numeric helpers shared by the benchmarks."""

from __future__ import annotations

import math


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def ratio(a: float, b: float) -> float:
    if b == 0 or math.isnan(a) or math.isnan(b):
        return math.nan
    return a / b
