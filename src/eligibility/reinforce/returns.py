r"""Discounted reward-to-go, the return REINFORCE weights each eligibility with.

G_t = Σ_{k=t}^{T−1} γ^{k−t} r_k  =  r_t + γ G_{t+1},   G_T = 0 (terminated) or V(s_T) (bootstrap)
"""

from __future__ import annotations

import numpy as np


def reward_to_go(
    rewards: np.ndarray,
    mask: np.ndarray,
    gamma: float,
    bootstrap: np.ndarray | None = None,
) -> np.ndarray:
    """G_t = r_t + γ G_{t+1} per episode, zero where ``mask`` is False.

    Args:
        rewards: r_et, (E, T).
        mask: True where step t belongs to episode e, (E, T); each row a prefix.
        gamma: discount γ ∈ [0, 1].
        bootstrap: G_{e,Tₑ}, the value after the last step of each episode, (E,); zero if None.
            A truncated episode can pass V(s_T) here; a terminated one must pass 0.

    Returns:
        G, (E, T), float64.
    """
    r = np.where(mask, rewards, 0.0)
    n_ep, horizon = r.shape
    lengths = mask.sum(axis=1)
    tail = np.zeros(n_ep) if bootstrap is None else np.asarray(bootstrap, dtype=np.float64)
    g = np.zeros((n_ep, horizon))
    g_next = np.zeros(n_ep)
    for t in reversed(range(horizon)):
        g_next = np.where(t + 1 == lengths, tail, g_next)  # G_{Tₑ} enters at each episode's end
        g[:, t] = np.where(mask[:, t], r[:, t] + gamma * g_next, 0.0)
        g_next = g[:, t]
    return g
