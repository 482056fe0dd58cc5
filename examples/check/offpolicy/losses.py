"""Off-policy losses for ``eligibility check --sequence --off-policy``: one right, many not.

Each takes ``(logps, batch)``: ``logps`` the per-token ln π_θ at θ [N, W] (differentiable),
``batch.old_logps`` θ_old's, ``batch.sampler_logps`` the sampler μ's, ``batch.rewards``,
``batch.group_size``, ``batch.completion_mask``. Written from the definitions (ours):

    s = Πₜ π_θ(oₜ)/π_old(oₜ),   w = Πₜ π_old(oₜ)/μ(oₜ),   A = R − mean_{j≠i} R_j,
    loss = −(1/N) Σᵢ sg(wᵢ sᵢ) Aᵢ Σₜ ℓᵢ,ₜ,

whose expected gradient under sampling from μ is ∇J(θ) (``product``); each other function
changes one thing, and its docstring says what the check names.
"""

from __future__ import annotations

import torch


def _rloo(batch):
    r = batch.rewards.view(-1, batch.group_size)
    G = batch.group_size
    return ((G * r - r.sum(1, keepdim=True)) / (G - 1)).reshape(-1)


class _Parts:
    """m (real tokens), ℓ (0 on padding), ln rₜ = ℓ − ℓ_old and ln w = Σₜ (ℓ_old − ℓ_μ)."""

    def __init__(self, logps, batch):
        self.m = batch.completion_mask > 0
        self.lp = torch.where(self.m, logps, 0.0)
        self.log_r = torch.where(self.m, self.lp - batch.old_logps, 0.0)
        self.log_w = torch.where(self.m, batch.old_logps - batch.sampler_logps, 0.0).sum(1)


def product(logps, batch):
    """Unbiased: the sequence product weight π_θ/μ, detached, RLOO, summed over tokens."""
    x = _Parts(logps, batch)
    weight = torch.exp(x.log_r.sum(1) + x.log_w).detach()
    return -(weight * _rloo(batch) * x.lp.sum(1)).mean()


def product_ratio_form(logps, batch):
    """Unbiased too: −(1/N) Σ w s A with s = exp(Σ (ℓ − ℓ_old)) carrying the gradient."""
    x = _Parts(logps, batch)
    return -(torch.exp(x.log_w) * torch.exp(x.log_r.sum(1)) * _rloo(batch)).mean()


def per_token_ratio(logps, batch):
    """``per-token-ratio``: Σₜ rₜ A in place of s A Σₜ ∇ℓₜ."""
    x = _Parts(logps, batch)
    per_token = torch.where(x.m, torch.exp(x.log_r), 0.0).sum(1)
    return -(torch.exp(x.log_w) * _rloo(batch) * per_token).mean()


def stale_old_logps(logps, batch):
    """``stale-old-logps``: the ratio taken against logps itself (old log-probs recomputed at θ)."""
    x = _Parts(logps, batch)
    s = torch.exp((x.lp - x.lp.detach()).sum(1))
    return -(torch.exp(x.log_w) * s * _rloo(batch)).mean()


def uncorrected_sampler(logps, batch):
    """``uncorrected-sampler``: the product ratio π_θ/π_old, but no π_old/μ weight."""
    x = _Parts(logps, batch)
    return -(torch.exp(x.log_r.sum(1)) * _rloo(batch)).mean()


def truncated(logps, batch):
    """``truncation-bias``: the sampler weight truncated at C = 1.5 (TIS)."""
    x = _Parts(logps, batch)
    w = torch.exp(x.log_w).clamp(max=1.5)
    return -(w * torch.exp(x.log_r.sum(1)) * _rloo(batch)).mean()


def geometric_mean(logps, batch):
    """``geometric-mean``: the sequence weight s^{1/L} on every token."""
    x = _Parts(logps, batch)
    g = torch.exp(x.log_r.sum(1) / x.m.sum(1)).detach()
    return -(torch.exp(x.log_w) * g * _rloo(batch) * x.lp.sum(1)).mean()


def undetached(logps, batch):
    """``ratio-1-broken``: the product weight left attached to the graph."""
    x = _Parts(logps, batch)
    weight = torch.exp(x.log_r.sum(1) + x.log_w)
    return -(weight * _rloo(batch) * x.lp.sum(1)).mean()


def swapped(logps, batch):
    """``ratio-1-broken`` (``sign`` at ratio 1): the ratio written π_old/π_θ."""
    x = _Parts(logps, batch)
    return -(torch.exp(x.log_w) * torch.exp(-x.log_r.sum(1)) * _rloo(batch)).mean()


def cispo_trl_default(logps, batch):
    """``ratio-1-broken`` (``scaled``, c = 0.2, at ratio 1): TRL's absolute CISPO cap.

    ``epsilon_high`` unset caps at 0.2; per token, weighted by the sequence sampler weight.
    """
    x = _Parts(logps, batch)
    cap = torch.exp(x.log_r).clamp(max=0.2).detach()
    per = torch.where(x.m, cap * x.lp, 0.0).sum(1)
    return -(torch.exp(x.log_w) * _rloo(batch) * per).mean()


def ppo_clip(logps, batch):
    """``per-token-ratio, clipping-bias``: PPO's −min(rA, clip(r, 0.8, 1.2) A) per token."""
    x = _Parts(logps, batch)
    r = torch.exp(x.log_r)
    a = _rloo(batch)[:, None]
    per = -torch.minimum(r * a, r.clamp(0.8, 1.2) * a)
    return (torch.exp(x.log_w)[:, None] * torch.where(x.m, per, 0.0)).sum(1).mean()


def cispo_relative(logps, batch):
    """``per-token-ratio, cispo-relative-cap``: CISPO as its paper and verl write it.

    −sg(clip(rₜ, 1 − ε, 1 + ε)) A ℓₜ per token, ε = 0.2, weighted by the sequence sampler
    weight: no token loses its gradient, but a capped token's weight is not its ratio.
    """
    x = _Parts(logps, batch)
    cap = torch.exp(x.log_r).clamp(0.8, 1.2).detach()
    per = torch.where(x.m, cap * x.lp, 0.0).sum(1)
    return -(torch.exp(x.log_w) * _rloo(batch) * per).mean()


def truncated_half(logps, batch):
    """``truncation-bias``: the sequence sampler weight truncated at C = 0.5 (below 1)."""
    x = _Parts(logps, batch)
    w = torch.exp(x.log_w).clamp(max=0.5)
    return -(w * torch.exp(x.log_r.sum(1)) * _rloo(batch)).mean()


def truncated_whole_half(logps, batch):
    """``truncation-bias``: the whole weight π_θ/μ truncated at C = 0.5, times the score.

    One sequence-level weight, detached, as TRL's ``sequence_truncate`` reads at ratio 1.
    """
    x = _Parts(logps, batch)
    w = torch.exp(x.log_r.sum(1) + x.log_w).clamp(max=0.5).detach()
    return -(w * _rloo(batch) * x.lp.sum(1)).mean()


def truncated_without_ratio(logps, batch):
    """``stale-old-logps, truncation-bias``: π_old/μ truncated at C = 0.5, times the score.

    The ratio π_θ/π_old left out (TRL's ``sequence_truncate`` on its first step, used away
    from θ_old).
    """
    x = _Parts(logps, batch)
    w = torch.exp(x.log_w).clamp(max=0.5).detach()
    return -(w * _rloo(batch) * x.lp.sum(1)).mean()


def masked_whole(logps, batch):
    """``masking-bias``: the whole weight π_θ/μ, detached, masked above C = 1.5."""
    x = _Parts(logps, batch)
    s = torch.exp(x.log_r.sum(1) + x.log_w).detach()
    return -(s * (s <= 1.5) * _rloo(batch) * x.lp.sum(1)).mean()
