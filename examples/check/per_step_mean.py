"""A mean over steps instead of a sum: each episode's terms divided by its length T."""

import torch
from correct import returns_to_go
from torch.distributions import Categorical


def loss(policy, episodes, gamma):
    """(1/T) Σ_t γᵗ G_t ln π(a_t|s_t), averaged over episodes."""
    total = 0.0
    for ep in episodes:
        log_prob = Categorical(logits=policy(ep.obs)).log_prob(ep.actions)
        discount = gamma ** torch.arange(len(ep.rewards), dtype=torch.float32)
        total = total - (discount * returns_to_go(ep.rewards, gamma) * log_prob).mean()
    return total / len(episodes)
