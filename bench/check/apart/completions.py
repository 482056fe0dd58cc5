"""Mistakes in completion losses, written apart from the audit (each function one)."""

import torch


def _loo(r, g):
    r = r.view(-1, g)
    return (r - (r.sum(1, keepdim=True) - r) / (g - 1)).reshape(-1)


def _sum(logps, batch):
    return logps * batch.completion_mask


def signed_square(logps, batch):
    a = _loo(batch.rewards, batch.group_size)
    return -((a * a.abs())[:, None] * _sum(logps, batch)).sum() / a.numel()


def plus_one_norm(logps, batch):
    a = _loo(batch.rewards, batch.group_size)
    L = batch.completion_mask.sum(1)
    return -(a * _sum(logps, batch).sum(1) / (L + 1)).mean()


def last_three(logps, batch):
    a = _loo(batch.rewards, batch.group_size)
    m = batch.completion_mask
    L = m.sum(1, keepdim=True)
    t = torch.arange(m.shape[1])[None, :]
    keep = (t >= L - 3).float() * m
    return -(a[:, None] * logps * keep).sum() / a.numel()


def discount_from_end(logps, batch):
    a = _loo(batch.rewards, batch.group_size)
    m = batch.completion_mask
    L = m.sum(1, keepdim=True)
    t = torch.arange(m.shape[1])[None, :]
    w = 0.9 ** (L - 1 - t).clamp(min=0)
    return -(a[:, None] * logps * m * w).sum() / a.numel()


def clip_after_whiten(logps, batch):
    a = _loo(batch.rewards, batch.group_size)
    a = ((a - a.mean()) / (a.std() + 1e-6)).clamp(-0.5, 0.5)
    return -(a[:, None] * _sum(logps, batch)).sum() / a.numel()


def other_groups_baseline(logps, batch):
    g = batch.group_size
    r = batch.rewards.view(-1, g)
    n = r.shape[0]
    tot = r.sum()
    b = (tot - r.sum(1, keepdim=True)) / ((n - 1) * g)
    a = (r - b).reshape(-1)
    return -(a[:, None] * _sum(logps, batch)).sum() / a.numel()


def max_abs_norm(logps, batch):
    r = batch.rewards / (batch.rewards.abs().max() + 1e-6)
    a = _loo(r, batch.group_size)
    return -(a[:, None] * _sum(logps, batch)).sum() / a.numel()


def first_token_if_positive(logps, batch):
    a = _loo(batch.rewards, batch.group_size)
    m = batch.completion_mask.clone()
    pos = a > 0
    m[pos, 1:] = 0
    return -(a[:, None] * logps * m).sum() / a.numel()


def own_probability(logps, batch):
    a = _loo(batch.rewards, batch.group_size)
    w = 1 - logps.detach().exp()
    return -(a[:, None] * logps * batch.completion_mask * w).sum() / a.numel()


def dropout_unrestored(logps, batch):
    a = _loo(batch.rewards, batch.group_size)
    keep = (torch.rand_like(logps) < 0.5).float()
    return -(a[:, None] * logps * batch.completion_mask * keep).sum() / a.numel()
