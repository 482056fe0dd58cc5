"""Fresh off-policy mistakes, written apart from the audit."""

import torch


def _rloo(batch):
    r = batch.rewards.view(-1, batch.group_size)
    G = batch.group_size
    return ((G * r - r.sum(1, keepdim=True)) / (G - 1)).reshape(-1)


def ratio_against_sampler(logps, batch):
    """The per-token ratio taken against μ (the sampler) where π_old is meant, PPO-clipped."""
    m = batch.completion_mask > 0
    a = _rloo(batch)[:, None]
    r = torch.exp(torch.where(m, logps - batch.sampler_logps, 0.0))
    obj = torch.minimum(r * a, r.clamp(0.8, 1.2) * a)
    return -(torch.where(m, obj, 0.0).sum(1)).mean()


def sequence_ratio_squared(logps, batch):
    """The exact weight, squared: sg(w s)² A Σ ℓ."""
    m = batch.completion_mask > 0
    lp = torch.where(m, logps, 0.0)
    log_s = torch.where(m, lp - batch.old_logps, 0.0).sum(1)
    log_w = torch.where(m, batch.old_logps - batch.sampler_logps, 0.0).sum(1)
    weight = torch.exp(2 * (log_s + log_w)).detach()
    return -(weight * _rloo(batch) * lp.sum(1)).mean()


def sampler_weight_per_token_mean(logps, batch):
    """The exact product, but the sampler's weight the mean of its per-token ratios."""
    m = batch.completion_mask > 0
    lp = torch.where(m, logps, 0.0)
    log_s = torch.where(m, lp - batch.old_logps, 0.0).sum(1)
    q = torch.where(m, torch.exp(batch.old_logps - batch.sampler_logps), 0.0)
    w = q.sum(1) / m.sum(1)
    weight = (torch.exp(log_s) * w).detach()
    return -(weight * _rloo(batch) * lp.sum(1)).mean()
