"""The log-probability of the greedy action instead of the sampled one."""

import torch
from correct import returns_to_go
from torch.distributions import Categorical


def loss(policy, episodes, gamma):
    """γᵗ G_t ln π(argmax_a π(a|s_t) | s_t): the action taken is ignored."""
    total = 0.0
    for ep in episodes:
        logits = policy(ep.obs)
        greedy = logits.argmax(dim=-1)
        log_prob = Categorical(logits=logits).log_prob(greedy)
        discount = gamma ** torch.arange(len(ep.rewards), dtype=torch.float32)
        total = total - (discount * returns_to_go(ep.rewards, gamma) * log_prob).sum()
    return total / len(episodes)
