r"""The estimator split as trainers split it: advantages in one function, the loss in another.

Ours. ``advantages(batch)`` is the leave-one-out advantage of the KL-shaped reward (``rloo.py``),
computed once on the whole batch, as a generation worker or ``_prepare_inputs`` does; the check
hands each call's slice as ``batch.advantages``. The loss runs on micro-batches that may split
a group (``--micro-batches 4`` on a batch of 2 groups of 8: micro-groups of 4), each divided by
its own size and by the accumulation steps, as ``Trainer`` divides:

    loss_j = −(1/|j|) Σ_{i∈j} Aᵢ Σₜ mᵢₜ ℓᵢₜ / M,     Σⱼ loss_j = −(1/N) Σᵢ Aᵢ Σₜ mᵢₜ ℓᵢₜ.

    eligibility check split_advantages.py:loss --sequence --micro-batches 4 \
        --advantages split_advantages.py:advantages
"""

from __future__ import annotations

ACCUMULATION = 4
"""M, the micro-batches of one step (the trainer's gradient_accumulation_steps)."""


def advantages(batch):
    """Leave-one-out advantages of R − β Σₜ (ℓ^old − ℓ^ref) within each group, [N]."""
    m = batch.completion_mask
    shaped = batch.rewards - batch.beta * ((batch.old_logps - batch.ref_logps) * m).sum(1)
    r = shaped.view(-1, batch.group_size)
    return (r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1)


def loss(logps, batch):
    """Unbiased with ``--micro-batches 4``: each micro-batch's mean ÷ M."""
    seq = (logps * batch.completion_mask).sum(1)
    return -(batch.advantages * seq).mean() / ACCUMULATION
