"""Off-policy losses (several steps per batch, a sampler μ ≠ π_old), one mistake each.

Each is ``loss(logps, batch)`` for ``eligibility check --off-policy``: ``logps`` the per-token
ln π_θ at θ, ``batch.old_logps`` θ_old's, ``batch.sampler_logps`` μ's. The exact estimator
weights each completion by its whole π_θ/μ = Πₜ (π_θ/π_old)(π_old/μ), detached, times a
leave-one-out advantage, on the summed log-probs. Written apart from the check; the expected
verdicts and places are in ``expected.py``, derived before any run.
"""

from __future__ import annotations

import torch


def _loo(batch):
    r = batch.rewards.view(-1, batch.group_size)
    G = batch.group_size
    return (r - (r.sum(1, keepdim=True) - r) / (G - 1)).reshape(-1)


def _parts(logps, batch):
    """m, ℓ (0 off the mask), ln rₜ = ℓ − ℓ_old per token, ln w = Σₜ (ℓ_old − ℓ_μ) per reply."""
    m = batch.completion_mask > 0
    lp = torch.where(m, logps, 0.0)
    log_r = torch.where(m, lp - batch.old_logps, 0.0)
    log_w = torch.where(m, batch.old_logps - batch.sampler_logps, 0.0).sum(1)
    return m, lp, log_r, log_w


def ratio_clipped_per_token_then_multiplied(logps, batch):
    """Each token's ratio clipped to [0.8, 1.2], then the clipped ratios multiplied over the reply.

    "A sequence-level weight, but with PPO's per-token trust region so no single token can blow
    it up"; times the exact sampler weight, detached.
    """
    m, lp, log_r, log_w = _parts(logps, batch)
    clipped = torch.where(m, log_r.exp().clamp(0.8, 1.2).log(), 0.0).sum(1)
    weight = torch.exp(clipped + log_w).detach()
    return -(weight * _loo(batch) * lp.sum(1)).mean()


def self_normalised_weights(logps, batch):
    """The whole importance weight π_θ/μ divided by its mean over the batch (self-normalised IS).

    "Raw importance weights explode; normalising them to mean one over the batch keeps the step
    size sane."
    """
    _, lp, log_r, log_w = _parts(logps, batch)
    weight = torch.exp(log_r.sum(1) + log_w).detach()
    weight = weight / weight.mean()
    return -(weight * _loo(batch) * lp.sum(1)).mean()


def sampler_corrected_twice(logps, batch):
    """The ratio taken against the sampler (π_θ/μ), and the engine's π_old/μ correction applied too.

    "The ratio's denominator is the rollout engine's log-probs, and the trainer's mismatch
    correction multiplies by π_old/μ as well."
    """
    m, lp, _, log_w = _parts(logps, batch)
    to_sampler = torch.where(m, lp - batch.sampler_logps, 0.0).sum(1)
    weight = torch.exp(to_sampler + log_w).detach()
    return -(weight * _loo(batch) * lp.sum(1)).mean()


def penalty_to_old_policy(logps, batch):
    """The exact weight, plus a k3 penalty KL(π_θ, π_old) per token as a trust region (coef 0.1).

    "Keep each step near the policy that generated the batch": k3 = e^(ℓ_old − ℓ) − (ℓ_old − ℓ)
    − 1 on every completion token, summed per completion, averaged over the batch.
    """
    m, lp, log_r, log_w = _parts(logps, batch)
    weight = torch.exp(log_r.sum(1) + log_w).detach()
    policy = -(weight * _loo(batch) * lp.sum(1)).mean()
    k3 = torch.where(m, torch.exp(-log_r) + log_r - 1.0, 0.0).sum(1)
    return policy + 0.1 * k3.mean()
