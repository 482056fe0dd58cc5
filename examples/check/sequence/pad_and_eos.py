"""The mask from the token ids: the pad id is not EOS, and a mask that drops EOS is a bias.

Ours, from the REINFORCE estimator with the leave-one-out baseline (``rloo.py``). The batch pads
with ``batch.pad_id``, which is not ``batch.eos_token_id`` (as a tokenizer with a pad token of
its own pads): a mask written from the ids keeps the EOS token when it compares with the pad id

    mᵢₜ = [oᵢₜ ≠ pad],     loss = −(1/N) Σᵢ Aᵢ Σₜ mᵢₜ ℓᵢₜ        (unbiased),

and drops it when it compares with EOS (code written for a tokenizer whose pad is EOS, where
``ids != pad_token_id`` drops every EOS): the decision to stop then gets no gradient, and
E[ĝ] is the gradient of another objective (``eos-masked``).
"""

from __future__ import annotations


def _rloo(batch):
    r = batch.rewards.view(-1, batch.group_size)
    return (r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1)


def pad_mask(logps, batch):
    """The mask ``ids != pad_id``: the completion mask, EOS kept (unbiased, β = 0)."""
    m = (batch.completion_ids != batch.pad_id).to(logps.dtype)
    return -(_rloo(batch) * (logps * m).sum(1)).mean()


def eos_masked(logps, batch):
    """The mask ``ids != eos_token_id`` (and not padding): every EOS dropped (``eos-masked``)."""
    ids = batch.completion_ids
    m = ((ids != batch.eos_token_id) & (ids != batch.pad_id)).to(logps.dtype)
    return -(_rloo(batch) * (logps * m).sum(1)).mean()
