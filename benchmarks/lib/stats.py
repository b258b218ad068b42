"""The benchmarks' intervals: Student t over independent batches or rounds, and the paired
bootstrap over seeds and held-out examples. Pure functions (numpy for the bootstrap)."""
from __future__ import annotations

import math
import statistics
from typing import Sequence

#: the bootstrap's level and resamples, as the held-out results files describe them
LEVEL, RESAMPLES = 0.95, 10_000


def t_quantile(p: float, df: int) -> float:
    """Student t's p-quantile (Cornish-Fisher expansion around the normal): 0.004 below the
    exact 97.5% point at df 3, within 3e-4 from df 5 and 1e-4 from df 9 (an interval over
    batches has df >= 29)."""
    z = statistics.NormalDist().inv_cdf(p)
    v = float(df)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4))


def t_interval(xs: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the mean of `xs` with its Student-t interval (NaN left out; NaN
    bounds for n < 2)."""
    xs = [x for x in xs if x == x]
    if not xs:
        return math.nan, math.nan, math.nan
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, math.nan, math.nan
    half = t_quantile(0.5 + level / 2, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - half, m + half


def paired_bootstrap(diffs: Sequence[Sequence[float]], level: float = LEVEL, resamples: int = RESAMPLES,
                     seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): the mean of the paired differences `diffs[s][e]` (seed s, held-out
    example e: one method's value minus another's on the same example, same seed, same step)
    and its percentile bootstrap interval at `level`.

    Each resample draws the S seeds with replacement and, independently, the E examples with
    replacement (one draw of examples for every seed drawn: the seeds measure the same
    examples), and takes the mean difference over the drawn seeds x examples, counting each as
    often as it was drawn. NaN (a metric that does not apply to an example) is left out of every
    mean. The interval holds the central `level` of the resampled means. Pure: the same input
    and `seed` give the same interval; differences that are all equal give a zero-width
    interval at their value. Raises ValueError unless `diffs` is a non-empty S x E table."""
    import numpy as np

    d = np.asarray(diffs, dtype=float)  # [S, E]
    if d.ndim != 2 or d.size == 0:
        raise ValueError(f"expected a non-empty seeds x examples table of differences, got shape {d.shape}")
    valid = ~np.isnan(d)  # [S, E]
    if not valid.any():
        return math.nan, math.nan, math.nan
    values = np.where(valid, d, 0.0)  # [S, E]
    mean = float(values.sum() / valid.sum())
    if np.all(d[valid] == d[valid][0]):  # no spread to resample (exactly, without rounding residue)
        return mean, mean, mean
    rng = np.random.default_rng(seed)
    n_seeds, n_examples = d.shape
    seeds_drawn = rng.multinomial(n_seeds, [1 / n_seeds] * n_seeds, size=resamples)  # [R, S] draw counts
    examples_drawn = rng.multinomial(n_examples, [1 / n_examples] * n_examples, size=resamples)  # [R, E]
    totals = np.einsum("rs,se,re->r", seeds_drawn, values, examples_drawn)  # [R]
    counts = np.einsum("rs,se,re->r", seeds_drawn, valid.astype(float), examples_drawn)  # [R]
    means = totals[counts > 0] / counts[counts > 0]
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return mean, float(low), float(high)
