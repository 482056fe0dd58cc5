"""Mistake: a baseline that depends on the action: G_t minus the batch's mean return of a_t.

A baseline b(s) leaves E[ĝ] alone because Σ_a π(a|s) ∇ ln π(a|s) = 0; a baseline b(s, a)
does not: E[b(s, a) ∇ ln π(a|s)] ≠ 0. Subtracting each action's own mean return removes
most of the signal that tells the actions apart.

Verdict: biased (other) on chain and gridworld; no gradient on bandit and short-corridor,
where one feature is shared by every state and the per-action means cancel every term.
"""

import torch
from torch.distributions import Categorical


def loss(policy, episodes, gamma):
    """−Σ_t γᵗ (G_t − mean{G : same action in the batch}) ln π(a_t | s_t), per episode."""
    returns, actions, log_probs, discounts = [], [], [], []
    for ep in episodes:
        g, rtg = 0.0, []
        for r in reversed(ep.rewards.tolist()):
            g = r + gamma * g
            rtg.insert(0, g)
        returns.append(torch.tensor(rtg))
        actions.append(ep.actions)
        log_probs.append(Categorical(logits=policy(ep.obs)).log_prob(ep.actions))
        discounts.append(gamma ** torch.arange(len(rtg), dtype=torch.float32))
    G, a = torch.cat(returns), torch.cat(actions)
    baseline = torch.zeros_like(G)
    for action in a.unique():
        baseline[a == action] = G[a == action].mean()
    psi = torch.cat(discounts) * (G - baseline)
    return -(psi * torch.cat(log_probs)).sum() / len(episodes)
