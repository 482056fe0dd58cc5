"""Mistake: the episode's *mean* log-probability times the returns (Gymnasium#1336).

−Σ_t (1/T Σ_k ln π(a_k | s_k)) G_t credits every action with every return-to-go, divided by
the episode's length. One-step episodes cannot tell it from the right thing.

Verdict (docs/check.md): unbiased on bandit; scaled (c ≈ 0.46 – 0.64) on the others at the
default N, a bent direction too where N resolves it (gridworld, --samples 3000).
"""

import torch
from torch.distributions import Categorical


def loss(policy, episodes, gamma):
    """−Σ_t γᵗ G_t · mean_k ln π(a_k | s_k), averaged over episodes."""
    losses = []
    for ep in episodes:
        g, returns = 0.0, []
        for r in reversed(ep.rewards.tolist()):
            g = r + gamma * g
            returns.insert(0, g)
        discounts = gamma ** torch.arange(len(returns), dtype=torch.float32)
        log_probs = Categorical(logits=policy(ep.obs)).log_prob(ep.actions)
        losses.append(-(discounts * torch.tensor(returns)).sum() * log_probs.mean())
    return torch.stack(losses).mean()
