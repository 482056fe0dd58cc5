"""Several gradient steps on one batch, no importance ratio (a trainer's ``repeat``).

A trainer that repeats its update on each batch (Tianshou's REINFORCE with ``repeat``) takes
its k-th step at θₖ₋₁, on episodes drawn at θ:

    θ₀ = θ,  θⱼ = θⱼ₋₁ + α ĝ_B(θⱼ₋₁),  the k-th step's ĝ = ĝ_B(θₖ₋₁),

with ĝ_B(θ') the batch's REINFORCE estimate at θ' and no ratio π_θ'/π_θ: biased from the
second step on. ``loss`` is that k-th step's loss for k = 2, α = 0.1 (plain SGD): the check
hands it a batch at θ and differentiates what it returns at θ, which is the gradient at θ₁.
"""

import torch
from torch.distributions import Categorical

REPEAT = 2
"""k, the gradient steps taken on each batch (1: plain REINFORCE)."""
LR = 0.1
"""α, the step size of the inner SGD steps."""


def returns_to_go(rewards, gamma):
    """G_t for every t of one episode: Σ_{k≥t} γ^{k−t} r_{k+1}."""
    t = torch.arange(len(rewards))
    power = (t[None, :] - t[:, None]).float()
    return torch.where(power >= 0, gamma**power, 0.0) @ rewards


def loss(policy, episodes, gamma, repeat=REPEAT, lr=LR):
    """The batch's REINFORCE loss after ``repeat − 1`` SGD steps of size ``lr`` on it."""
    obs = torch.cat([ep.obs for ep in episodes])
    actions = torch.cat([ep.actions for ep in episodes])
    G = torch.cat([returns_to_go(ep.rewards, gamma) for ep in episodes])
    t = torch.cat([torch.arange(len(ep.rewards), dtype=torch.float32) for ep in episodes])
    weight = gamma**t * G / len(episodes)

    def batch_loss(params):
        logits = torch.func.functional_call(policy, params, (obs,))
        return -(weight * Categorical(logits=logits).log_prob(actions)).sum()

    theta = dict(policy.named_parameters())
    p = {n: v.detach().clone() for n, v in theta.items()}
    for _ in range(repeat - 1):  # the earlier steps, taken on a copy of the parameters
        p = {n: v.requires_grad_() for n, v in p.items()}
        grads = torch.autograd.grad(batch_loss(p), list(p.values()))
        p = {n: (v - lr * g).detach() for (n, v), g in zip(p.items(), grads, strict=True)}
    # evaluated at θ' = θ + (θₖ₋₁ − θ), the shift held constant: its gradient is the one at θₖ₋₁
    return batch_loss({n: theta[n] + (p[n] - theta[n]).detach() for n in theta})


def loss_three_steps(policy, episodes, gamma):
    """The third step's loss (k = 3, α = 0.1)."""
    return loss(policy, episodes, gamma, repeat=3)
