"""Mistake: the log-probability of the greedy action argmax π, not of the action played.

E[G ∇ ln π(a*)] pushes up the most likely action in proportion to the return, whatever was
played: with positive rewards it always sharpens the policy.

Verdict: biased (other) on bandit, chain and gridworld; scaled on short-corridor, which sees
one direction only (docs/check.md).
"""

import torch
from torch.distributions import Categorical


def loss(policy, episodes, gamma):
    """−Σ_t γᵗ G_t ln π(argmax π | s_t), averaged over episodes."""
    losses = []
    for ep in episodes:
        g, returns = 0.0, []
        for r in reversed(ep.rewards.tolist()):
            g = r + gamma * g
            returns.insert(0, g)
        discounts = gamma ** torch.arange(len(returns), dtype=torch.float32)
        logits = policy(ep.obs)
        greedy = logits.argmax(dim=-1)
        log_probs = Categorical(logits=logits).log_prob(greedy)
        losses.append(-(discounts * torch.tensor(returns) * log_probs).sum())
    return torch.stack(losses).mean()
