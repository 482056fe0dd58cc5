"""RLOO with the KL to the reference as GRPO writes it: k3 per token, in the loss.

k3 = exp(ℓ_ref − ℓ) − (ℓ_ref − ℓ) − 1 at β = ``batch.beta``. ``fixed`` applies the check's fix:
k1 in the reward, R̃ = R − β Σₜ (ℓ^old − ℓ^ref)ₜ, before the baseline.
"""

from __future__ import annotations

import torch


def _rloo(r, G):
    r = r.view(-1, G)
    return (r - (r.sum(dim=1, keepdim=True) - r) / (G - 1)).reshape(-1)


def loss(logps, batch):
    m = batch.completion_mask
    a = _rloo(batch.rewards, batch.group_size)
    d = batch.ref_logps - logps
    k3 = torch.exp(d) - d - 1
    return -(a * (logps * m).sum(1)).mean() + batch.beta * ((k3 * m).sum(1)).mean()


def fixed(logps, batch):
    m = batch.completion_mask
    shaped = batch.rewards - batch.beta * ((batch.old_logps - batch.ref_logps) * m).sum(1)
    return -(_rloo(shaped, batch.group_size) * (logps * m).sum(1)).mean()
