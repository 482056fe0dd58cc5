"""A GRPO loss written as TRL writes it, on a ``transformers`` causal LM (``--form model``).

The per-token log-probs come from a helper in TRL's style: ask the model for the last K + 1
positions' logits, drop the last, divide by the temperature and gather each completion token
with a selective log-softmax. The loss is TRL's ``loss_type="grpo"`` with its default
``scale_rewards="group"``: the group's advantages divided by their std, each completion's token
terms averaged over its own length. ``fixed`` applies the check's two fixes (no ÷ std, no
÷ length), which leaves a self-including group mean: a step size (``--allow-scale``).
"""

from __future__ import annotations

import torch


def selective_log_softmax(logits, index):
    """log softmax(logits)[index], token by token."""
    return torch.log_softmax(logits, dim=-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)


def get_per_token_logps(model, input_ids, attention_mask, logits_to_keep, temperature):
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=logits_to_keep + 1
    ).logits
    logits = logits[:, :-1, :][:, -logits_to_keep:] / temperature
    return selective_log_softmax(logits, input_ids[:, -logits_to_keep:])


def _terms(model, batch, scale_rewards=True):
    K = batch.completion_ids.shape[1]
    logps = get_per_token_logps(model, batch.input_ids, batch.attention_mask, K, batch.temperature)
    rewards = batch.rewards.view(-1, batch.group_size)
    advantages = rewards - rewards.mean(dim=1, keepdim=True)
    if scale_rewards:
        advantages = advantages / (rewards.std(dim=1, keepdim=True) + 1e-4)
    ratio = torch.exp(logps - logps.detach())
    return -ratio * advantages.reshape(-1, 1), batch.completion_mask


def loss(model, batch):
    per_token_loss, mask = _terms(model, batch)
    return ((per_token_loss * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).mean()


def fixed(model, batch):
    per_token_loss, mask = _terms(model, batch, scale_rewards=False)
    return (per_token_loss * mask).sum(dim=1).mean()
