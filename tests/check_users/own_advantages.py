"""Advantages in a function of their own (``--advantages own_advantages.py:advantages``).

The leave-one-out baseline computed on the whole batch, as a generation worker does, and a
loss that reads ``batch.advantages``. ``broken`` misspells a field: its error is its own.
"""

from __future__ import annotations


def advantages(batch):
    m = batch.completion_mask
    shaped = batch.rewards - batch.beta * ((batch.old_logps - batch.ref_logps) * m).sum(1)
    r = shaped.view(-1, batch.group_size)
    return (r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1)


def broken(batch):
    return batch.reward * 2


def loss(logps, batch):
    return -(batch.advantages * (logps * batch.completion_mask).sum(1)).mean()
