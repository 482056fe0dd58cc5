"""Mistake: the sign. The loss is +Σ_t γᵗ G_t ln π, so descending it *lowers* J.

Expected verdict: biased (sign) on every problem.
"""

import torch
from torch.distributions import Categorical


def loss(policy, episodes, gamma):
    """Σ_t γᵗ G_t ln π(a_t | s_t), averaged over episodes: the objective, not the loss."""
    losses = []
    for ep in episodes:
        g, returns = 0.0, []
        for r in reversed(ep.rewards.tolist()):
            g = r + gamma * g
            returns.insert(0, g)
        discounts = gamma ** torch.arange(len(returns), dtype=torch.float32)
        log_probs = Categorical(logits=policy(ep.obs)).log_prob(ep.actions)
        losses.append((discounts * torch.tensor(returns) * log_probs).sum())
    return torch.stack(losses).mean()
