"""A token mean whose denominator counts tokens its numerator dropped (TRL ≤ 1.8).

TRL's ``mask_truncated_completions`` removes a truncated completion (no EOS within T) from
the loss; up to TRL 1.8 the DAPO/BNPO token mean then still divided by every completion token,
the truncated ones included. Written from that formula, with leave-one-out advantages:

    loss = −Σᵢ keepᵢ Aᵢ Σₜ mᵢₜ ℓᵢₜ / Σᵢ Σₜ mᵢₜ,     keepᵢ = 1{oᵢ holds an EOS}

The check names it ``truncated-masked, masked-tokens-in-normaliser,
batch-dependent-normaliser``: the truncated completions dropped, their tokens in the
denominator, a token mean. EOS is token 0 in the check's problems
(``eligibility.lab.sequence.builtin``).

    eligibility check examples/check/sequence/masked_tokens.py:loss --sequence --problem length
"""

from __future__ import annotations

EOS = 0


def loss(logps, batch):
    """Truncated completions out of the numerator, their tokens still in the denominator."""
    m = batch.completion_mask
    keep = ((batch.completion_ids == EOS) & (m > 0)).any(dim=1).to(logps.dtype)
    r = batch.rewards.view(-1, batch.group_size)
    advantages = (r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1)
    return -(keep * advantages * (logps * m).sum(1)).sum() / m.sum()
