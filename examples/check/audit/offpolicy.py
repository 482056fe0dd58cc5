"""An off-policy loss that reads the wrong entry of a fast sampler's log-probs, beside its fix.

``batch.sampler_top_logps`` [N, W, k] holds the sampler μ's k most probable tokens' log-probs
at each position (largest first), as a fast sampler returns them beside the sampled token's
(``batch.sampler_logps``). For ``eligibility check --sequence --off-policy``.
"""

from __future__ import annotations

import torch


def _loss(logps, batch, sampler_logps):
    m = batch.completion_mask > 0
    r = batch.rewards.view(-1, batch.group_size)
    G = batch.group_size
    a = ((G * r - r.sum(1, keepdim=True)) / (G - 1)).reshape(-1)
    lp = torch.where(m, logps, 0.0)
    log_s = torch.where(m, lp - batch.old_logps, 0.0).sum(1)
    log_w = torch.where(m, batch.old_logps - sampler_logps, 0.0).sum(1)
    return -(torch.exp(log_s + log_w).detach() * a * lp.sum(1)).mean()


def fixed(logps, batch):
    """Correct: the whole reply's π_θ/μ with μ's log-prob of each sampled token."""
    return _loss(logps, batch, batch.sampler_logps)


def top_logprob_as_sampler(logps, batch):
    """The sampler's most probable entry read as the sampled token's (top_logprobs[..., 0])."""
    return _loss(logps, batch, batch.sampler_top_logps[..., 0])


def ratio_floored(logps, batch):
    """A floor under a per-token ratio: each token × max(π_θ/π_old, 0.8), detached.

    Times the reply's sampler weight, where the reply's product ratio is owed.
    """
    m = batch.completion_mask > 0
    r = batch.rewards.view(-1, batch.group_size)
    G = batch.group_size
    a = ((G * r - r.sum(1, keepdim=True)) / (G - 1)).reshape(-1)
    lp = torch.where(m, logps, 0.0)
    ratio = torch.exp(torch.where(m, lp - batch.old_logps, 0.0)).clamp(min=0.8).detach()
    log_w = torch.where(m, batch.old_logps - batch.sampler_logps, 0.0).sum(1)
    per = (ratio * lp * m).sum(1)
    return -(torch.exp(log_w) * a * per).mean()
