r"""The exact problems ``eligibility check`` holds a user's estimator against.

Each is a finite MDP of the lab with the linear-softmax policy π(a|s) = softmax(W φ(s) + b),
which is exactly ``torch.nn.Linear(obs_dim, n_actions)`` (weight W, bias b) fed φ(s). The
4-armed bandit is written as a one-state MDP (φ = [1], every action ends the episode), so one
sampler and one exact solver serve all four. What each problem cannot see is stated with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eligibility.lab import mdp as mdp_
from eligibility.lab import problems as lab_problems
from eligibility.lab.mdp import FiniteMDP
from eligibility.lab.problems import Problem

GAMMA_BLIND = "missing-discount-weighting (γ = 1 here, so γᵗ = 1): gridworld can"
ONE_LINE_BLIND = (
    "a bias other than a rescaling or a sign (two actions and one shared feature: every "
    "gradient of this policy lies on one line, so any bias reads as a scale): chain and "
    "gridworld can"
)
ONE_STEP_BLIND = (
    "a wrong return-to-go, per-step averaging or a missing γᵗ (one-step episodes): "
    "chain, gridworld and short-corridor can"
)


@dataclass(frozen=True)
class CheckProblem:
    """One exact problem as ``check`` uses it.

    Attributes:
        name: the key of ``--problem``.
        problem: the lab's problem (θ = (W, b), J, ∇J, the exact value oracle).
        mdp: its finite MDP.
        reward_std: σ_r, the reward noise the sampler and the env add.
        make_env: the problem's Gymnasium env (float64 observations; ``check`` casts them).
        cannot_see: the mistakes this problem cannot tell from correct code, with the problem
            that can.
    """

    name: str
    problem: Problem
    mdp: FiniteMDP
    reward_std: float
    make_env: Callable[[], Any]
    cannot_see: tuple[str, ...] = field(default=())

    @property
    def exact(self) -> np.ndarray:
        """∇J(θ) as one vector: W (row-major), then b, the order of ``Linear``'s parameters."""
        return self.problem.flatten(self.problem.exact)

    def exact_without_discount_weighting(self) -> np.ndarray:
        """E[ĝ] of REINFORCE with the γᵗ factor dropped (lab's exact formula), as a vector."""
        th = self.problem.theta
        return self.problem.flatten(
            mdp_.gradient_without_discount_weighting(self.mdp, th["W"], th["b"])
        )


def bandit_mdp(r: np.ndarray) -> FiniteMDP:
    """A K-armed bandit as a finite MDP: state 0 (φ = [1]), every arm a pays r_a and ends it."""
    k = r.shape[0]
    P = np.zeros((2, k, 2))
    P[:, :, 1] = 1.0
    R = np.zeros((2, k))
    R[0] = r
    phi = np.array([[1.0], [0.0]])
    return FiniteMDP(P, R, np.array([1.0, 0.0]), 1.0, [1], phi, name="bandit")


def _bandit() -> CheckProblem:
    lab = lab_problems.get_problem("bandit-logits")
    m = bandit_mdp(lab.extra["r"])
    z = lab.theta["logits"]
    p = lab_problems.mdp_problem(
        m, W=z[:, None], b=np.zeros_like(z), name="bandit", description=lab.description
    )
    return CheckProblem("bandit", p, m, lab.extra["reward_std"], lab.make_env, (ONE_STEP_BLIND,))


def _from_lab(name: str, cannot_see: tuple[str, ...]) -> Callable[[], CheckProblem]:
    def build() -> CheckProblem:
        p = lab_problems.get_problem(name)
        m = p.extra["mdp"]
        return CheckProblem(name, p, m, 0.0, p.make_env, cannot_see)

    return build


def _short_corridor() -> CheckProblem:
    # The lab's θ (P(right) ≈ 0.55) sits near the optimum 0.59, where ∇J is small against the
    # noise; P(right) ≈ 0.38 keeps it far from 0 so N stays in the hundreds.
    m = lab_problems.short_corridor_mdp()
    p = lab_problems.mdp_problem(
        m,
        W=[[0.0], [-0.5]],
        b=[0.0, 0.0],
        name="short-corridor",
        description="Sutton & Barto Ex. 13.1: 3 aliased states (one φ), γ = 1, P(right) ≈ 0.38",
    )
    return CheckProblem("short-corridor", p, m, 0.0, p.make_env, (GAMMA_BLIND, ONE_LINE_BLIND))


CHECK_PROBLEMS: dict[str, Callable[[], CheckProblem]] = {
    "bandit": _bandit,
    "chain": _from_lab("chain", (GAMMA_BLIND,)),
    "gridworld": _from_lab("gridworld", ()),
    "short-corridor": _short_corridor,
}
"""The problems of ``eligibility check --problem`` by name."""


def get_check_problems(name: str) -> list[CheckProblem]:
    """The problem called ``name``, or every one for ``"all"``.

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    if name == "all":
        return [build() for build in CHECK_PROBLEMS.values()]
    if name not in CHECK_PROBLEMS:
        raise ValueError(
            f"unknown problem {name!r}; choose one of {', '.join(CHECK_PROBLEMS)} or all"
        )
    return [CHECK_PROBLEMS[name]()]


__all__ = ["CHECK_PROBLEMS", "CheckProblem", "bandit_mdp", "get_check_problems"]
