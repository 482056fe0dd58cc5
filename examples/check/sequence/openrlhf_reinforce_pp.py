"""OpenRLHF REINFORCE++: k1 in a per-token reward, returns-to-go, global whitening.

Written by us from the formulas of OpenRLHF 0.11.0 (commit 3c3be62):
``openrlhf/trainer/ppo_utils/experience_maker.py`` ``compute_advantages_and_returns``
(237-322: the group mean for ``reinforce_baseline``, the returns, the whitening over every
token of the batch with the biased variance) and ``get_cumulative_returns`` (380-); the reward
``openrlhf/models/utils.py`` ``compute_reward`` 98-128 (R on the last real token, −β k1 on every
token) with ``compute_approx_kl`` 64-95 (k1, clamped to ±10); the token-level loss
``openrlhf/models/loss.py`` ``aggregate_loss`` 11-39 (a masked mean over the batch's tokens).

    r_it = −β clamp(ℓ^old_it − ℓ^ref_it, ±10) + R_i [t = L_i]
    G_it = Σ_{t' ≥ t} r_it'                              (γ = 1)
    A_it = (G_it − μ) / √max(σ², 1e-8),   μ, σ² over every real token of the batch
    loss = Σ m · (−clip-surrogate(r, A)) / Σ m

Superseded for checking: ``eligibility check --framework openrlhf --config cfg.yaml`` runs
OpenRLHF 0.11.2's own advantage code and ``PolicyLoss`` (docs/check.md, its measured table).
This copy stays as the formulas written out and for the tests that hold the option table to
them; it was read from OpenRLHF 0.11.0 and not re-read against 0.11.2: where the two differ,
the adapter's table is the current one.
"""

from __future__ import annotations

import torch

EPSILON = 0.2


def _returns(batch, outcome: torch.Tensor) -> torch.Tensor:
    m = batch.completion_mask
    kl = torch.clamp(batch.old_logps - batch.ref_logps, -10, 10)
    last = (m.sum(1).long() - 1).unsqueeze(1)
    r = (-batch.beta * kl).scatter_add(1, last, outcome.unsqueeze(1).to(kl.dtype)) * m
    return r.flip(1).cumsum(1).flip(1)


def _loss(logps, batch, outcome):
    m = batch.completion_mask
    g = _returns(batch, outcome)
    mean = (g * m).sum() / m.sum()
    var = ((g - mean) ** 2 * m).sum() / m.sum()
    a = (g - mean) * var.clamp(min=1e-8).rsqrt()
    ratio = torch.exp(torch.clamp(logps - batch.old_logps, -20, 20))
    per_tok = -torch.min(ratio * a, torch.clamp(ratio, 1 - EPSILON, 1 + EPSILON) * a)
    return (per_tok * m).sum() / m.sum()


def loss(logps, batch):
    """``--advantage_estimator reinforce`` (REINFORCE++): no group baseline."""
    return _loss(logps, batch, batch.rewards)


def loss_baseline(logps, batch):
    """``--advantage_estimator reinforce_baseline``: the group mean removed first."""
    r = batch.rewards.view(-1, batch.group_size)
    return _loss(logps, batch, (r - r.mean(dim=1, keepdim=True)).reshape(-1))
