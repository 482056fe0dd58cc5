r"""Sampling at τ, scoring at τ: ``--sequence --form model --temperature 0.9``.

A sampler at temperature τ draws from π_τ(o | q) = Πₜ softmax(zₜ / τ)[oₜ], so the policy whose
gradient the step takes is π_τ and its log-probs are log softmax(zₜ / τ):

    ℓₜ = log softmax(z_{P−1+t} / τ)[oₜ],    loss = −(1/N) Σᵢ Aᵢ Σₜ mᵢₜ ℓᵢₜ  (RLOO)

Scored at 1 instead, ℓₜ = log softmax(zₜ)[oₜ] is the score of another policy than the one that
sampled (TRL before its fix; nanoGRPO and simple_GRPO sample at 0.9 and score at 1.0): the check
names it ``temperature-mismatch``. The check passes the sampler's τ as ``batch.temperature``.

    eligibility check examples/check/sequence/temperature.py:scored_at_one --sequence \
        --form model --temperature 0.9 --problem length
"""

from __future__ import annotations

import torch


def _rloo(logps, batch):
    m = batch.completion_mask
    shaped = batch.rewards - batch.beta * ((batch.old_logps - batch.ref_logps) * m).sum(1)
    r = shaped.view(-1, batch.group_size)
    advantages = (r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1)
    return -(advantages * (logps * m).sum(1)).mean()


def _logps(model, batch, tau):
    P = batch.prompt_ids.shape[1]
    logits = model(batch.input_ids, attention_mask=batch.attention_mask).logits[:, P - 1 : -1]
    table = torch.log_softmax(logits / tau, dim=-1)
    return table.gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)


def loss(model, batch):
    """Correct: the logits divided by the sampler's τ before the log-softmax."""
    return _rloo(_logps(model, batch, batch.temperature), batch)


def scored_at_one(model, batch):
    """Sampled at τ, scored at 1: ``temperature-mismatch``."""
    return _rloo(_logps(model, batch, 1.0), batch)
