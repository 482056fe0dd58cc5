"""A training step as trainers write it, checked with ``--form step``: backward, clip, step.

Ours, from the REINFORCE estimator with the leave-one-out baseline (``rloo.py``), written the
way small trainers write their step: for each group (a micro-batch), the log-probs from the
model (as ``hf_logps.py``), the loss of that group divided by the number of groups so that the
accumulated gradient is the batch's, ``loss.backward()``; then ``clip_grad_norm_`` and one
``optimizer.step()``:

    Σ_g ∇(loss_g / n_groups) = ∇loss,     loss = −(1/N) Σᵢ Aᵢ Σₜ mᵢₜ ℓᵢₜ.

The check's optimiser records the step (a norm that is never reached leaves it as it is).
"""

from __future__ import annotations

import torch


def _group_loss(model, batch, rows):
    K = batch.completion_ids.shape[1]  # the logits of the last K + 1 positions, the last dropped
    ids = batch.input_ids[rows]
    logits = model(input_ids=ids, logits_to_keep=K + 1).logits[:, :-1]
    lsm = torch.log_softmax(logits / batch.temperature, dim=-1)
    logps = lsm.gather(-1, ids[:, -K:, None]).squeeze(-1)
    m = batch.completion_mask[rows]
    shaped = batch.rewards[rows] - batch.beta * (
        (batch.old_logps[rows] - batch.ref_logps[rows]) * m
    ).sum(1)
    a = shaped - (shaped.sum() - shaped) / (len(shaped) - 1)
    return -(a * (logps * m).sum(1)).mean()


def step(model, optimizer, batch, max_norm=1e6):
    """Backward per group (÷ the number of groups), clip, one optimiser step: unbiased."""
    G = batch.group_size
    groups = len(batch.rewards) // G
    optimizer.zero_grad()
    for g in range(groups):
        (_group_loss(model, batch, slice(g * G, (g + 1) * G)) / groups).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad()


def step_per_group(model, optimizer, batch):
    """An optimiser step after every group's backward (÷ the number of groups).

    The steps sum to the batch's gradient at θ (the check's optimiser records them without
    moving θ): unbiased.
    """
    G = batch.group_size
    groups = len(batch.rewards) // G
    for g in range(groups):
        optimizer.zero_grad()
        (_group_loss(model, batch, slice(g * G, (g + 1) * G)) / groups).backward()
        optimizer.step()
