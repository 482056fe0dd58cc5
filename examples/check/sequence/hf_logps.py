"""A loss written for Hugging Face models, run unchanged in ``--form model``.

Ours, written from the formula of a causal LM's per-token log-probabilities the way trainers
compute them (TRL's per-token helper among them): ask the model for the logits of the last
K + 1 positions only (``logits_to_keep``), drop the last one (it predicts past the end), keep
the last K, divide by the sampling temperature τ and gather each completion token:

    ℓᵢₜ = log softmax(z_{i, P−1+t} / τ)[oᵢₜ],   t < K = W (the completion's width),

then RLOO (``rloo.py``). It reads ``model.device`` and ``model.config.pad_token_id`` too.
"""

from __future__ import annotations

import torch


def per_token_logps(model, input_ids, attention_mask, logits_to_keep, temperature=1.0):
    """log π(oₜ | o_{<t}) of the last ``logits_to_keep`` tokens, [N, K]."""
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=logits_to_keep + 1
    ).logits
    logits = logits[:, :-1, :] / temperature  # position j predicts token j + 1
    ids = input_ids[:, -logits_to_keep:]
    return torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def loss(model, batch):
    """RLOO on the log-probs of the completion, masked where the ids are padding."""
    device = model.device
    input_ids = batch.input_ids.to(device)
    K = batch.completion_ids.shape[1]
    logps = per_token_logps(model, input_ids, batch.attention_mask, K, batch.temperature)
    mask = (input_ids[:, -K:] != model.config.pad_token_id).to(logps.dtype)
    shaped = batch.rewards - batch.beta * ((batch.old_logps - batch.ref_logps) * mask).sum(1)
    r = shaped.view(-1, batch.group_size)
    a = (r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1)
    return -(a * (logps * mask).sum(1)).mean()
