"""TRL ``GRPOTrainer``: the four ``loss_type``s × the three ``scale_rewards``, on-policy.

Written by us from the formulas of trl 1.16.0, ``trl/trainer/grpo_trainer.py``: advantages
lines 2765-2798 (``scale_rewards``), the k3 KL 3098-3105 (only when β > 0; multiplied by the
importance ratio when ``use_bias_correction_kl``, True by default since 1.16), the clipped
per-token loss 3112-3120 (ε = 0.2), the KL added 3149-3150, and the aggregations 3153-3170;
``nanstd`` (Bessel-corrected) in ``trl/trainer/utils.py`` 1021.

    A_i = R_i − mean_g R                       (the group mean includes R_i itself)
    A_i ← A_i / (std_g R + 1e-4)               scale_rewards="group" (TRL's default)
    A_i ← A_i / (std_batch R + 1e-4)           scale_rewards="batch"
    l_it = −min(r_it A_i, clip(r_it, 0.8, 1.2) A_i) + β k3_it r_it,   r = exp(ℓ − ℓ_old)

The ratio's value is 1 on-policy but its gradient is not: with the correction, k3's gradient
(1 − ρ)∇ℓ becomes (ℓ − ℓ_ref)∇ℓ, token-local (``kl-token-local``, the option table's
``k3-ratio``); without it (``*_no_bias_correction``), the forward KL's (``kl-forward``).

    grpo:    mean_i (1/L_i) Σ_t m_it l_it      (the GRPO paper)
    bnpo:    Σ_k [Σ_{i∈k,t} m l / Σ_{i∈k,t} m] / K over K = 2 micro-batches (gradient accumulation)
    dr_grpo: Σ m l / (N · max_completion_length)
    dapo:    Σ m l / Σ m over the whole generation batch (TRL's default loss_type)

Call as ``trl_grpo.py:<loss_type>_<scale_rewards>``, e.g. ``trl_grpo.py:dapo_group``.

Superseded for checking: ``eligibility check --framework trl --config cfg.yaml`` with
``trainer: grpo`` runs TRL 1.16.0's own ``GRPOTrainer`` (docs/check.md, its measured table).
This copy (read from trl 1.16.0) stays as the formulas written out and for the tests that
hold the option table to them.
"""

from __future__ import annotations

import torch

EPSILON = 0.2
MICRO_BATCHES = 2  # bnpo: the batch split in two for gradient accumulation


def _advantages(batch, scale: str) -> torch.Tensor:
    """A per completion, [N]: group mean removed, divided by the chosen std."""
    r = batch.rewards.view(-1, batch.group_size)
    a = (r - r.mean(dim=1, keepdim=True)).reshape(-1)
    if scale == "group":
        a = a / (r.std(dim=1, keepdim=True).expand_as(r).reshape(-1) + 1e-4)
    elif scale == "batch":
        a = a / (batch.rewards.std() + 1e-4)
    return a


def _per_token_loss(logps, batch, scale: str, correction: bool = True) -> torch.Tensor:
    """l_it, [N, T]: the clipped surrogate, plus β k3 (× the ratio) when the batch has a β."""
    a = _advantages(batch, scale).unsqueeze(1)
    ratio = torch.exp(logps - batch.old_logps)
    loss = -torch.min(ratio * a, torch.clamp(ratio, 1 - EPSILON, 1 + EPSILON) * a)
    if batch.beta:
        d = batch.ref_logps - logps
        k3 = torch.exp(d) - d - 1
        loss = loss + batch.beta * (k3 * ratio if correction else k3)
    return loss


def _grpo(logps, batch, scale):
    m = batch.completion_mask
    return ((_per_token_loss(logps, batch, scale) * m).sum(1) / m.sum(1).clamp(min=1)).mean()


def _bnpo(logps, batch, scale):
    per_tok, m = _per_token_loss(logps, batch, scale) * batch.completion_mask, batch.completion_mask
    parts = zip(per_tok.chunk(MICRO_BATCHES), m.chunk(MICRO_BATCHES), strict=True)
    return sum(lk.sum() / mk.sum().clamp(min=1) for lk, mk in parts) / MICRO_BATCHES


def _dr_grpo(logps, batch, scale):
    per_tok = _per_token_loss(logps, batch, scale) * batch.completion_mask
    return per_tok.sum() / (per_tok.shape[0] * batch.max_completion_length)


def _dapo(logps, batch, scale, correction=True):
    m = batch.completion_mask
    return (_per_token_loss(logps, batch, scale, correction) * m).sum() / m.sum().clamp(min=1)


# one function per configuration: trl_grpo.py:<loss_type>_<scale_rewards>
def grpo_group(logps, batch):
    """TRL loss_type="grpo", scale_rewards="group"."""
    return _grpo(logps, batch, "group")


def grpo_batch(logps, batch):
    """TRL loss_type="grpo", scale_rewards="batch"."""
    return _grpo(logps, batch, "batch")


def grpo_none(logps, batch):
    """TRL loss_type="grpo", scale_rewards="none"."""
    return _grpo(logps, batch, "none")


def bnpo_group(logps, batch):
    """TRL loss_type="bnpo", scale_rewards="group"."""
    return _bnpo(logps, batch, "group")


def bnpo_batch(logps, batch):
    """TRL loss_type="bnpo", scale_rewards="batch"."""
    return _bnpo(logps, batch, "batch")


def bnpo_none(logps, batch):
    """TRL loss_type="bnpo", scale_rewards="none"."""
    return _bnpo(logps, batch, "none")


def dr_grpo_group(logps, batch):
    """TRL loss_type="dr_grpo", scale_rewards="group"."""
    return _dr_grpo(logps, batch, "group")


def dr_grpo_batch(logps, batch):
    """TRL loss_type="dr_grpo", scale_rewards="batch"."""
    return _dr_grpo(logps, batch, "batch")


def dr_grpo_none(logps, batch):
    """TRL loss_type="dr_grpo", scale_rewards="none"."""
    return _dr_grpo(logps, batch, "none")


def dapo_group(logps, batch):
    """TRL loss_type="dapo", scale_rewards="group"."""
    return _dapo(logps, batch, "group")


def dapo_batch(logps, batch):
    """TRL loss_type="dapo", scale_rewards="batch"."""
    return _dapo(logps, batch, "batch")


def dapo_none(logps, batch):
    """TRL loss_type="dapo", scale_rewards="none"."""
    return _dapo(logps, batch, "none")


def dapo_group_no_bias_correction(logps, batch):
    """TRL's defaults with use_bias_correction_kl=False: k3 alone in the loss."""
    return _dapo(logps, batch, "group", correction=False)


loss = dapo_group  # TRL's defaults: loss_type="dapo", scale_rewards="group"
