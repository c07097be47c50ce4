"""Side-by-side (A/B) statistics for the benchmarks: a figure measured as alternating
rounds of two variants in one run (ABAB...), so a slow minute of a shared machine
lands on both variants alike.

- :func:`spread`: the median of per-round values and their spread (quartiles, min, max).
- :func:`median_ci`: a percentile-bootstrap confidence interval of a statistic of a sample
  (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 13), e.g. the median
  of per-query paired differences or the ratio of two p50s.

Pure Python, no database (tested in ``tests/unit/test_bench_ab.py``).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values`` by linear interpolation between order
    statistics (numpy's default, "type 7"); ``ValueError`` on an empty sequence."""
    if not values:
        raise ValueError("quantile of no values")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def spread(values: Sequence[float]) -> dict[str, float]:
    """``{"median", "q1", "q3", "min", "max", "n"}`` of ``values`` (e.g. one ratio per
    round): the figure and how far the rounds scatter around it."""
    return {"median": quantile(values, 0.5), "q1": quantile(values, 0.25), "q3": quantile(values, 0.75),
            "min": min(values), "max": max(values), "n": len(values)}


def median_ci(values: Sequence[float], *, level: float = 0.95, resamples: int = 2000,
              seed: int = 0) -> tuple[float, float, float]:
    """``(median, low, high)``: the median of ``values`` and its percentile-bootstrap
    ``level`` interval (``resamples`` resamples with replacement, seeded)."""
    return bootstrap(values, lambda s: statistics.median(s), level=level, resamples=resamples, seed=seed)


def ratio_ci(a: Sequence[float], b: Sequence[float], *, level: float = 0.95, resamples: int = 2000,
             seed: int = 0) -> tuple[float, float, float]:
    """``(p50(a) / p50(b), low, high)``: the ratio of the two samples' medians and its
    percentile-bootstrap interval (each sample resampled on its own)."""
    rng = random.Random(seed)
    point = statistics.median(a) / statistics.median(b)
    draws = sorted(statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b)))
                   for _ in range(resamples))
    tail = (1 - level) / 2
    return point, quantile(draws, tail), quantile(draws, 1 - tail)


def bootstrap(values: Sequence[float], stat: Callable[[list[float]], float], *, level: float = 0.95,
              resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """``(stat(values), low, high)`` with the percentile-bootstrap ``level`` interval."""
    rng = random.Random(seed)
    sample = list(values)
    draws = sorted(stat(rng.choices(sample, k=len(sample))) for _ in range(resamples))
    tail = (1 - level) / 2
    return stat(sample), quantile(draws, tail), quantile(draws, 1 - tail)
