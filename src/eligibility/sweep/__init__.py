"""``eligibility sweep``: many seeds and settings in parallel, on this machine or on Ray.

    >>> from eligibility.sweep import sweep                                     # doctest: +SKIP
    >>> result = sweep("CartPole-v1", seeds=10, sets=["baseline=none,rloo"])   # doctest: +SKIP
    >>> result.summary["baseline=rloo"]["steps_to_target"]["iqm"]              # doctest: +SKIP

docs/sweep.md: the grid, the launchers, the statistics and a Ray cluster recipe.
"""

from eligibility.sweep.grid import Grid, parse_set
from eligibility.sweep.run import SweepResult, sweep

__all__ = ["Grid", "SweepResult", "parse_set", "sweep"]
