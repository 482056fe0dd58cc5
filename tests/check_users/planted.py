"""Three bugs planted in a correct RLOO: the mask drops EOS, each completion is divided by its
length, and the KL is k1 in the loss (no expected gradient).

``fixed`` applies the check's three fixes: ``batch.completion_mask``, the sum without ÷ length,
k1 in the reward.
"""

from __future__ import annotations


def _rloo(r, G):
    r = r.view(-1, G)
    return (r - (r.sum(dim=1, keepdim=True) - r) / (G - 1)).reshape(-1)


def loss(logps, batch):
    ids = batch.completion_ids
    m = ((ids != batch.eos_token_id) & (ids != batch.pad_id)).to(logps.dtype)
    a = _rloo(batch.rewards, batch.group_size)
    pg = -(a * (logps * m).sum(1) / m.sum(1).clamp(min=1.0)).mean()
    k1 = (logps - batch.ref_logps) * batch.completion_mask
    return pg + batch.beta * k1.sum(1).mean()


def fixed(logps, batch):
    m = batch.completion_mask
    shaped = batch.rewards - batch.beta * ((batch.old_logps - batch.ref_logps) * m).sum(1)
    return -(_rloo(shaped, batch.group_size) * (logps * m).sum(1)).mean()
