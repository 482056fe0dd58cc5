r"""Statistics over seeds that people can trust (Agarwal et al., NeurIPS 2021).

Point estimates over a few seeds mislead; these are the interval estimates recommended there,
written in NumPy (the ``rliable`` package would bring pandas, seaborn and arch for them):

    IQM(x) = mean of the middle 50 % of the sorted x (the 25 %–75 % trimmed mean),

with a 95 % percentile-bootstrap confidence interval: the runs of a setting are resampled
with replacement B times (stratified: within its own setting, the only task here), the
statistic recomputed, and the 2.5 % and 97.5 % quantiles of those B values reported.

    P(X > Y) = (1/(nm)) Σᵢ Σⱼ [xᵢ > yⱼ] + ½ [xᵢ = yⱼ],

the probability of improvement of one setting over another (the Mann–Whitney statistic).

Runs that never reach the target enter "steps to target" at their budget: they are censored
there, so the statistics of a setting with such runs are lower bounds.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

BOOTSTRAP = 2000
"""Resamples of each interval estimate."""


def iqm(x: np.ndarray) -> np.ndarray:
    """The interquartile mean: the mean of the middle half of the sorted values.

    Over the last axis of x (..., n): one value of a 1-d x, one per row of a 2-d one. With n
    values, the ⌊n/4⌋ smallest and ⌊n/4⌋ largest are dropped (for n < 4, nothing is).
    """
    x = np.sort(np.asarray(x, dtype=np.float64), axis=-1)
    n = x.shape[-1]
    k = n // 4
    return x[..., k : n - k].mean(axis=-1)


STATISTICS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "mean": lambda x: np.mean(x, axis=-1),
    "median": lambda x: np.median(x, axis=-1),
    "iqm": iqm,
}
"""Each statistic over the last axis: one value of a run's n values, or each row's of a
(B, n) array of resamples at once (:func:`bootstrap_ci`)."""


def bootstrap_ci(
    x: np.ndarray,
    statistic: Callable[[np.ndarray], float],
    *,
    rng: np.random.Generator,
    level: float = 0.95,
    resamples: int = BOOTSTRAP,
) -> tuple[float, float]:
    """The percentile-bootstrap interval of ``statistic`` over the values ``x``.

    The B resamples are one (B, n) array, reduced by ``statistic`` over its last axis at once
    (as every statistic of :data:`STATISTICS` does).
    """
    x = np.asarray(x, dtype=np.float64)
    if len(x) < 2:
        return float(statistic(x)), float(statistic(x))
    idx = rng.integers(0, len(x), size=(resamples, len(x)))
    values = np.asarray(statistic(x[idx]), dtype=np.float64)
    lo, hi = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def describe(x: np.ndarray, *, seed: int = 0) -> dict[str, float | list[float]]:
    """Mean, median and IQM of ``x``, each with its 95 % bootstrap interval."""
    rng = np.random.default_rng(seed)
    out: dict[str, float | list[float]] = {}
    for name, f in STATISTICS.items():
        out[name] = float(f(np.asarray(x, dtype=np.float64)))
        out[f"{name}_ci"] = list(bootstrap_ci(x, f, rng=rng))
    return out


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y): a run of setting X beats one of setting Y (ties count half)."""
    x = np.asarray(x, dtype=np.float64)[:, None]
    y = np.asarray(y, dtype=np.float64)[None, :]
    return float(np.mean((x > y) + 0.5 * (x == y)))


def step_grid_mean(
    curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray, *, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IQM over runs of curves resampled onto ``grid``, with a 95 % bootstrap band.

    Each run's curve (steps, values) is read on the grid as its last value at or before each
    point (a run that stopped, solved, keeps its last value); points before a run's first are
    NaN and left out.
    """
    rows = []
    for steps, values in curves:
        i = np.searchsorted(steps, grid, side="right") - 1
        rows.append(np.where(i >= 0, values[np.maximum(i, 0)], np.nan))
    Y = np.array(rows)
    rng = np.random.default_rng(seed)
    mid = np.full(len(grid), np.nan)
    lo = np.full(len(grid), np.nan)
    hi = np.full(len(grid), np.nan)
    for j in range(len(grid)):
        col = Y[:, j][~np.isnan(Y[:, j])]
        if len(col):
            mid[j] = iqm(col)
            lo[j], hi[j] = bootstrap_ci(col, iqm, rng=rng, resamples=300)
    return mid, lo, hi


__all__ = [
    "BOOTSTRAP",
    "STATISTICS",
    "bootstrap_ci",
    "describe",
    "iqm",
    "probability_of_improvement",
    "step_grid_mean",
]
