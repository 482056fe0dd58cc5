"""REINFORCE exactly as pytorch/examples writes it: G_t without the γᵗ factor in front.

ĝ = Σ_t G_t ∇ ln π(a_t | s_t) estimates Σ_s d₁(s) Σ_a π Q e (undiscounted visitation d₁),
not ∇J of the discounted objective: biased whenever γ < 1 (Thomas, 2014).
"""

from correct import returns_to_go
from torch.distributions import Categorical


def loss(policy, episodes, gamma):
    """Σ_t G_t ln π(a_t|s_t), averaged over episodes: the γᵗ dropped."""
    total = 0.0
    for ep in episodes:
        log_prob = Categorical(logits=policy(ep.obs)).log_prob(ep.actions)
        total = total - (returns_to_go(ep.rewards, gamma) * log_prob).sum()
    return total / len(episodes)
