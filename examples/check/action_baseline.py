"""A baseline that depends on the action taken: b(s, a) = a (the action's index).

A baseline must not depend on the action: E[b(s, a) ∇ ln π(a|s)] ≠ 0 then.
"""

import torch
from correct import returns_to_go
from torch.distributions import Categorical


def loss(policy, episodes, gamma):
    """γᵗ (G_t − a_t) ln π(a_t|s_t)."""
    total = 0.0
    for ep in episodes:
        log_prob = Categorical(logits=policy(ep.obs)).log_prob(ep.actions)
        discount = gamma ** torch.arange(len(ep.rewards), dtype=torch.float32)
        advantage = returns_to_go(ep.rewards, gamma) - ep.actions.float()
        total = total - (discount * advantage * log_prob).sum()
    return total / len(episodes)
