"""Dr. GRPO (Liu et al. 2025): the group mean, no std, every sum divided by N · T_max.

A self-including group mean and a constant normaliser: the check reads a step size, and
``--allow-scale`` passes it.
"""

from __future__ import annotations


def loss(logps, batch):
    r = batch.rewards.view(-1, batch.group_size)
    a = (r - r.mean(dim=1, keepdim=True)).reshape(-1, 1)
    per_token = -a * logps * batch.completion_mask
    return per_token.sum() / (per_token.shape[0] * batch.max_completion_length)
