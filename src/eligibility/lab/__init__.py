r"""The estimator lab: exact policy gradients, and the trainer's estimator held against them.

On problems small enough to solve exactly, J(θ) and ∇J(θ) are computed in closed form
(bandits, :mod:`~eligibility.lab.bandits`) or by a linear solve and the policy-gradient theorem
(finite MDPs, :mod:`~eligibility.lab.mdp`). The trainer's own REINFORCE estimator runs on the
same problem as a Gymnasium environment (:mod:`~eligibility.lab.envs`), N times per baseline,
and :mod:`~eligibility.lab.estimate` compares: z-scores of the mean against the exact gradient,
the total variance, the variance each baseline removes.

    >>> import numpy as np
    >>> from eligibility import lab
    >>> m = lab.chain_mdp(n=3)
    >>> p = lab.mdp_problem(m, W=np.zeros((2, 2)), b=[0.0, 1.0])
    >>> round(p.J, 4)
    -3.5923
    >>> cases = lab.run_problem(p, samples=50, episodes=8, baselines=("none", "rloo"))
    >>> all(c.passed for c in cases)
    True
"""

from eligibility.lab.estimate import Case, run_problem
from eligibility.lab.mdp import FiniteMDP, gradient, objective, solve
from eligibility.lab.problems import (
    PROBLEMS,
    Problem,
    bernoulli_bandit,
    categorical_bandit,
    chain_mdp,
    gaussian_bandit,
    get_problem,
    gridworld_mdp,
    mdp_problem,
    short_corridor_mdp,
)
from eligibility.lab.run import LabConfig, LabResult, run_lab

__all__ = [
    "PROBLEMS",
    "Case",
    "FiniteMDP",
    "LabConfig",
    "LabResult",
    "Problem",
    "bernoulli_bandit",
    "categorical_bandit",
    "chain_mdp",
    "gaussian_bandit",
    "get_problem",
    "gradient",
    "gridworld_mdp",
    "mdp_problem",
    "objective",
    "run_lab",
    "run_problem",
    "short_corridor_mdp",
    "solve",
]
