"""REINFORCE as in pytorch/examples (reinforce.py), with the γᵗ factor the discounted J needs.

ĝ = (1/E) Σ_e Σ_t γᵗ G_t ∇ ln π(a_t | s_t), G_t = Σ_{k≥t} γ^{k−t} r_{k+1}: unbiased.
No return normalisation (that is a biased practice: see normalised_returns.py).
"""

import torch
from torch.distributions import Categorical


def returns_to_go(rewards, gamma):
    """G_t for every t of one episode, computed backwards as pytorch/examples does."""
    R, out = 0.0, []
    for r in reversed(rewards.tolist()):
        R = r + gamma * R
        out.insert(0, R)
    return torch.tensor(out)


def loss(policy, episodes, gamma):
    """The REINFORCE loss of a batch: its gradient is −ĝ."""
    total = 0.0
    for ep in episodes:
        log_prob = Categorical(logits=policy(ep.obs)).log_prob(ep.actions)
        discount = gamma ** torch.arange(len(ep.rewards), dtype=torch.float32)
        total = total - (discount * returns_to_go(ep.rewards, gamma) * log_prob).sum()
    return total / len(episodes)


def update(policy, env, gamma, episodes=8):
    """The update form: my own rollout on env, then the same loss."""
    total = 0.0
    for _ in range(episodes):
        obs, _ = env.reset()
        log_probs, rewards, done = [], [], False
        while not done:
            dist = Categorical(logits=policy(torch.as_tensor(obs)))
            action = dist.sample()
            obs, reward, terminated, truncated, _ = env.step(action.item())
            log_probs.append(dist.log_prob(action))
            rewards.append(reward)
            done = terminated or truncated
        G = returns_to_go(torch.tensor(rewards), gamma)
        discount = gamma ** torch.arange(len(rewards), dtype=torch.float32)
        total = total - (discount * G * torch.stack(log_probs)).sum()
    return total / episodes
