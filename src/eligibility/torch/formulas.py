r"""The pure functions of the sequence family's options: the formulas, once.

Each is a row's function in :mod:`eligibility.torch.options` (the table that names it, says
where the frameworks use it and what ``eligibility check`` finds), and each docstring leads
with its formula. Notation: G completions per prompt, group-major; N sequences; Rᵢ the
reward, Aᵢ the advantage; ℓᵢ,ₜ = ln π_θ(oᵢ,ₜ | q, oᵢ,<ₜ); mᵢ,ₜ ∈ {0, 1} the completion mask,
Lᵢ = Σₜ mᵢ,ₜ; W the padded width, T_max the generation limit; ℓ^ref the reference policy's
log-probs, ρ = π_ref/π_θ = exp(ℓ^ref − ℓ). Every function takes any leading batch dimensions
(the check evaluates many batches at once): rewards [..., N], masks [..., N, T].
"""

from __future__ import annotations

from typing import Any

import torch

# ----------------------------------------------------------------------------------------------
# Baselines: Aᵢ = Rᵢ − bᵢ within each group of G (rewards [..., N])
# ----------------------------------------------------------------------------------------------


def _grouped(r: torch.Tensor, G: int) -> torch.Tensor:
    return r.reshape(*r.shape[:-1], -1, G)


def baseline_none(r: torch.Tensor, G: int) -> torch.Tensor:
    r"""Aᵢ = Rᵢ (bᵢ = 0): plain REINFORCE, unbiased, with the variance of the raw rewards."""
    return r


def baseline_rloo(r: torch.Tensor, G: int) -> torch.Tensor:
    r"""Aᵢ = Rᵢ − (1/(G−1)) Σ_{j≠i} Rⱼ = (G Rᵢ − Σⱼ Rⱼ)/(G − 1): the leave-one-out baseline.

    b₋ᵢ does not depend on oᵢ, so E[ĝ] = ∇J (Kool et al. 2019; Ahmadian et al. 2024). A group
    of one has no others: b = 0, A = R.
    """
    if G < 2:
        return r
    g = _grouped(r, G)
    return ((G * g - g.sum(-1, keepdim=True)) / (G - 1)).reshape(r.shape)


def baseline_group_mean(r: torch.Tensor, G: int) -> torch.Tensor:
    r"""Aᵢ = Rᵢ − (1/G) Σⱼ Rⱼ = (G − 1)/G · (Rᵢ − b₋ᵢ): a mean that includes Rᵢ itself.

    E[ĝ] = (G − 1)/G · ∇J of the reward (GRPO, Shao et al. 2024): a step size. A group of one
    gets A = 0.
    """
    g = _grouped(r, G)
    return (g - g.mean(-1, keepdim=True)).reshape(r.shape)


# ----------------------------------------------------------------------------------------------
# Scales: A ← A / s (advantages and rewards [..., N])
# ----------------------------------------------------------------------------------------------


def _sample_std(x: torch.Tensor, dim: int) -> torch.Tensor:
    """σ̂ over ``dim`` with Bessel's correction (torch.std), and σ̂ := 1 for a single value."""
    if x.shape[dim] < 2:
        return torch.ones_like(x.select(dim, 0)).unsqueeze(dim)
    return x.std(dim=dim, keepdim=True)


def scale_none(a: torch.Tensor, r: torch.Tensor, G: int, eps: float = 1e-4) -> torch.Tensor:
    """Â = A (s = 1)."""
    return a


def scale_group_std(a: torch.Tensor, r: torch.Tensor, G: int, eps: float = 1e-4) -> torch.Tensor:
    r"""Âᵢ = Aᵢ / (σ̂_q + ε), σ̂_q the sample std (Bessel) of the rewards of i's group.

    σ̂_q depends on Rᵢ itself: each prompt is reweighted by 1/σ̂_q, a bias (hard and easy
    prompts, whose σ̂ is small, are upweighted). A group of one has σ̂ := 1 (verl's rule).
    """
    s = _sample_std(_grouped(r, G), -1) + eps
    return (_grouped(a, G) / s).reshape(a.shape)


def scale_batch_std(a: torch.Tensor, r: torch.Tensor, G: int, eps: float = 1e-4) -> torch.Tensor:
    r"""Â = A / (σ̂ + ε), σ̂ the sample std (Bessel) of all N rewards of the batch.

    One number per batch, nearly a step size; its dependence on the batch is a bias that
    vanishes as the batch grows.
    """
    return a / (_sample_std(r, -1) + eps)


def whiten(
    a: torch.Tensor,
    mask: torch.Tensor | None,
    dims: tuple[int, ...],
    eps: float = 1e-8,
    unbiased: bool = False,
) -> torch.Tensor:
    r"""Â = (A − μ)/√(σ² + ε), μ and σ² the mean and variance of A's real entries over ``dims``.

    σ² with n − 1 in the denominator if ``unbiased`` (verl's ``masked_whiten``), n otherwise
    (OpenRLHF). A single real entry, or zero variance, gives Â = 0; padding entries are 0.
    """
    m = torch.ones_like(a, dtype=torch.bool) if mask is None else mask
    mf = m.to(a.dtype)
    n = mf.sum(dims, keepdim=True)
    mu = (a * mf).sum(dims, keepdim=True) / n.clamp_min(1)
    dev = torch.where(m, a - mu, torch.zeros((), dtype=a.dtype, device=a.device))
    var = (dev * dev).sum(dims, keepdim=True) / ((n - 1) if unbiased else n).clamp_min(1)
    return dev * torch.rsqrt(var + eps)


def scale_whiten(a: torch.Tensor, r: torch.Tensor, G: int, eps: float = 1e-8) -> torch.Tensor:
    r"""Â = (A − μ)/√(σ̂² + ε) over the N advantages of the batch, σ̂² with Bessel's correction.

    REINFORCE++'s whitening as TRL's RLOO (``normalize_advantages``, σ̂ + 10⁻⁴) and verl
    (``masked_whiten``) compute it. Subtracting μ is a baseline shared by the batch that depends
    on oᵢ through its 1/N share, and 1/σ̂ one number per batch: a bias of order 1/N.
    """
    return whiten(a, None, (-1,), eps, unbiased=True)


# ----------------------------------------------------------------------------------------------
# Aggregations: loss = Σᵢ,ₜ wᵢ,ₜ lᵢ,ₜ, weights w = ∂loss/∂l (mask m [..., N, T] as floats)
# ----------------------------------------------------------------------------------------------


def _rows(m: torch.Tensor) -> int:
    return m.shape[-2]


def _count(m: torch.Tensor) -> torch.Tensor:
    return m.sum((-2, -1), keepdim=True)


def weights_sequence_sum(m: torch.Tensor, width: Any, t_max: Any, normaliser: Any):
    r"""wᵢ,ₜ = mᵢ,ₜ / N: (1/N) Σᵢ Σₜ mᵢ,ₜ lᵢ,ₜ, each sequence's sum, then the mean: unbiased."""
    return m / _rows(m)


def weights_constant(m: torch.Tensor, width: Any, t_max: Any, normaliser: Any):
    r"""wᵢ,ₜ = mᵢ,ₜ / (N T_max): a constant divisor (Dr. GRPO): a step size c = 1/T_max."""
    return m / (_rows(m) * t_max)


def weights_constant_sum(m: torch.Tensor, width: Any, t_max: Any, normaliser: Any):
    r"""wᵢ,ₜ = mᵢ,ₜ / T_max: Σ m l / T_max, not divided by N: a step size c = N/T_max."""
    return m / t_max


def weights_sequence_mean(m: torch.Tensor, width: Any, t_max: Any, normaliser: Any):
    r"""wᵢ,ₜ = mᵢ,ₜ / (N Lᵢ), Lᵢ = max(Σₜ mᵢ,ₜ, 1): the mean of per-sequence token means.

    E[ĝ] is the gradient of the reshaped reward (R − b)/L: long wrong answers are penalised
    less per token, so they grow (Liu et al. 2025, Dr. GRPO). An empty completion gives 0.
    """
    return m / (_rows(m) * m.sum(-1, keepdim=True).clamp_min(1))


def weights_token_mean(m: torch.Tensor, width: Any, t_max: Any, normaliser: Any):
    r"""wᵢ,ₜ = mᵢ,ₜ / M, M = ``normaliser`` or, when None, Σᵢ,ₜ mᵢ,ₜ (the batch's tokens).

    M counted per batch is a random factor correlated with the lengths: a bias; a fixed M
    (the token count of the whole step, or a constant) is a step size.
    """
    return m / (_count(m).clamp_min(1) if normaliser is None else normaliser)


def weights_micro_batch_token_mean(m: torch.Tensor, width: Any, t_max: Any, normaliser: Any):
    r"""wᵢ,ₜ = mᵢ,ₜ / (2 M_h): a token mean over each half h of the batch, the two averaged.

    Gradient accumulation over two micro-batches, each its own token mean (M_h its tokens):
    two random factors correlated with the lengths, a bias. N must be even.
    """
    halves = m.reshape(*m.shape[:-2], 2, -1, m.shape[-1])
    return (halves / (2 * _count(halves).clamp_min(1))).reshape(m.shape)


def weights_token_sum_norm(m: torch.Tensor, width: Any, t_max: Any, normaliser: Any):
    r"""wᵢ,ₜ = mᵢ,ₜ / F, F = ``normaliser`` or, when None, W (the batch's padded width).

    Not divided by N. W is the longest completion of the batch, a random factor correlated
    with the lengths: a bias; a fixed F (e.g. T_max) is a step size, c = N/F.
    """
    return m / (width if normaliser is None else normaliser)


def weights_padded_width(m: torch.Tensor, width: Any, t_max: Any, normaliser: Any):
    r"""wᵢ,ₜ = mᵢ,ₜ / (N W): each sequence's sum over the batch's padded width W, the mean.

    W is the longest completion of the batch: a random factor correlated with the lengths.
    """
    return m / (_rows(m) * width)


# ----------------------------------------------------------------------------------------------
# KL to the reference policy: where β KL enters (d = ℓ − ℓ^ref per token)
# ----------------------------------------------------------------------------------------------


def kl_sequence(logps: torch.Tensor, ref_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""Dᵢ = Σₜ mᵢ,ₜ (ℓᵢ,ₜ − ℓ^ref_ᵢ,ₜ): the sequence's k1, put in the reward, R̃ = R − β D.

    E[D ∇ln π(o)] = ∇KL over whole sequences, so the shaped reward with any baseline from the
    others' R̃ is unbiased. Returned detached, per sequence [..., N].
    """
    return torch.where(mask, (logps - ref_logps).detach(), 0.0).sum(-1)


def kl_reward_to_go(
    logps: torch.Tensor, ref_logps: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    r"""Kᵢ,ₜ = Σ_{t′≥t} mᵢ,ₜ′ (ℓᵢ,ₜ′ − ℓ^ref_ᵢ,ₜ′): the sequence KL still ahead of token t.

    Since ∇KL(π_θ(·|q)‖π_ref(·|q)) = E[Σₜ ∇ℓₜ Σ_{t′≥t} (ℓₜ′ − ℓ^ref_ₜ′)] (the terms t′ < t
    have zero expectation), Â = A − β K per token (detached) is the exact gradient of −β KL
    over whole sequences: unbiased. Returned detached, 0 on padding.
    """
    d = torch.where(mask, (logps - ref_logps).detach(), 0.0)
    return d.flip(-1).cumsum(-1).flip(-1)


def kl_k1(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    r"""k1 = ℓ − ℓ^ref in the loss: ∇(β k1) = β ∇ℓ, whose expectation is 0: no KL gradient."""
    return logps - ref_logps


def kl_k2(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    r"""k2 = ½ (ℓ − ℓ^ref)² in the loss: ∇ = (ℓ − ℓ^ref) ∇ℓ, blind to the later tokens' KL."""
    d = logps - ref_logps
    return 0.5 * d * d


def kl_k3(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    r"""k3 = ρ − 1 − ln ρ in the loss: ∇ = (1 − ρ) ∇ℓ, in expectation ∇KL(π_ref‖π_θ) (forward)."""
    log_rho = ref_logps - logps
    return torch.expm1(log_rho) - log_rho


def kl_k3_clamped(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    r"""clamp(k3, −10, 10) in the loss: k3's forward-KL gradient, and none where k3 > 10."""
    return torch.clamp(kl_k3(logps, ref_logps), -10.0, 10.0)


def kl_k3_ratio(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    r"""k3 · r, r = exp(ℓ − sg ℓ) = 1: ∇ = (1 − ρ + k3) ∇ℓ = (ℓ − ℓ^ref) ∇ℓ, token-local.

    The ratio's value is 1 on-policy but its gradient is not 0: k3's gradient becomes k2's,
    each token's own reverse-KL score, blind to the later tokens' KL.
    """
    return kl_k3(logps, ref_logps) * torch.exp(logps - logps.detach())


# ==============================================================================================
# Off-policy: the ratio π_θ/π_old, the surrogate of the loss, the sampler weight π_old/μ
# (torch.offpolicy composes them; ℓ^old, ℓ^μ are π_old's and μ's per-token log-probs)
# ==============================================================================================

# ----------------------------------------------------------------------------------------------
# Importance ratios, per token in stop-gradient form: value ρₜ, ∂ρₜ/∂ℓₜ = ρₜ
# ----------------------------------------------------------------------------------------------


def log_ratio_token(logps: torch.Tensor, old_logps: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """ln rₜ = ℓₜ − ℓ^oldₜ on real tokens, 0 on padding (``m`` a bool mask); differentiable."""
    return torch.where(m, logps - torch.where(m, old_logps, logps.detach()), 0.0)


def ratio_token(logps: torch.Tensor, old_logps: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    r"""rₜ = π_θ(oₜ|·)/π_old(oₜ|·) = exp(ℓₜ − ℓ^oldₜ), 1 on padding.

    The per-token ratio of PPO and of TRL/verl/OpenRLHF by default. Its surrogate's gradient on
    token t is rₜ A ∇ℓₜ where the unbiased weight is s A ∇ℓₜ = (Π_{u<t} rᵤ) rₜ (Π_{u>t} rᵤ) A ∇ℓₜ:
    it drops the prefix's ratio (the state oₜ is reached from was drawn by π_old) and the
    suffix's (A was earned by π_old's continuation). Exact at ratio 1 and to first order in
    θ − θ_old; away from it, the expected gradient is that of a local surrogate, not ∇J.
    """
    return torch.exp(log_ratio_token(logps, old_logps, m))


def _sequence_form(log_rho: torch.Tensor, logps: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """ρₜ = sg(ρ) · exp(ℓₜ − sg ℓₜ) on real tokens (value ρ, ∂ρₜ/∂ℓₜ = ρ), 1 on padding."""
    lp = torch.where(m, logps, 0.0)
    return torch.where(m, torch.exp(log_rho.detach() + (lp - lp.detach())), 1.0)


def ratio_sequence(logps: torch.Tensor, old_logps: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    r"""s = Πₜ rₜ = π_θ(o|q)/π_old(o|q) on every token of the sequence, stop-gradient form.

    The importance weight of the whole completion: E_{o∼π_old}[s A ∇ln π_θ(o)] = ∇J(θ) for any
    baseline independent of o, so ``"sequence"`` with the ``"ratio"`` surrogate and
    ``aggregation="sequence-sum"`` is unbiased (the default). Its variance grows with the
    length (ln s is a sum over tokens); truncating or clipping it trades that for bias.
    """
    log_s = log_ratio_token(logps, old_logps, m).sum(-1, keepdim=True)
    return _sequence_form(log_s, logps, m)


def ratio_geometric_mean(
    logps: torch.Tensor, old_logps: torch.Tensor, m: torch.Tensor
) -> torch.Tensor:
    r"""ŝ = s^{1/L} = exp((1/L) Σₜ ln rₜ), the geometric mean of the token ratios (GSPO).

    TRL ``importance_sampling_level="sequence"``; verl ``gspo``. Length-fair, but not an
    importance weight: E_{π_old}[ŝ A ∇ln π_θ] ≠ ∇J away from ratio 1 (ŝ ≠ π_θ(o)/π_old(o)).
    GSPO proper is this ratio with ``"ppo-clip"`` and ``aggregation="sequence-mean"``: in TRL
    the per-sequence loss −ŝA has gradient −ŝ A (1/L) Σₜ ∇ℓₜ, the 1/L of the aggregation, so at
    ratio 1 GSPO is the length-normalised gradient, not REINFORCE.
    """
    log_r = log_ratio_token(logps, old_logps, m)
    length = m.sum(-1, keepdim=True).clamp_min(1)
    return _sequence_form(log_r.sum(-1, keepdim=True) / length, logps, m)


# ----------------------------------------------------------------------------------------------
# Surrogates: per-token losses f(ρ, A) (minimised), gradient ∂f/∂ρ · ρ ∇ℓ
# ----------------------------------------------------------------------------------------------


def surrogate_ratio(rho: torch.Tensor, adv: torch.Tensor, logps: torch.Tensor) -> torch.Tensor:
    r"""f = −ρ A: the importance-weighted policy term, gradient −ρ A ∇ℓ (nothing clipped)."""
    return -rho * adv


def surrogate_ppo_clip(
    rho: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float
) -> torch.Tensor:
    r"""f = −min(ρ A, clip(ρ, 1 − ε_low, 1 + ε_high) A) (PPO; ε_high > ε_low is DAPO's clip-higher).

    Gradient −ρ A ∇ℓ where the unclipped term is the smaller, else 0: a token with A > 0 and
    ρ > 1 + ε_high, or A < 0 and ρ < 1 − ε_low, contributes nothing (clipping bias, a
    trust region). At ρ = 1 (ε_low, ε_high > 0) nothing is clipped and f is REINFORCE. TRL
    ``epsilon`` (ε_low, 0.2) and ``epsilon_high`` (defaults to ``epsilon``); verl
    ``clip_ratio_low``/``clip_ratio_high``; OpenRLHF ``clip_eps_low``/``clip_eps_high``.
    """
    return -torch.minimum(rho * adv, rho.clamp(1.0 - eps_low, 1.0 + eps_high) * adv)


def surrogate_dual_clip(
    rho: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float, c: float
) -> torch.Tensor:
    r"""f = min(PPO-clip, −c A) where A < 0, PPO-clip where A ≥ 0 (dual-clip, c > 1).

    Bounds the loss of a negative-advantage token whose ratio exploded: where ρ > c the
    gradient is 0. At ρ = 1 < c it is PPO-clip, hence REINFORCE; with c ≤ 1 the ratio-1
    invariant breaks (every A < 0 token is cut). verl ``clip_ratio_c`` (default 3.0); OpenRLHF
    ``dual_clip``.
    """
    ppo = surrogate_ppo_clip(rho, adv, eps_low, eps_high)
    return torch.where(adv < 0, torch.minimum(ppo, -c * adv), ppo)


def cispo_weight_absolute(rho: torch.Tensor, eps_high: float) -> torch.Tensor:
    r"""ŵ = min(ρ, ε_high): TRL's CISPO cap (``clamp(coef_1, max=epsilon_high)``), detached.

    An *absolute* cap: ε_high is a ratio, not a distance from 1. At ρ = 1 the weight is
    min(1, ε_high): with ``epsilon_high`` unset TRL uses ``epsilon`` = 0.2, so every on-policy
    gradient is 0.2 × REINFORCE (``scaled``; the ratio-1 invariant broken). The paper's ε_max
    (TRL suggests 5.0) keeps it ≥ 1.
    """
    return rho.clamp(max=eps_high).detach()


def cispo_weight_relative(rho: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    r"""ŵ = clip(ρ, 1 − ε_low, 1 + ε_high), detached: verl's CISPO (a *relative* clip).

    At ρ = 1 the weight is 1 (REINFORCE). Unlike PPO-clip a clipped token keeps its gradient,
    with the clipped weight.
    """
    return rho.clamp(1.0 - eps_low, 1.0 + eps_high).detach()


def surrogate_cispo(weight: torch.Tensor, adv: torch.Tensor, logps: torch.Tensor) -> torch.Tensor:
    r"""f = −sg(ŵ) A ℓ (CISPO): REINFORCE with a detached, capped importance weight.

    Gradient −ŵ A ∇ℓ on every token (none is dropped, as PPO-clip drops them); biased wherever
    the cap binds. ŵ from :func:`cispo_weight_absolute` or :func:`cispo_weight_relative`.
    """
    return -weight * adv * logps


# ----------------------------------------------------------------------------------------------
# Sampler corrections: w = π_old/μ, truncated (TIS) or masked (MIS), detached
# ----------------------------------------------------------------------------------------------


def sampler_log_weight(
    old_logps: torch.Tensor, sampler_logps: torch.Tensor, m: torch.Tensor, level: str
) -> torch.Tensor:
    r"""ln w: per token ℓ^oldₜ − ℓ^μₜ (N, T), or per sequence Σₜ (ℓ^old − ℓ^μ) (N, 1).

    ``level`` is ``"token"`` or ``"sequence"`` (TRL's ``token_*`` / ``sequence_*`` modes). Only
    the sequence product makes E_μ[w g] = E_{π_old}[g]; a per-token w drops the other tokens'
    factors as the token ratio does. 0 on padding.
    """
    d = torch.where(m, old_logps - torch.where(m, sampler_logps, old_logps), 0.0).detach()
    return d.sum(-1, keepdim=True) if level == "sequence" else d


def truncate_weight(w: torch.Tensor, cap: float, cap_min: float | None = None) -> torch.Tensor:
    r"""TIS: w̃ = clamp(w, C_min, C) (truncated importance sampling).

    Bias −E_μ[(w − C)₊ g] (and the C_min side): small where w rarely exceeds C, growing with
    the length at the sequence level (ln w is a sum). With C ≥ 1 ≥ C_min, w = 1 is untouched
    (the ratio-1 invariant); C < 1 scales every on-policy gradient by C.
    """
    return w.clamp(min=cap_min, max=cap)


def mask_weight(w: torch.Tensor, cap: float, cap_min: float | None = None) -> torch.Tensor:
    r"""MIS: w̃ = w · 1{C_min ≤ w ≤ C} (masked importance sampling; TRL's default ``sequence_mask``).

    Bias −E_μ[1{w > C} w g]: a masked completion is dropped whole. With C ≥ 1 ≥ C_min the
    on-policy gradient is untouched; C < 1 drops every completion.
    """
    lo = -float("inf") if cap_min is None else cap_min
    return torch.where((w >= lo) & (w <= cap), w, torch.zeros_like(w))
