r"""The REINFORCE estimate of the policy gradient from a batch of complete episodes.

    ĝ = (1/E) Σ_e Σ_t w_t (G_et − b_et) ∇θ ln π(a_et | s_et),   w_t = γᵗ or 1

(Williams, 1992, episodic REINFORCE with reward-to-go.) With w_t = γᵗ (``discount_weighting``)
ĝ is unbiased for ∇J, J = E[Σ_t γᵗ r_t]; with w_t = 1, the common practice and the default, it
weights late steps as much as early ones (a biased but lower-variance direction).

Truncation: an episode cut by a time limit did not reach a terminal state. With the ``value``
baseline and ``bootstrap`` given, its return is completed with V(s_T):
G_t = Σ_{k<T} γ^{k−t} r_k + γ^{T−t} V(s_T), an estimate of the return the episode would have
had without the limit. Without a value function there is nothing to complete it with, and the
return is used as observed: the estimate is then of the gradient of the time-limited return,
which is the objective a time-limited env (CartPole-v1: 500 steps) scores.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eligibility.backends import Policy
from eligibility.reinforce import baselines
from eligibility.reinforce.baselines import BASELINES
from eligibility.reinforce.returns import reward_to_go
from eligibility.reinforce.rollout import Batch, collect_episodes

__all__ = [
    "BASELINES",
    "Batch",
    "Policy",
    "advantages",
    "collect_episodes",
    "normalise",
    "policy_gradient",
    "reward_to_go",
]


def advantages(
    batch: Batch,
    *,
    gamma: float,
    baseline: str,
    baseline_state: dict[str, np.ndarray] | None = None,
    values: np.ndarray | None = None,
    bootstrap: np.ndarray | None = None,
    discount_weighting: bool = False,
    decay: float = 0.9,
) -> tuple[np.ndarray, dict[str, Any]]:
    """ψ_et = w_t (G_et − b_et), zero outside the mask, and diagnostics.

    Args:
        batch: the episodes.
        gamma: discount γ.
        baseline: one of :data:`BASELINES`.
        baseline_state: the moving-average state from the previous batch.
        values: V(s_et), (E, T), for the ``value`` baseline (fit from before this batch).
        bootstrap: G at the end of each episode, (E,): V(s_T) for truncated episodes, 0 for
            terminated ones; None treats every return as complete.
        discount_weighting: multiply by γᵗ (unbiased for the discounted objective).
        decay: λ of the moving-average baseline.

    Returns:
        ψ (E, T) and ``{"returns": G, "baseline": b, "baseline_state": …}``.
    """
    g = reward_to_go(batch.rewards, batch.mask, gamma, bootstrap)
    b, new_state = baselines.baseline(
        baseline, g, batch.mask, baseline_state, values=values, decay=decay
    )
    psi = g - b
    if discount_weighting:
        psi = psi * gamma ** np.arange(g.shape[1])
    return np.where(batch.mask, psi, 0.0), {
        "returns": g,
        "baseline": b,
        "baseline_state": new_state,
    }


def normalise(psi: np.ndarray, mask: np.ndarray, eps: float = 1e-8) -> np.ndarray:
    """(ψ − mean ψ) / (std ψ + ε) over the steps in ``mask`` (a training option; it biases ĝ)."""
    x = psi[mask]
    return np.where(mask, (psi - x.mean()) / (x.std() + eps), 0.0)


def policy_gradient(
    policy: Policy,
    batch: Batch,
    *,
    normalize_advantages: bool = False,
    entropy_coef: float = 0.0,
    **advantage_options: Any,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """ĝ = (1/E) Σ_e Σ_t ψ_et ∇θ ln π(a_et | s_et), an ascent direction for J.

    With the defaults (no normalisation, no entropy bonus) this is Williams' estimator exactly.
    The two training options are applied on top: ``normalize_advantages`` standardises ψ
    over the batch (biased; scale-free steps), ``entropy_coef`` β adds β ∇θ (1/N) Σ H(π(· | s)).

    Args:
        policy: a policy with ``grad_log_prob`` (either backend).
        batch: the episodes.
        normalize_advantages: standardise ψ over the batch.
        entropy_coef: β.
        **advantage_options: how ψ is formed, the keywords of :func:`advantages`: ``gamma``,
            ``baseline`` (both required), ``baseline_state``, ``values``, ``bootstrap``,
            ``discount_weighting``, ``decay``.

    Returns:
        The gradient by parameter name, and ``info``: ``baseline_state``, ``returns`` G,
        ``baseline`` b, ``psi`` ψ, ``surrogate`` (1/E) Σ ψ ln π, ``entropy``.

    Raises:
        ValueError: an unknown ``baseline``, or ``value`` without ``values``.
    """
    psi, info = advantages(batch, **advantage_options)
    if normalize_advantages:
        psi = normalise(psi, batch.mask)
    m = batch.mask
    n_ep = m.shape[0]
    action_mask = None if batch.action_mask is None else batch.action_mask[m]
    grads, diag = policy.grad_log_prob(
        batch.obs[m], batch.actions[m], psi[m] / n_ep, entropy_coef=entropy_coef, mask=action_mask
    )
    info.update(diag)
    info["psi"] = psi
    return grads, info
