r"""Many episodes of a finite MDP at once, in NumPy, under a fixed linear-softmax policy.

The lab's environments (:mod:`~eligibility.lab.envs`) play one episode at a time through
Gymnasium; ``eligibility check`` needs tens of thousands of episodes per problem, so this
module plays them all side by side: at step t every live episode e draws

    a_et ~ π(· | s_et) = softmax(W φ(s_et) + b),   r_et = R[s_et, a_et] + σ_r ε,
    s_e,t+1 ~ P[s_et, a_et, ·]

by inverse-CDF draws, and ends on entering a terminal state (never truncated), exactly the
episodes :class:`~eligibility.lab.envs.MDPEnv` plays (the tests hold the two against each
other and against the exact J).
"""

from __future__ import annotations

import numpy as np

from eligibility.lab.mdp import FiniteMDP, check_theta, policy_probs
from eligibility.reinforce.rollout import Batch


def _draw_rows(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One inverse-CDF draw per row: the first index whose cumulative mass exceeds u·total."""
    idx = (cdf < u[:, None] * cdf[:, -1:]).sum(axis=1)
    return np.minimum(idx, cdf.shape[1] - 1)


def sample_episodes(
    mdp: FiniteMDP,
    W: object,
    b: object,
    n_episodes: int,
    rng: np.random.Generator,
    *,
    reward_std: float = 0.0,
) -> Batch:
    """``n_episodes`` complete episodes of π = softmax(W φ + b) on ``mdp``, padded into a Batch.

    Args:
        mdp: the MDP.
        W: (A, d) policy weights.
        b: (A,) policy bias.
        n_episodes: how many episodes.
        rng: the source of every draw.
        reward_std: σ_r, zero-mean Gaussian noise added to each reward (changes no expectation).

    Returns:
        A :class:`~eligibility.reinforce.rollout.Batch`: obs φ(s_et) (float64), actions,
        rewards, mask, terminated (all True), final_obs.
    """
    W, b = check_theta(mdp, W, b)
    pi_cdf = np.cumsum(policy_probs(mdp, W, b), axis=1)
    next_cdf = np.cumsum(mdp.P, axis=2)
    s = _draw_rows(
        np.broadcast_to(np.cumsum(mdp.rho0), (n_episodes, mdp.n_states)), rng.random(n_episodes)
    )
    states, actions, rewards, alive_t = [], [], [], []
    alive = np.ones(n_episodes, dtype=bool)
    while alive.any():
        a = _draw_rows(pi_cdf[s], rng.random(n_episodes))
        r = mdp.R[s, a] + (reward_std * rng.standard_normal(n_episodes) if reward_std else 0.0)
        states.append(s)
        actions.append(a)
        rewards.append(np.where(alive, r, 0.0))
        alive_t.append(alive)
        s_next = _draw_rows(next_cdf[s, a], rng.random(n_episodes))
        s = np.where(alive, s_next, s)
        alive = alive & ~mdp.terminal[s]
    S = np.stack(states, axis=1)
    mask = np.stack(alive_t, axis=1)
    return Batch(
        obs=np.where(mask[..., None], mdp.phi[S], 0.0),
        actions=np.where(mask, np.stack(actions, axis=1), 0),
        rewards=np.stack(rewards, axis=1),
        mask=mask,
        terminated=np.ones(n_episodes, dtype=bool),
        final_obs=mdp.phi[s],
    )


__all__ = ["sample_episodes"]
