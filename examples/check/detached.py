"""Mistake: the loss computed from a detached copy of the logits (alexhernandezgarcia/gflownet#251).

Nothing reaches the policy's parameters; an optimizer step changes nothing.

Expected verdict: no gradient on every problem.
"""

import torch
from torch.distributions import Categorical


def loss(policy, episodes, gamma):
    """The right loss, on ``policy(obs).detach().clone().requires_grad_()``."""
    losses = []
    for ep in episodes:
        g, returns = 0.0, []
        for r in reversed(ep.rewards.tolist()):
            g = r + gamma * g
            returns.insert(0, g)
        discounts = gamma ** torch.arange(len(returns), dtype=torch.float32)
        logits = policy(ep.obs).detach().clone().requires_grad_()
        log_probs = Categorical(logits=logits).log_prob(ep.actions)
        losses.append(-(discounts * torch.tensor(returns) * log_probs).sum())
    return torch.stack(losses).mean()
