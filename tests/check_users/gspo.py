"""Off the policy (``--off-policy``): GSPO and a sequence-level truncated importance weight.

``gspo``: GSPO (Zheng et al. 2025) as TRL writes it with ``importance_sampling_level=
"sequence"``: the sequence's geometric-mean ratio s^{1/L}, clipped at the paper's ε (3·10⁻⁴,
4·10⁻⁴), the group's std, each completion's mean; the sampler's weight π_old/μ applied.
``tis``: the sequence product ratio, the sampler weight truncated at C = 0.5.
``fixed``: the check's fixes applied to either: the product ratio, no clip, the untruncated
weight, RLOO summed over each completion.
"""

from __future__ import annotations

import torch


def _sampler_weight(batch):
    m = batch.completion_mask
    return ((batch.old_logps - batch.sampler_logps) * m).sum(1).exp()


def _rloo(batch):
    r = batch.rewards.view(-1, batch.group_size)
    G = batch.group_size
    return ((G * r - r.sum(dim=1, keepdim=True)) / (G - 1)).reshape(-1)


def gspo(logps, batch):
    m = batch.completion_mask
    L = m.sum(1).clamp(min=1.0)
    s = torch.exp(((logps - batch.old_logps) * m).sum(1) / L)
    r = batch.rewards.view(-1, batch.group_size)
    a = ((r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True) + 1e-4)).reshape(-1)
    per_sequence = -torch.min(s * a, s.clamp(1 - 3e-4, 1 + 4e-4) * a)
    return (_sampler_weight(batch) * per_sequence).mean()


def tis(logps, batch):
    m = batch.completion_mask
    s = torch.exp(((logps - batch.old_logps) * m).sum(1))
    w = _sampler_weight(batch).clamp(max=0.5)
    return -(w * s * _rloo(batch)).mean()


def fixed(logps, batch):
    m = batch.completion_mask
    s = torch.exp(((logps - batch.old_logps) * m).sum(1))
    return -(_sampler_weight(batch) * s * _rloo(batch)).mean()
