"""Where the KL to the reference goes: k1/k2/k3 in the loss, k1 in the reward.

Ours, from Schulman's estimators (http://joschu.net/blog/kl-approx.html) as GRPO (k3, TRL
``grpo_trainer.py`` 3071-3073, verl ``low_var_kl``), OpenRLHF (k1/k2/k3, ``compute_approx_kl``)
and TRL's RLOO (k1 in the reward) place them. The reward part is a correct RLOO on R alone;
only the KL part changes. With d_t = ℓ_t − ℓ^ref_t, ρ_t = exp(−d_t):

    k1 in the loss  β Σ m d            ∇ = β ∇ℓ: zero in expectation, the KL does nothing
    k2 in the loss  β Σ m d²/2         ∇ = β d ∇ℓ: each token's own KL only (token-local)
    k3 in the loss  β Σ m (ρ − 1 + d)  ∇ = β (1 − ρ) ∇ℓ: the gradient of KL(π_ref ‖ π), forward
    k1 reward-to-go A_it = A_i − β Σ_{t'≥t} d^old_t'    ∇J exactly (the sequence KL's gradient)
    k1 per token    A_it = A_i − β d^old_t              token-local again
"""

from __future__ import annotations

import torch


def _rloo(batch) -> torch.Tensor:
    r = batch.rewards.view(-1, batch.group_size)
    return (r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1, 1)


def _pg(logps, batch, a) -> torch.Tensor:
    return -(a * logps * batch.completion_mask).sum() / logps.shape[0]


def _in_loss(logps, batch, k) -> torch.Tensor:
    d = logps - batch.ref_logps
    return (
        _pg(logps, batch, _rloo(batch))
        + batch.beta * (k(d) * batch.completion_mask).sum() / logps.shape[0]
    )


def k1_in_loss(logps, batch):
    """k1 in the loss: no gradient in expectation."""
    return _in_loss(logps, batch, lambda d: d)


def k2_in_loss(logps, batch):
    """k2 in the loss: the per-token (token-local) KL gradient."""
    return _in_loss(logps, batch, lambda d: d**2 / 2)


def k3_in_loss(logps, batch):
    """k3 in the loss (GRPO, TRL, verl low_var_kl): the forward KL's gradient."""
    return _in_loss(logps, batch, lambda d: torch.exp(-d) - 1 + d)


def k1_reward_to_go(logps, batch):
    """k1 as a per-token reward, summed to go: the exact KL gradient."""
    d = (batch.old_logps - batch.ref_logps) * batch.completion_mask
    to_go = d.flip(1).cumsum(1).flip(1)
    return _pg(logps, batch, _rloo(batch) - batch.beta * to_go)


def k1_per_token_reward(logps, batch):
    """k1 as a per-token reward without the reward-to-go: token-local."""
    d = (batch.old_logps - batch.ref_logps) * batch.completion_mask
    return _pg(logps, batch, _rloo(batch) - batch.beta * d)
