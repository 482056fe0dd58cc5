"""Common practice: the mean over every step of the batch instead of the mean over episodes.

Dividing by Σ_e T_e (a random number, larger for long batches) instead of E weights short
episodes up; one-step episodes cannot tell the difference.

Verdict (docs/check.md): unbiased on bandit; scaled with c ≈ 1/E[T] on the others.
"""

import torch
from torch.distributions import Categorical


def loss(policy, episodes, gamma):
    """−mean over all steps of γᵗ G_t ln π(a_t | s_t)."""
    terms = []
    for ep in episodes:
        g, returns = 0.0, []
        for r in reversed(ep.rewards.tolist()):
            g = r + gamma * g
            returns.insert(0, g)
        discounts = gamma ** torch.arange(len(returns), dtype=torch.float32)
        log_probs = Categorical(logits=policy(ep.obs)).log_prob(ep.actions)
        terms.append(-(discounts * torch.tensor(returns) * log_probs))
    return torch.cat(terms).mean()
