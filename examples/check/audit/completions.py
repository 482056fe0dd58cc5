"""Single-completion losses with the mistakes GRPO-family trainers shipped, beside their fix.

Each is ``loss(logps, batch)`` for ``eligibility check --sequence`` (``logps`` [N, W] the
completion tokens' log-probs, ``batch.rewards`` [N], groups of ``batch.group_size``). The fixed
loss is the leave-one-out RLOO summed over each completion's tokens and divided by N
(``fixed``); the credit audit locates each mistake.
"""

from __future__ import annotations

import torch


def _rloo(batch):
    r = batch.rewards.view(-1, batch.group_size)
    return (r - (r.sum(1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1)


def _summed(logps, batch, advantage, weight=1.0):
    terms = logps * weight * advantage[:, None] * batch.completion_mask
    return -terms.sum() / len(advantage)


def fixed(logps, batch):
    """Correct: RLOO, each completion's token terms summed, the batch's mean."""
    return _summed(logps, batch, _rloo(batch))


def whitened_across_groups(logps, batch):
    """REINFORCE++-style: the rewards whitened over the whole batch instead of each group."""
    r = batch.rewards
    return _summed(logps, batch, (r - r.mean()) / (r.std() + 1e-6))


def weighted_by_relative_probability(logps, batch):
    """Each token's term weighted by its detached π(o)/max π over the completion's tokens."""
    p = torch.where(batch.completion_mask > 0, logps.detach().exp(), 0.0)
    return _summed(logps, batch, _rloo(batch), p / p.max(1, keepdim=True).values)


def undivided_accumulation(logps, batch):
    """Each micro-batch's loss divided by its own rows and summed (run with --micro-batches 2)."""
    return _summed(logps, batch, _rloo(batch))


def divided_accumulation(logps, batch):
    """Its fix with --micro-batches 2: each micro-batch's mean divided by the 2 steps."""
    return _summed(logps, batch, _rloo(batch)) / 2
