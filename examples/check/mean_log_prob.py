"""The episode's *mean* log-probability times its returns (Gymnasium issue #1336).

loss = −(1/T) Σ_t ln π(a_t|s_t) · Σ_t G_t: a per-episode mean over steps, and every step's
log-probability multiplied by the sum of all returns-to-go.
"""

from correct import returns_to_go
from torch.distributions import Categorical


def loss(policy, episodes, gamma):
    """−mean_t ln π(a_t|s_t) · Σ_t G_t, averaged over episodes."""
    total = 0.0
    for ep in episodes:
        log_prob = Categorical(logits=policy(ep.obs)).log_prob(ep.actions)
        total = total - log_prob.mean() * returns_to_go(ep.rewards, gamma).sum()
    return total / len(episodes)
