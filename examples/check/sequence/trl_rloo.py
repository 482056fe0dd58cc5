"""TRL ``RLOOTrainer``: leave-one-out advantages, a sequence-level ratio, k1 in the reward.

Written by us from the formulas of trl 1.10.0.dev0 (commit f2cd577),
``trl/trainer/rloo_trainer.py``: the KL penalty in the reward 1526-1535 (k1 summed over the
sequence, from the sampling policy's log-probs), the leave-one-out baseline 1544-1552, the
optional whitening 1557-1558 (``normalize_advantages``, default False), and the loss 1683-1694.

    R̃_i = R_i − β Σ_t m_it (ℓ^old_it − ℓ^ref_it)
    A_i = R̃_i − mean_{j≠i} R̃_j
    loss = −mean_i min(ρ_i A_i, clip(ρ_i, 0.8, 1.2) A_i),   ρ_i = exp(Σ_t m (ℓ − ℓ^old))

Superseded for checking: ``eligibility check --framework trl --config cfg.yaml`` with
``trainer: rloo`` runs TRL 1.16.0's own ``RLOOTrainer`` (docs/check.md, its measured table).
This copy stays as the formulas written out and for the tests that hold the option table to
them. Read from trl 1.10.0.dev0; re-read against trl 1.16.0's ``rloo_trainer.py``
(``_generate_and_score_completions``, ``_compute_loss``): the same formulas (1.16 skips
unscorable completions with NaN, which the check's batches never have).
"""

from __future__ import annotations

import torch

EPSILON = 0.2


def _advantages(batch) -> torch.Tensor:
    m = batch.completion_mask
    shaped = batch.rewards - batch.beta * ((batch.old_logps - batch.ref_logps) * m).sum(1)
    r = shaped.view(-1, batch.group_size)
    baseline = (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)
    return (r - baseline).reshape(-1)


def _loss(logps, batch, a):
    m = batch.completion_mask
    ratio = torch.exp(((logps - batch.old_logps) * m).sum(1))
    return -torch.min(ratio * a, torch.clamp(ratio, 1 - EPSILON, 1 + EPSILON) * a).mean()


def loss(logps, batch):
    """TRL RLOO with its defaults (normalize_advantages=False)."""
    return _loss(logps, batch, _advantages(batch))


def loss_normalize_advantages(logps, batch):
    """TRL RLOO with normalize_advantages=True: A whitened over the batch (Bessel std)."""
    a = _advantages(batch)
    return _loss(logps, batch, (a - a.mean()) / (a.std() + 1e-4))
