"""A correct REINFORCE loss, in the style of pytorch/examples' reinforce.py (no normalisation).

J = E[Σ_t γᵗ r_t]; the unbiased estimate is (1/E) Σ_e Σ_t γᵗ G_t ∇ ln π(a_t | s_t), with the
return-to-go G_t = r_t + γ G_{t+1}. The loss is its negative (``loss.backward()`` descends).

    eligibility check examples/check/correct.py:loss --problem all
    eligibility check examples/check/correct.py:loss_probs --policy probs
    eligibility check examples/check/correct.py:objective --objective
    eligibility check examples/check/correct.py:update --form update
"""

import torch
from torch.distributions import Categorical


def returns_to_go(rewards, gamma):
    """G_t = r_t + γ G_{t+1}, from the last step back."""
    out, g = [], 0.0
    for r in reversed(rewards.tolist()):
        g = r + gamma * g
        out.insert(0, g)
    return torch.tensor(out)


def episode_loss(log_probs, rewards, gamma):
    """−Σ_t γᵗ G_t ln π(a_t | s_t) for one episode."""
    discounts = gamma ** torch.arange(len(rewards), dtype=torch.float32)
    return -(discounts * returns_to_go(rewards, gamma) * log_probs).sum()


def loss(policy, episodes, gamma):
    """The mean over episodes of each episode's loss (``policy`` gives logits)."""
    losses = [
        episode_loss(Categorical(logits=policy(ep.obs)).log_prob(ep.actions), ep.rewards, gamma)
        for ep in episodes
    ]
    return torch.stack(losses).mean()


def loss_probs(policy, episodes, gamma):
    """The same with ``Categorical(probs=...)`` (run with --policy probs)."""
    losses = [
        episode_loss(Categorical(probs=policy(ep.obs)).log_prob(ep.actions), ep.rewards, gamma)
        for ep in episodes
    ]
    return torch.stack(losses).mean()


def objective(policy, episodes, gamma):
    """The surrogate objective to maximise (run with --objective)."""
    return -loss(policy, episodes, gamma)


def update(policy, env, gamma, n_episodes=16):
    """The whole update: play episodes on ``env`` as pytorch/examples does, then the loss."""
    losses = []
    for _ in range(n_episodes):
        obs, _ = env.reset()
        log_probs, rewards, done = [], [], False
        while not done:
            dist = Categorical(logits=policy(torch.as_tensor(obs)))
            action = dist.sample()
            obs, reward, terminated, truncated, _ = env.step(action.item())
            log_probs.append(dist.log_prob(action))
            rewards.append(reward)
            done = terminated or truncated
        losses.append(episode_loss(torch.stack(log_probs), torch.tensor(rewards), gamma))
    return torch.stack(losses).mean()
