"""Return normalisation, as pytorch/examples does: (G − mean G) / std G over the batch.

A common practice that rescales and re-centres every step's return by statistics of the batch
itself: biased, and by how much depends on the problem.
"""

import torch
from correct import returns_to_go
from torch.distributions import Categorical


def loss(policy, episodes, gamma):
    """γᵗ (G_t − Ḡ) / s_G ln π(a_t|s_t), Ḡ and s_G over every step of the batch."""
    returns = [returns_to_go(ep.rewards, gamma) for ep in episodes]
    flat = torch.cat(returns)
    mean, std = flat.mean(), flat.std() + 1e-8
    total = 0.0
    for ep, G in zip(episodes, returns, strict=True):
        log_prob = Categorical(logits=policy(ep.obs)).log_prob(ep.actions)
        discount = gamma ** torch.arange(len(ep.rewards), dtype=torch.float32)
        total = total - (discount * (G - mean) / std * log_prob).sum()
    return total / len(episodes)
