"""The off-policy problems and their samplers, and what a loss estimates under a cut one.

Each problem is the lab's ``length`` problem at θ some exact steps from θ_old, sampled by μ
(:func:`_problem`); ``--top-k``, ``--top-p`` and ``--min-p`` cut μ as an engine does.

Under a cut sampler μ (its support smaller than π_old's), no importance weight repairs the
policy's mass μ never draws. The off-policy check (:mod:`eligibility.check.offpolicy`, its
``--top-k``, ``--top-p``, ``--min-p``) holds the user's mean against both exact gradients the
lab gives: the policy's ∇J and the truncated sampler's own ∇J_μ.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from eligibility.lab.sequence.offpolicy import OffPolicyProblem


@functools.cache
def build_problem(name: str, cut: tuple[Any, Any, Any] = (None, None, None)) -> OffPolicyProblem:
    """The off-policy problem ``name``, built once a process (θ is put back before each call).

    ``cut`` = (top k, top p, min p) cuts its sampler as an engine's settings do
    (``--top-k``, ``--top-p``, ``--min-p``): μ's support smaller than π_old's.
    """
    from eligibility.lab.sequence.builtin import length_problem
    from eligibility.lab.sequence.offpolicy import OffPolicyProblem, Sampler, ascend

    base = length_problem()
    top_k, top_p, min_p = cut
    settings = {
        "ratio-one": (0, 0.0, Sampler(top_k=top_k, top_p=top_p, min_p=min_p)),
        "near": (2, 0.5, Sampler(1.5, top_k, 0.5, 0, top_p, min_p)),
        "far": (4, 1.0, Sampler(1.5, top_k, 0.5, 0, top_p, min_p)),
    }
    steps, lr, sampler = settings[name]
    return OffPolicyProblem(base, ascend(base, steps, lr), sampler, name=name)


PROBLEM_NOTES = {
    "ratio-one": "θ = θ_old and μ = π_old: every ratio is 1, so any correct off-policy loss is "
    "REINFORCE here (a cap below 1, a swapped ratio or an undetached weight is not)",
    "near": "θ two exact gradient steps (η = 0.5) from θ_old; μ: π_old's logits + 0.5 ε at "
    "temperature 1.5",
    "far": "θ four exact gradient steps (η = 1) from θ_old; μ as in near",
}


def greedy(problem: OffPolicyProblem, config: Any) -> str | None:
    """Why ``problem`` cannot be checked under ``config``'s cut sampler (None: it can).

    A cut that leaves one completion of every prompt in μ's support (``--top-p`` small enough
    to keep the most probable token alone at every position) is a greedy sampler: every group
    draws one completion G times, every advantage is 0, every batch's ĝ the same, and no
    importance weight brings back what it never draws.
    """
    cut = (config.top_k, config.top_p, config.min_p)
    if cut == (None, None, None):
        return None
    built = build_problem(problem.name, cut)
    support = np.add.reduceat(built.covered.astype(int), built.base.table.start[:-1])
    if np.all(support <= 1):
        how = ", ".join(
            f"--{k.replace('_', '-')} {v:g}"
            for k, v in zip(("top_k", "top_p", "min_p"), cut, strict=True)
            if v is not None
        )
        return (
            f"{how} keeps one completion of every prompt: a greedy sampler, whose batches "
            "are all alike and which no importance weight corrects"
        )
    return None


def targets(mean: np.ndarray, stderr: np.ndarray, t: float, problem: OffPolicyProblem) -> dict:
    """Which gradient the user's mean estimates under a truncated sampler, and how far each is.

    ∇J is the policy's (the objective checked); ∇J_μ the truncated sampler's own
    (:meth:`~eligibility.lab.sequence.offpolicy.OffPolicyProblem.sampler_objective`: what a
    loss that takes the sampler's draws and renormalised log-probs for the policy's ascends).
    Each is held against the mean in the user's standard errors (max |z| ≤ t*); ``estimates``
    names the one that fits (``policy``, ``sampler``, both where N cannot tell them apart, or
    ``neither``), and ``uncovered`` is the policy's mass the sampler can never draw.
    """
    from eligibility.check.verdict import max_abs_z

    z = {
        "policy": max_abs_z(mean, stderr, problem.exact),
        "sampler": max_abs_z(mean, stderr, problem.sampler_exact),
    }
    fits = [k for k, v in z.items() if v <= t]
    t_ = problem.base.table
    old = np.exp(problem.old_token_logp.sum(1))
    uncovered = float(np.add.reduceat(np.where(problem.covered, 0.0, old), t_.start[:-1]).mean())
    return {
        "estimates": " and ".join(fits) if fits else "neither",
        "bias_policy": float(np.linalg.norm(mean - problem.exact)),
        "bias_sampler": float(np.linalg.norm(mean - problem.sampler_exact)),
        "z_policy": z["policy"],
        "z_sampler": z["sampler"],
        "uncovered": uncovered,
        "sampler": {k: v for k, v in zip(("top_k", "top_p", "min_p"), _cut(problem), strict=True)},
    }


def _cut(problem: OffPolicyProblem) -> tuple[Any, Any, Any]:
    s = problem.sampler
    return s.top_k, s.top_p, s.min_p


__all__ = ["PROBLEM_NOTES", "build_problem", "greedy", "targets"]
