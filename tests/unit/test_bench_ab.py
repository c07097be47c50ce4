"""The A/B statistics the cost benchmarks decide their goals with (issues 31 and 33:
``scripts/_ab.py``): quantiles, the per-round spread and the bootstrap intervals."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from types import ModuleType

import pytest


def _load() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "scripts" / "_ab.py"
    spec = importlib.util.spec_from_file_location("bench_ab", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ab = _load()


def test_quantiles_interpolate_between_order_statistics() -> None:
    assert ab.quantile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert ab.quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.25) == 2.0
    assert ab.quantile([7.0], 0.9) == 7.0
    with pytest.raises(ValueError):
        ab.quantile([], 0.5)


def test_spread_gives_the_rounds_median_quartiles_and_range() -> None:
    s = ab.spread([1.2, 1.0, 1.1, 1.4, 0.9])
    assert (s["median"], s["q1"], s["q3"], s["min"], s["max"], s["n"]) == (1.1, 1.0, 1.2, 0.9, 1.4, 5)


def test_the_median_interval_covers_a_known_shift_and_excludes_zero() -> None:
    rng = random.Random(1)
    diffs = [0.3 + rng.gauss(0, 2.0) for _ in range(4000)]
    median, low, high = ab.median_ci(diffs, resamples=500)
    assert low < 0.3 < high
    assert 0.0 < low and high - low < 0.4
    assert low <= median <= high


def test_the_ratio_interval_brackets_the_ratio_of_medians() -> None:
    rng = random.Random(2)
    a = [11.0 + rng.gauss(0, 1.0) for _ in range(2000)]
    b = [10.0 + rng.gauss(0, 1.0) for _ in range(2000)]
    ratio, low, high = ab.ratio_ci(a, b, resamples=500)
    assert low < 1.1 < high
    assert low <= ratio <= high and high - low < 0.05
    same, s_low, s_high = ab.ratio_ci(b, b, resamples=200)
    assert same == 1.0 and s_low < 1.0 < s_high
