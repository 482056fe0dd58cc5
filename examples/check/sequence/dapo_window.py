r"""A DAPO token mean taken over the accumulation window, not the batch (TRL ≤ 1.9).

DAPO divides the batch's token terms by the batch's completion tokens. With gradient
accumulation the loss is computed a micro-batch at a time, and the normaliser must stay the
batch's; up to TRL 1.9 it was counted over the window of micro-batches one optimiser step
accumulates, which is not the generation batch when ``steps_per_generation`` differs from
``gradient_accumulation_steps`` (fixed in TRL 1.10). Written from that formula for the
smallest such window, one micro-batch, with leave-one-out advantages:

    loss_j = −(1/M) Σ_{i ∈ j} Aᵢ Σₜ mᵢₜ ℓᵢₜ / Σ_{i ∈ j} Σₜ mᵢₜ

for each of the M micro-batches j of a batch, the gradients summed over j. Each window's own
token count is a random factor correlated with its completions' lengths, like the batch's in
DAPO itself, but another one: the check names it ``batch-dependent-normaliser``, the token mean
that matches being the one per micro-batch (``micro-batch-token-mean`` in the option table).

    eligibility check examples/check/sequence/dapo_window.py:window --sequence \
        --micro-batches 2 --problem length,kl
"""

from __future__ import annotations

M = 2
"""The number of micro-batches this loss is written for (give the same --micro-batches)."""


def window(logps, batch):
    """A micro-batch's token terms over its own token count, ÷ M: the window's token mean."""
    m = batch.completion_mask
    shaped = batch.rewards - batch.beta * ((batch.old_logps - batch.ref_logps) * m).sum(1)
    r = shaped.view(-1, batch.group_size)
    advantages = (r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1)
    return -(advantages[:, None] * logps * m).sum() / m.sum() / M
