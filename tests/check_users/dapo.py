"""DAPO (Yu et al. 2025) on its on-policy step: the group's std, one token mean over the batch.

Clip-higher (ε_low 0.2, ε_high 0.28) cuts nothing at θ = θ_old; the token mean counts the
batch's tokens. ``fixed`` applies the check's fixes: no ÷ std, ÷ N · T_max.
"""

from __future__ import annotations

import torch


def _loss(logps, batch, std=True, constant=False):
    r = batch.rewards.view(-1, batch.group_size)
    a = r - r.mean(dim=1, keepdim=True)
    if std:
        a = a / (r.std(dim=1, keepdim=True) + 1e-6)
    a = a.reshape(-1, 1)
    ratio = torch.exp(logps - logps.detach())
    per_token = -torch.min(ratio * a, ratio.clamp(1 - 0.2, 1 + 0.28) * a)
    m = batch.completion_mask
    if constant:
        return (per_token * m).sum() / (len(m) * batch.max_completion_length)
    return (per_token * m).sum() / m.sum()


def loss(logps, batch):
    return _loss(logps, batch)


def fixed(logps, batch):
    return _loss(logps, batch, std=False, constant=True)
