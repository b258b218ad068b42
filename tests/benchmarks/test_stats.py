"""benchmarks/lib/stats.py: the benchmarks' intervals. The Student-t quantile against the
tables; the paired bootstrap is a pure function, checked on data whose true difference is known."""
from __future__ import annotations

import math
import random

import pytest

from benchmarks.lib.stats import paired_bootstrap, t_interval, t_quantile


def test_t_quantiles_and_intervals():
    for df, want in ((5, 2.5706), (9, 2.2622), (29, 2.0452), (100, 1.9840)):  # tables' 97.5% points
        assert t_quantile(0.975, df) == pytest.approx(want, abs=3e-4)
    mean, low, high = t_interval([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    half = 2.5706 * math.sqrt(3.5) / math.sqrt(6)
    assert mean == 3.5 and low == pytest.approx(3.5 - half, abs=1e-3) and high == pytest.approx(3.5 + half, abs=1e-3)
    assert math.isnan(t_interval([1.0])[1])


def test_the_interval_contains_the_true_difference_and_is_pure():
    rng = random.Random(7)
    # 3 seeds x 300 examples: a solves each example with probability 0.6, b with 0.4 (true difference 0.2)
    diffs = [[float(rng.random() < 0.6) - float(rng.random() < 0.4) for _ in range(300)] for _ in range(3)]
    mean, low, high = paired_bootstrap(diffs)
    assert mean == pytest.approx(sum(map(sum, diffs)) / 900)
    assert low < 0.2 < high and low < mean < high and high - low < 0.2
    assert paired_bootstrap(diffs) == (mean, low, high)  # the same draws every time
    assert paired_bootstrap(diffs, seed=1) != (mean, low, high)


def test_seeds_that_disagree_widen_the_interval():
    """The seeds are resampled too: the same examples' differences, shifted per seed, give a
    wider interval than identical seeds do."""
    rng = random.Random(3)
    base = [rng.choice([-1.0, 0.0, 0.0, 1.0]) for _ in range(200)]
    same = [base, base, base]
    spread = [[x + shift for x in base] for shift in (-0.3, 0.0, 0.3)]
    _, lo_same, hi_same = paired_bootstrap(same)
    mean, lo_spread, hi_spread = paired_bootstrap(spread)
    assert mean == pytest.approx(sum(base) / 200)
    assert hi_spread - lo_spread > hi_same - lo_same + 0.1


def test_degenerate_and_missing_differences():
    assert paired_bootstrap([[0.1] * 5, [0.1] * 5]) == (pytest.approx(0.1), 0.1, 0.1)  # zero width
    assert paired_bootstrap([[0.0, 0.0], [0.0, 0.0]]) == (0.0, 0.0, 0.0)
    mean, low, high = paired_bootstrap([[1.0, math.nan], [1.0, math.nan]])  # NaN left out
    assert (mean, low, high) == (1.0, 1.0, 1.0)
    assert all(math.isnan(x) for x in paired_bootstrap([[math.nan]]))
    with pytest.raises(ValueError, match="seeds x examples"):
        paired_bootstrap([])
