"""Mistake: the γᵗ factor dropped, as pytorch/examples' reinforce.py and most tutorials do.

Σ_t G_t ln π with discounted G_t estimates Σ_s d₁(s) Σ_a π Q e (undiscounted visitation d₁),
not ∇J = Σ_s d(s) Σ_a π Q e. Visible only where γ < 1.

Expected verdict: biased (missing-discount-weighting) on gridworld; unbiased where γ = 1.
"""

import torch
from torch.distributions import Categorical


def loss(policy, episodes, gamma):
    """−Σ_t G_t ln π(a_t | s_t), averaged over episodes."""
    losses = []
    for ep in episodes:
        g, returns = 0.0, []
        for r in reversed(ep.rewards.tolist()):
            g = r + gamma * g
            returns.insert(0, g)
        log_probs = Categorical(logits=policy(ep.obs)).log_prob(ep.actions)
        losses.append(-(torch.tensor(returns) * log_probs).sum())
    return torch.stack(losses).mean()
