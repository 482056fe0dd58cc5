r"""The exact credit of a token: what the policy-gradient theorem weights its score by.

    ∇J = E[Σₜ cₜ ∇θ ln π(aₜ | hₜ)],

cₜ the token's credit: the return that follows it (its turn's reward-to-go Gₖ, for a single
completion its reward R) less a baseline that does not depend on aₜ, and 0 on every token the
model did not write (the prompt, the padding, the world's answers). With G samples a prompt,
the leave-one-out baseline keeps it unbiased:

    cᵢₜ = Gᵢ,ₖ₍ₜ₎ − (1/(G − 1)) Σ_{j ≠ i, j in i's group} Gⱼ,ₖ₍ₜ₎.

These are the definitions the credit audit holds a loss's weights against
(:mod:`eligibility.check.audit.relations`); written here from the theorem, sharing nothing
with the option table the losses are built from.
"""

from __future__ import annotations

import numpy as np


def reward_to_go(r: np.ndarray) -> np.ndarray:
    """Gₖ = Σ_{j ≥ k} rⱼ per row: [N, K] per-turn rewards → [N, K] returns from each turn."""
    r = np.asarray(r, dtype=np.float64)
    return np.flip(np.cumsum(np.flip(r, -1), -1), -1)


def leave_one_out(x: np.ndarray, group_size: int) -> np.ndarray:
    """xᵢ − (1/(G − 1)) Σ_{j ≠ i} xⱼ within each group of G consecutive rows (any trailing dims).

    With G = 1 there is no other member: x itself (no baseline).
    """
    x = np.asarray(x, dtype=np.float64)
    if group_size < 2:
        return x.copy()
    g = x.reshape(-1, group_size, *x.shape[1:])
    others = (g.sum(1, keepdims=True) - g) / (group_size - 1)
    return (g - others).reshape(x.shape)


__all__ = ["leave_one_out", "reward_to_go"]
