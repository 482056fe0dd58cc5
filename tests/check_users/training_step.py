"""A training step that calls ``backward()`` and ``optimizer.step()`` itself (``--form step``).

One micro-batch per group, each group's loss divided by the number of groups, the gradient
clipped by ``clip_grad_norm_`` and one optimiser step: RLOO, summed over each completion.
``tight`` clips at 0.01, which every problem's gradient exceeds; ``never_steps`` forgets both
``backward()`` and ``step()``.
"""

from __future__ import annotations

import torch


def _group_loss(model, batch, rows):
    K = batch.completion_ids.shape[1]
    ids = batch.input_ids[rows]
    logits = model(input_ids=ids, logits_to_keep=K + 1).logits[:, :-1]
    logps = torch.log_softmax(logits / batch.temperature, dim=-1)
    logps = logps.gather(-1, ids[:, -K:, None]).squeeze(-1)
    m = batch.completion_mask[rows]
    shaped = batch.rewards[rows] - batch.beta * (
        (batch.old_logps[rows] - batch.ref_logps[rows]) * m
    ).sum(1)
    a = shaped - (shaped.sum() - shaped) / (len(shaped) - 1)
    return -(a * (logps * m).sum(1)).mean()


def step(model, optimizer, batch, max_norm=1.0):
    G = batch.group_size
    groups = len(batch.rewards) // G
    optimizer.zero_grad()
    for g in range(groups):
        (_group_loss(model, batch, slice(g * G, (g + 1) * G)) / groups).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()


def tight(model, optimizer, batch):
    step(model, optimizer, batch, max_norm=0.01)


def fixed(model, optimizer, batch):
    step(model, optimizer, batch, max_norm=1e6)


def never_steps(model, optimizer, batch):
    G = batch.group_size
    _group_loss(model, batch, slice(0, G))
