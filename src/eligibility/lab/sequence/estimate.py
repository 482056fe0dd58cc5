r"""The lab on sequence problems: group-baseline REINFORCE estimates against the exact ∇J.

Each estimate is one batch of n_groups prompts × G completions drawn from the problem, turned
into ĝ = (1/N) Σᵢ Aᵢ ∇log π(oᵢ|q) with the shaped reward R̃ = R − β (log π − log π_ref) (whose
expectation, with any baseline independent of oᵢ, is ∇J) and the exact score ∇log π(oᵢ|q) of
each sampled completion (:attr:`~eligibility.lab.sequence.problem.SequenceProblem.scores`).
Every baseline sees the same batches (common random numbers), and the z-test, the variance and
the report are the episodic lab's (:func:`eligibility.lab.estimate.summarise_all`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from eligibility.lab.estimate import Case, summarise_all
from eligibility.lab.sequence.problem import SequenceProblem, advantage_of

_RLOO, _MEAN = advantage_of("rloo"), advantage_of("mean")

BASELINES: dict[str, tuple[Callable[..., np.ndarray], str]] = {
    "none": (lambda r, v: r, ""),
    "rloo": (lambda r, v: _RLOO(r), ""),
    "group-mean": (
        lambda r, v: _MEAN(r),
        "the group mean includes the completion itself: E[ĝ] = (G − 1)/G ∇J",
    ),
    "value": (lambda r, v: r - v, ""),
}
"""Group advantages A(R̃ of the group, E_q[R̃]) by name, and why each biased one is biased.

``value`` is the oracle baseline E_q[R̃], the exact expected shaped reward of the prompt."""


def run_sequence_problem(
    problem: SequenceProblem,
    *,
    samples: int = 200,
    groups: int | None = None,
    seed: int = 0,
    alpha: float = 1e-3,
) -> list[Case]:
    """Every group baseline of :data:`BASELINES` on one sequence problem.

    Args:
        problem: the exact sequence problem.
        samples: N, the number of independent estimates (batches).
        groups: prompts per batch (default 2Q, each prompt twice); G is the problem's.
        seed: seeds the draws.
        alpha: the family-wise false-alarm rate of each case's z-test.

    Returns:
        One :class:`~eligibility.lab.estimate.Case` per baseline, ``none`` first; its
        ``episodes`` is the number of completions per batch.
    """
    if samples < 30:
        raise ValueError(f"samples must be at least 30 for the z-test, got {samples}")
    n_groups = groups or 2 * len(problem.prompts)
    if n_groups < 1:
        raise ValueError(f"groups must be at least 1, got {groups}")
    rng = np.random.default_rng(seed)
    G = problem.group_size
    rows = np.stack([problem.draw(n_groups, rng).rows for _ in range(samples)])  # [S, N]
    t = problem.table
    shaped = problem.shaped_reward
    r = shaped[rows].reshape(samples, n_groups, G)
    v = t.per_row(t.mean(shaped))[rows].reshape(samples, n_groups, G)
    scores = problem.scores[rows]  # [S, N, p]
    n = n_groups * G  # completions per batch

    def estimates(advantage: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
        """Each batch's (1/n) Σᵢ Âᵢ ∇ ln π(yᵢ), [S, p]."""
        return np.einsum("sn,snp->sp", advantage(r, v).reshape(samples, n), scores) / n

    return summarise_all(
        problem,  # type: ignore[arg-type]  (the same protocol: name, exact, flatten, labels)
        ((name, estimates(adv), False, why) for name, (adv, why) in BASELINES.items()),
        alpha=alpha,
        episodes=n,
    )


__all__ = ["BASELINES", "run_sequence_problem"]
