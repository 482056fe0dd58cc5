"""The model form, ``loss(model, batch)``: the user computes the log-probs from the logits.

The correct one shifts: the logits at position P − 1 + t predict completion token t (as every
Hugging Face causal LM, and TRL's ``_get_len_logps_and_entropies``, which keeps the last
``logits_to_keep + 1`` positions and drops the final one). The mistakes below are the ones
users make; each then feeds the same correct RLOO (``rloo.py``).

Two of them hide behind the baseline. A prompt's tokens are shared by its whole group, so with
advantages that sum to zero over a group (RLOO, a group mean) the prompt's log-probs cancel
exactly: ``prompt_in_loss`` is then harmless, and only ``prompt_in_loss_no_baseline`` (A = R̃,
the plain REINFORCE estimator) shows it. Padding log-probs count L_max − L times per sequence,
so ``padding_in_loss`` shows only where lengths correlate with the advantage.
"""

from __future__ import annotations

import torch


def _rloo_loss(logps, mask, batch, baseline=True):
    m = batch.completion_mask
    shaped = batch.rewards - batch.beta * ((batch.old_logps - batch.ref_logps) * m).sum(1)
    r = shaped.view(-1, batch.group_size)
    if baseline:
        r = r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)
    return -(r.reshape(-1) * (logps * mask).sum(1)).mean()


def _gather(logits, labels):
    return torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def loss(model, batch):
    """Correct: logits[:, P−1 : −1] against the completion, masked."""
    P = batch.prompt_ids.shape[1]
    logits = model(batch.input_ids, attention_mask=batch.attention_mask).logits
    logps = _gather(logits[:, P - 1 : -1], batch.completion_ids)
    return _rloo_loss(logps, batch.completion_mask, batch)


def no_baseline(model, batch):
    """Correct, without a baseline (A = R̃): unbiased, noisier."""
    P = batch.prompt_ids.shape[1]
    logits = model(batch.input_ids, attention_mask=batch.attention_mask).logits
    logps = _gather(logits[:, P - 1 : -1], batch.completion_ids)
    return _rloo_loss(logps, batch.completion_mask, batch, baseline=False)


def no_shift(model, batch):
    """Mistake: logits[:, P:] against the completion (each token scored by its own position)."""
    P = batch.prompt_ids.shape[1]
    logits = model(batch.input_ids, attention_mask=batch.attention_mask).logits
    logps = _gather(logits[:, P:], batch.completion_ids)
    return _rloo_loss(logps, batch.completion_mask, batch)


def prompt_in_loss(model, batch):
    """Mistake: every next-token log-prob of prompt and completion, masked by attention_mask."""
    logits = model(batch.input_ids, attention_mask=batch.attention_mask).logits
    logps = _gather(logits[:, :-1], batch.input_ids[:, 1:])
    return _rloo_loss(logps, batch.attention_mask[:, 1:].to(logps.dtype), batch)


def prompt_in_loss_no_baseline(model, batch):
    """Mistake: the prompt's log-probs in the loss, and no baseline to cancel them."""
    logits = model(batch.input_ids, attention_mask=batch.attention_mask).logits
    logps = _gather(logits[:, :-1], batch.input_ids[:, 1:])
    mask = batch.attention_mask[:, 1:].to(logps.dtype)
    return _rloo_loss(logps, mask, batch, baseline=False)


def prompt_in_loss_token_mean(model, batch):
    """Mistake, Hugging Face style: labels input_ids[:, 1:], mask attention_mask[:, 1:].

    A token mean Σ m l / Σ m over the batch, prompt tokens in the sum and in the count.
    """
    logits = model(batch.input_ids, attention_mask=batch.attention_mask).logits
    logps = _gather(logits[:, :-1], batch.input_ids[:, 1:])
    mask = batch.attention_mask[:, 1:].to(logps.dtype)
    r = batch.rewards.view(-1, batch.group_size)
    a = (r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1, 1)
    return -(a * logps * mask).sum() / mask.sum()


def padding_in_loss(model, batch):
    """Mistake: the completion's log-probs shifted correctly, but padding left unmasked."""
    P = batch.prompt_ids.shape[1]
    logits = model(batch.input_ids).logits
    logps = _gather(logits[:, P - 1 : -1], batch.completion_ids)
    return _rloo_loss(logps, torch.ones_like(batch.completion_mask), batch)
