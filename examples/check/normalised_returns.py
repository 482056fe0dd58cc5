"""Common practice: standardise the returns over the batch, (G − mean G) / std G.

pytorch/examples and many tutorials do this. The mean subtracted includes each step's own
return and the division is by a random number: the estimate is biased, by an amount that
depends on the problem (see docs/check.md for the measured sizes).

Verdict: scaled (c between 0.11 and 0.82) at the default N; biased (other) where N resolves
the bent direction (chain, --samples 3000).
"""

import torch
from torch.distributions import Categorical


def loss(policy, episodes, gamma):
    """−Σ γᵗ Ĝ_t ln π(a_t | s_t) / E with Ĝ the returns standardised over the whole batch."""
    returns, log_probs, discounts = [], [], []
    for ep in episodes:
        g, rtg = 0.0, []
        for r in reversed(ep.rewards.tolist()):
            g = r + gamma * g
            rtg.insert(0, g)
        returns.append(torch.tensor(rtg))
        log_probs.append(Categorical(logits=policy(ep.obs)).log_prob(ep.actions))
        discounts.append(gamma ** torch.arange(len(rtg), dtype=torch.float32))
    G = torch.cat(returns)
    G = (G - G.mean()) / (G.std() + 1e-8)
    return -(torch.cat(discounts) * G * torch.cat(log_probs)).sum() / len(episodes)
