"""The seed question's setting: the policy gives probabilities, and Categorical(probs=…) is used.

Run with --policy probs. Unbiased: the probs are renormalised rows, and the gradient flows
through them to the logits underneath.
"""

import torch
from torch.distributions import Categorical


def loss(policy, episodes, gamma):
    """REINFORCE with γᵗ G_t, through Categorical(probs=policy(obs))."""
    total = 0.0
    for ep in episodes:
        T = len(ep.rewards)
        discount = gamma ** torch.arange(T, dtype=torch.float32)
        # G_t = Σ_{k≥t} γ^{k−t} r_k, as a matrix product
        k = torch.arange(T)
        lag = (k[None, :] - k[:, None]).float()
        powers = torch.where(lag >= 0, gamma**lag, 0.0)
        G = powers @ ep.rewards
        log_prob = Categorical(probs=policy(ep.obs)).log_prob(ep.actions)
        total = total - (discount * G * log_prob).sum()
    return total / len(episodes)
