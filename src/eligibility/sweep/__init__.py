"""``eligibility sweep``: many seeds and settings in parallel, on this machine or on Ray.

In Python, ``sweep("CartPole-v1", seeds=10, sets=["baseline=none,rloo"])`` returns a
:class:`SweepResult`; ``result.summary["baseline=rloo"]["steps_to_target"]["iqm_ci"]`` is the
95 % interval of the interquartile mean of the env steps to the target.

docs/sweep.md: the grid, the launchers, the statistics and a Ray cluster recipe.
"""

from eligibility.sweep.grid import Grid, parse_set
from eligibility.sweep.run import SweepResult, sweep

__all__ = ["Grid", "SweepResult", "parse_set", "sweep"]
