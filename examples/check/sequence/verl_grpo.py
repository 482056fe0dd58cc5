"""verl GRPO: the four ``loss_agg_mode``s, with and without ``norm_adv_by_std_in_grpo``.

Written by us from the formulas of verl 0.8.0.dev (commit b178a3c),
``verl/trainer/ppo/core_algos.py``: ``compute_grpo_outcome_advantage`` 267-331 (torch.std,
i.e. Bessel-corrected; ε = 1e-6), ``agg_loss`` 1025-1081, ``compute_policy_loss_vanilla``
1160-1251 (clip 0.2, dual clip 3.0) and ``kl_penalty_forward`` 1867-1902 (``low_var_kl`` = k3,
clamped); the KL loss is added in ``verl/workers/actor/dp_actor.py`` 640-648 when
``use_kl_loss`` is set, aggregated with the same mode. Defaults (``actor.yaml``):
loss_agg_mode=token-mean, kl_loss_type=low_var_kl; here kl_loss_coef = the batch's β.

    A_i = (R_i − mean_g R) / (std_g R + 1e-6)      (without std: R_i − mean_g R)
    l_it = −clip-surrogate(r_it, A_i) + β k3_it      (k3 in the loss when β > 0)

    token-mean:              Σ m l / Σ m
    seq-mean-token-sum:      (1/N) Σ_i Σ_t m l
    seq-mean-token-mean:     (1/N) Σ_i Σ_t m l / L_i
    seq-mean-token-sum-norm: Σ m l / loss_scale_factor, default the response width; verl pads
                             every response to rollout.response_length, i.e. T here

Call as ``verl_grpo.py:<mode with _ for ->`` (std) or ``..._no_std``, e.g.
``verl_grpo.py:seq_mean_token_mean_no_std``.

Superseded for checking: ``eligibility check --framework verl --config cfg.yaml`` runs
verl 0.9.1's own advantage and loss code (docs/check.md, its measured table). This copy stays
as the formulas written out and for the tests that hold the option table to them; it was read
from verl 0.8.0.dev and not re-read against 0.9.1: where the two differ, the adapter's table
is the current one.
"""

from __future__ import annotations

import torch

CLIP, DUAL_CLIP = 0.2, 3.0


def _advantages(batch, std: bool) -> torch.Tensor:
    r = batch.rewards.view(-1, batch.group_size)
    a = r - r.mean(dim=1, keepdim=True)
    if std:
        a = a / (r.std(dim=1, keepdim=True) + 1e-6)
    return a.reshape(-1, 1)


def _k3(logps, ref):
    d = torch.clamp(ref - logps, -20, 20)
    return torch.clamp(torch.exp(d) - d - 1, -10, 10)


def _per_token(logps, batch, std):
    a = _advantages(batch, std)
    ratio = torch.exp(torch.clamp(logps - batch.old_logps, -20, 20))
    clipped = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - CLIP, 1 + CLIP))
    pg = torch.where(a < 0, torch.minimum(-a * DUAL_CLIP, clipped), clipped)
    return pg, (_k3(logps, batch.ref_logps) if batch.beta else None)


def _agg(per_tok, batch, mode):
    m = batch.completion_mask
    if mode == "token-mean":
        return (per_tok * m).sum() / m.sum()
    if mode == "seq-mean-token-sum":
        return (per_tok * m).sum(1).mean()
    if mode == "seq-mean-token-mean":
        return ((per_tok * m).sum(1) / (m.sum(1) + 1e-8)).mean()
    return (per_tok * m).sum() / batch.max_completion_length  # seq-mean-token-sum-norm


def _loss(logps, batch, mode, std=True):
    pg, kl = _per_token(logps, batch, std)
    out = _agg(pg, batch, mode)
    return out if kl is None else out + batch.beta * _agg(kl, batch, mode)


def token_mean(logps, batch):
    """verl loss_agg_mode="token-mean", norm_adv_by_std_in_grpo=True."""
    return _loss(logps, batch, "token-mean")


def token_mean_no_std(logps, batch):
    """verl loss_agg_mode="token-mean", norm_adv_by_std_in_grpo=False."""
    return _loss(logps, batch, "token-mean", std=False)


def seq_mean_token_sum(logps, batch):
    """verl loss_agg_mode="seq-mean-token-sum", norm_adv_by_std_in_grpo=True."""
    return _loss(logps, batch, "seq-mean-token-sum")


def seq_mean_token_sum_no_std(logps, batch):
    """verl loss_agg_mode="seq-mean-token-sum", norm_adv_by_std_in_grpo=False."""
    return _loss(logps, batch, "seq-mean-token-sum", std=False)


def seq_mean_token_mean(logps, batch):
    """verl loss_agg_mode="seq-mean-token-mean", norm_adv_by_std_in_grpo=True."""
    return _loss(logps, batch, "seq-mean-token-mean")


def seq_mean_token_mean_no_std(logps, batch):
    """verl loss_agg_mode="seq-mean-token-mean", norm_adv_by_std_in_grpo=False."""
    return _loss(logps, batch, "seq-mean-token-mean", std=False)


def seq_mean_token_sum_norm(logps, batch):
    """verl loss_agg_mode="seq-mean-token-sum-norm", norm_adv_by_std_in_grpo=True."""
    return _loss(logps, batch, "seq-mean-token-sum-norm")


def seq_mean_token_sum_norm_no_std(logps, batch):
    """verl loss_agg_mode="seq-mean-token-sum-norm", norm_adv_by_std_in_grpo=False."""
    return _loss(logps, batch, "seq-mean-token-sum-norm", std=False)


loss = token_mean  # verl's defaults
