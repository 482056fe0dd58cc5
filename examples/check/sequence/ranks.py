"""Losses run on several ranks, checked with ``--world-size R``: DDP averages their gradients.

Ours. Each rank holds a share of the batch (whole groups) and computes its loss on it; DDP's
all-reduce averages the R gradients. A per-rank mean over its N/R completions, averaged, is the
batch's mean (unbiased). A per-rank token mean, averaged, divides each rank's tokens by that
rank's own count: a normaliser that depends on which completions landed on the rank
(``batch-dependent-normaliser``; TRL divides by the whole batch's count over the number of
processes instead):

    ĝ = (1/R) Σ_r Σ_{i∈r} Aᵢ Σₜ mᵢₜ ∇ℓᵢₜ / Σ_{i∈r} Σₜ mᵢₜ.
"""

from __future__ import annotations


def _rloo(batch):
    r = batch.rewards.view(-1, batch.group_size)
    return (r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1)


def rank_mean(logps, batch):
    """RLOO, the mean over the rank's own completions: averaged by DDP, the batch's mean."""
    m = batch.completion_mask
    shaped = batch.rewards - batch.beta * ((batch.old_logps - batch.ref_logps) * m).sum(1)
    r = shaped.view(-1, batch.group_size)
    a = (r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1)
    return -(a * (logps * m).sum(1)).mean()


def rank_token_mean(logps, batch):
    """A token mean over the rank's own tokens (DAPO's, per rank): a rank-local normaliser."""
    m = batch.completion_mask
    return -(_rloo(batch)[:, None] * logps * m).sum() / m.sum()
