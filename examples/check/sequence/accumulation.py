r"""Gradient accumulation over M micro-batches, right and wrong: ``--micro-batches 2``.

With ``eligibility check FILE.py:FN --sequence --micro-batches M`` the check splits each batch
into M micro-batches of whole groups, calls the function on each and sums their gradients, as
M calls of ``loss.backward()`` before one optimiser step accumulate them. RLOO on a micro-batch
of N/M completions (rloo.py's formula) is

    loss_j = −(M/N) Σ_{i ∈ j} A_i Σ_t m_it ℓ_it,    Σ_j ∇loss_j = M ∇loss(whole batch),

so each micro-batch's loss divided by M once is unbiased; left undivided the step is M ∇J
(nanoGRPO backpropagates every micro-group undivided), divided twice it is ∇J / M (ms-swift's
DAPO/CISPO losses divided by the accumulation steps a second time). The check names both
``accumulation-scaled`` (c = M and c = 1/M).

    eligibility check examples/check/sequence/accumulation.py:undivided --sequence \
        --micro-batches 2 --problem length,kl
"""

from __future__ import annotations

M = 2
"""The number of micro-batches these losses are written for (give the same --micro-batches)."""


def _rloo(logps, batch):
    """RLOO of one micro-batch, ÷ its own N/M completions (rloo.py's loss, KL in the reward)."""
    m = batch.completion_mask
    shaped = batch.rewards - batch.beta * ((batch.old_logps - batch.ref_logps) * m).sum(1)
    r = shaped.view(-1, batch.group_size)
    advantages = (r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1)
    return -(advantages * (logps * m).sum(1)).mean()


def loss(logps, batch):
    """Unbiased: each micro-batch's loss divided by M once."""
    return _rloo(logps, batch) / M


def undivided(logps, batch):
    """Every micro-batch backpropagated as it is: M ∇J (accumulation-scaled, c = M)."""
    return _rloo(logps, batch)


def divided_twice(logps, batch):
    """Divided by M, then by M again: ∇J / M (accumulation-scaled, c = 1/M)."""
    return _rloo(logps, batch) / M / M
