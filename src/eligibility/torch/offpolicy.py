r"""Off-policy sequence REINFORCE: importance ratios, clipped surrogates and sampler corrections.

Completions o are drawn from a sampler μ (the rollout engine: another numerics, temperature or
top-k), the trainer's policy at generation time is π_old, and the loss is evaluated at π_θ, some
optimiser steps after π_old. Per real token (mᵢ,ₜ = 1) of completion i:

    ℓₜ = ln π_θ(oₜ | q, o<ₜ),   ℓ^oldₜ, ℓ^μₜ the same under π_old and μ,
    rₜ = exp(ℓₜ − ℓ^oldₜ)                  (the token ratio),
    s  = Πₜ rₜ = π_θ(o|q) / π_old(o|q)     (the sequence ratio: the product),
    w  = π_old(o|q) / μ(o|q)              (the sampler weight).

**The unbiased weight is the product.** For any A = R − b with b independent of o,

    E_{o∼μ}[w s A ∇ln π_θ(o|q)] = Σₒ μ(o) (π_θ(o)/μ(o)) A ∇ln π_θ(o) = ∇J(θ)

wherever μ(o) > 0 whenever π_θ(o) > 0 (a top-k sampler breaks this: no weight restores the
completions it never draws). Every other choice below changes E[ĝ], and its docstring says to
what. At ratio 1 (θ = θ_old and μ = π_old) every surrogate here except CISPO's absolute cap below
1 gives the on-policy REINFORCE gradient of its aggregation.

**The ratios are per token, in stop-gradient form.** :data:`RATIOS` returns an (N, T) tensor ρ
whose value on token t is the ratio the option uses and whose gradient is ∂ρₜ/∂ℓₜ = ρₜ (no
gradient across tokens): the token ratio rₜ itself, or a sequence ratio written
ρₜ = sg(s) · exp(ℓₜ − sg(ℓₜ)) (verl writes GSPO so). A surrogate f(ρₜ, A) then has per-token
gradient ∂f/∂ρ · ρₜ ∇ℓₜ, and any aggregation of :mod:`eligibility.torch.sequence` applies on top
unchanged: with ``aggregation="sequence-sum"`` the product ratio's gradient is
(1/N) Σᵢ sᵢ Aᵢ Σₜ ∇ℓᵢ,ₜ, the unbiased estimator above.

Framework options (read from the sources: TRL 1.16 ``GRPOTrainer._compute_loss`` and
``GRPOConfig``; verl ``core_algos.compute_policy_loss_*`` and OpenRLHF ``PolicyLoss``, read
through public source search, their option names given as found there):

=========================== ========================================================
option here                  framework option
=========================== ========================================================
ratio ``"token"``            TRL ``importance_sampling_level="token"`` (default); verl
                             ``vanilla``; OpenRLHF ``PolicyLoss``
ratio ``"geometric-mean"``   TRL ``importance_sampling_level="sequence"``; verl ``gspo``
ratio ``"sequence"``         none of them (the unbiased product; our default)
surrogate ``"ppo-clip"``      TRL ``epsilon``/``epsilon_high`` (loss_type grpo, dapo, …);
                             verl ``clip_ratio_low``/``clip_ratio_high``; OpenRLHF
                             ``clip_eps_low``/``clip_eps_high``
surrogate ``"dual-clip"``     verl ``clip_ratio_c`` (3.0); OpenRLHF ``dual_clip``
surrogate ``"cispo"``         TRL ``loss_type="cispo"`` (absolute cap); verl ``cispo``
                             (relative clip)
correction ``"tis"``/``"mis"`` TRL ``vllm_importance_sampling_mode`` ``*_truncate`` /
                             ``*_mask`` (on by default with vLLM: ``sequence_mask``,
                             C = ``vllm_importance_sampling_clip_max`` = 3); verl
                             rollout-correction weights; OpenRLHF vLLM IS correction
=========================== ========================================================
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from eligibility.torch import _common, options
from eligibility.torch.advantages import _check_mask

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


RATIOS: dict[str, Callable[..., torch.Tensor]] = {
    "sequence": ratio_sequence,
    "token": ratio_token,
    "geometric-mean": ratio_geometric_mean,
}
"""The ratio levels by name: ρ(logps, old_logps, m) → (N, T), stop-gradient form."""

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


CORRECTIONS: dict[str, Callable[..., torch.Tensor]] = {
    "tis": truncate_weight,
    "mis": mask_weight,
}
"""The sampler corrections by name: w̃(w, cap, cap_min)."""

SURROGATES = ("ratio", "ppo-clip", "dual-clip", "cispo")
"""The surrogates of :func:`off_policy_loss` (``"ratio"``: −ρ A, the default)."""

CISPO_CAPS = ("relative", "absolute")
"""CISPO's cap semantics: verl's relative clip, TRL's absolute cap."""

# ----------------------------------------------------------------------------------------------
# The loss
# ----------------------------------------------------------------------------------------------


def _check_options(
    ratio: str,
    surrogate: str,
    eps_low: float,
    eps_high: float,
    dual_clip: float,
    cispo_cap: str,
    correction: str | None,
    correction_level: str,
    cap: float,
    cap_min: float | None,
) -> None:
    names = (
        ("ratio", ratio, tuple(RATIOS)),
        ("surrogate", surrogate, SURROGATES),
        ("cispo_cap", cispo_cap, CISPO_CAPS),
        ("correction", correction, (None, *CORRECTIONS)),
        ("correction_level", correction_level, ("token", "sequence")),
    )
    for name, value, allowed in names:
        if value not in allowed:
            raise ValueError(f"{name} must be one of {allowed}; got {value!r}")
    for name, x in (("eps_low", eps_low), ("eps_high", eps_high), ("cap", cap)):
        if isinstance(x, torch.Tensor) or not (float(x) > 0 and float(x) != float("inf")):
            raise ValueError(f"{name} must be a positive finite python float; got {x!r}")
    if surrogate != "cispo" and eps_low >= 1:
        raise ValueError(f"eps_low must be < 1 (the clip band is [1 − eps_low, …]); got {eps_low}")
    if surrogate == "dual-clip" and not dual_clip > 1:
        raise ValueError(f"dual_clip c must be > 1 (c ≤ 1 cuts every A < 0 token); got {dual_clip}")
    if cap_min is not None and not 0 <= cap_min < cap:
        raise ValueError(f"cap_min must be in [0, cap); got {cap_min} with cap {cap}")


def off_policy_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    ratio: str = "sequence",
    surrogate: str = "ratio",
    eps_low: float = 0.2,
    eps_high: float | None = None,
    dual_clip: float = 3.0,
    cispo_cap: str = "relative",
    sampler_logps: torch.Tensor | None = None,
    correction: str | None = None,
    correction_level: str = "sequence",
    cap: float = 3.0,
    cap_min: float | None = None,
    aggregation: str = "sequence-sum",
    max_completion_length: int | None = None,
    normaliser: float | None = None,
) -> torch.Tensor:
    r"""loss = Σᵢ,ₜ wᵢ,ₜ w̃ᵢ,ₜ f(ρᵢ,ₜ, Aᵢ): an off-policy sequence REINFORCE loss.

    ρ is the ratio of ``ratio`` (:data:`RATIOS`, stop-gradient form), f the ``surrogate``
    (:func:`surrogate_ratio`, :func:`surrogate_ppo_clip`, :func:`surrogate_dual_clip`,
    :func:`surrogate_cispo`), w̃ the sampler correction (:func:`sampler_log_weight` then
    :func:`truncate_weight` or :func:`mask_weight`; 1 without ``sampler_logps``; a sampler
    weight without a correction is used untruncated) and w the aggregation's weights
    (the ``aggregation`` rows of :mod:`eligibility.torch.options`).

    The default (the sequence product, no clip, ``"sequence-sum"``) is unbiased for ∇J(θ)
    under sampling from π_old, and with ``sampler_logps`` and no correction under sampling
    from μ: E[−∇loss] = ∇J(θ).

    Args:
        logps: ℓ, floating (N, T): per-token ln π_θ, differentiable.
        old_logps: ℓ^old, π_old's per-token log-probs (detached), like ``logps``.
        advantages: A, (N,) or (N, 1): one per sequence, or (N, T) per token (A − β K with a
            KL's reward-to-go); constants.
        completion_mask: m, bool or 0/1 (N, T).
        ratio: ``"sequence"`` (the product, default), ``"token"`` or ``"geometric-mean"``.
        surrogate: ``"ratio"`` (−ρA, default), ``"ppo-clip"``, ``"dual-clip"`` or ``"cispo"``.
        eps_low: ε_low of the clip (and of CISPO's relative clip).
        eps_high: ε_high (None: ``eps_low``); for ``cispo_cap="absolute"`` the cap itself.
        dual_clip: c > 1 of ``"dual-clip"``.
        cispo_cap: ``"relative"`` (verl) or ``"absolute"`` (TRL).
        sampler_logps: ℓ^μ, the sampler's per-token log-probs (optional), like ``logps``.
        correction: None, ``"tis"`` or ``"mis"`` (needs ``sampler_logps``).
        correction_level: ``"sequence"`` (the product, default) or ``"token"``.
        cap: C, the upper bound of the correction.
        cap_min: C_min, its lower bound (None: none).
        aggregation: an ``aggregation`` row of the option table (default ``"sequence-sum"``).
        max_completion_length: T_max (for ``"constant"``).
        normaliser: M or F (for ``"token-mean"`` and ``"token-sum-norm"``).

    Returns:
        The loss, a scalar to minimise.

    Raises:
        ValueError: shapes that do not match, an unknown option, a non-positive ε or cap,
            c ≤ 1 for ``"dual-clip"``, or ``correction`` without ``sampler_logps``.
    """
    eh = eps_low if eps_high is None else eps_high
    _check_options(ratio, surrogate, eps_low, eh, dual_clip, cispo_cap, correction,
                   correction_level, cap, cap_min)  # fmt: skip
    lp, old, a, m = _check_inputs(logps, old_logps, advantages, completion_mask)
    agg = options.row("aggregation", aggregation)
    if aggregation == "constant" and max_completion_length is None:
        raise ValueError("aggregation='constant' needs max_completion_length (T_max)")
    lp = torch.where(m, lp, 0.0)  # where, not a product: padding may hold NaN
    rho = RATIOS[ratio](lp, old, m)
    l_t = _surrogate(surrogate, rho, a, lp, eps_low, eh, dual_clip, cispo_cap)
    if sampler_logps is not None:
        mu = _check_inputs(logps, sampler_logps, advantages, completion_mask)[1]
        l_t = l_t * _corrected_weight(old, mu, m, correction, correction_level, cap, cap_min)
    elif correction is not None:
        raise ValueError(f"correction={correction!r} needs sampler_logps (μ's log-probs)")
    l_t = torch.where(m, l_t, 0.0)
    weights = agg.fn(m.to(lp.dtype), lp.shape[1], max_completion_length, normaliser)  # type: ignore[misc]
    return (weights * l_t).sum()


def _corrected_weight(
    old: torch.Tensor,
    mu: torch.Tensor,
    m: torch.Tensor,
    correction: str | None,
    level: str,
    cap: float,
    cap_min: float | None,
) -> torch.Tensor:
    """w̃: the sampler weight π_old/μ at ``level``, truncated or masked by ``correction``."""
    w = torch.exp(sampler_log_weight(old, mu, m, level))
    return w if correction is None else CORRECTIONS[correction](w, cap, cap_min)


def _surrogate(
    name: str,
    rho: torch.Tensor,
    a: torch.Tensor,
    lp: torch.Tensor,
    eps_low: float,
    eps_high: float,
    c: float,
    cispo_cap: str,
) -> torch.Tensor:
    if name == "ratio":
        return surrogate_ratio(rho, a, lp)
    if name == "ppo-clip":
        return surrogate_ppo_clip(rho, a, eps_low, eps_high)
    if name == "dual-clip":
        return surrogate_dual_clip(rho, a, eps_low, eps_high, c)
    if cispo_cap == "absolute":
        weight = cispo_weight_absolute(rho, eps_high)
    else:
        weight = cispo_weight_relative(rho, eps_low, eps_high)
    return surrogate_cispo(weight, a, lp)


def _check_inputs(
    logps: object, old_logps: object, advantages: object, completion_mask: object
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    lp = _common.check_tensor("logps", logps)
    _common.check_float("logps", lp)
    if lp.dim() != 2:
        raise ValueError(f"logps must be (N, T); got shape {tuple(lp.shape)}")
    old = _common.check_tensor("old_logps", old_logps)
    if old.shape != lp.shape:
        raise ValueError(
            f"old_logps (and sampler_logps) must have the shape of logps {tuple(lp.shape)}; "
            f"got {tuple(old.shape)}"
        )
    a = _common.check_tensor("advantages", advantages)
    _common.check_float("advantages", a)
    if a.shape not in ((lp.shape[0],), (lp.shape[0], 1), tuple(lp.shape)):
        raise ValueError(
            f"advantages must be (N,) or (N, 1), one per sequence, or (N, T) per token, "
            f"(N, T) = {tuple(lp.shape)}; got {tuple(a.shape)}"
        )
    m = _check_mask(completion_mask, lp.shape).to(lp.device)
    a = a.detach().to(lp.dtype)
    return lp, old.detach().to(lp.dtype), a if a.dim() == 2 else a.reshape(-1, 1), m


# ----------------------------------------------------------------------------------------------
# Diagnostics, under TRL's names
# ----------------------------------------------------------------------------------------------


def ratio_diagnostics(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    ratio: str = "sequence",
    eps_low: float = 0.2,
    eps_high: float | None = None,
) -> dict[str, float]:
    """The ratio's mean/min/max and the clipped shares over real tokens, under TRL's names.

    ``clip_ratio/low_mean``: share of tokens with ρ < 1 − ε_low and A < 0;
    ``clip_ratio/high_mean``: ρ > 1 + ε_high and A > 0; ``clip_ratio/region_mean``: either
    (TRL ``GRPOTrainer`` metrics). ``ratio/mean``, ``ratio/min``, ``ratio/max``: ρ over real
    tokens (TRL logs these for its sampler ratio as ``sampling/importance_sampling_ratio/*``).
    """
    eh = eps_low if eps_high is None else eps_high
    lp, old, a, m = _check_inputs(logps, old_logps, advantages, completion_mask)
    with torch.no_grad():
        rho = RATIOS[ratio](lp, old, m)
        low = (rho < 1 - eps_low) & (a < 0) & m
        high = (rho > 1 + eh) & (a > 0) & m
        n = m.sum().clamp_min(1)
        real = rho[m]
        return {
            "clip_ratio/low_mean": float(low.sum() / n),
            "clip_ratio/high_mean": float(high.sum() / n),
            "clip_ratio/region_mean": float((low | high).sum() / n),
            "ratio/mean": float(real.mean()) if real.numel() else 1.0,
            "ratio/min": float(real.min()) if real.numel() else 1.0,
            "ratio/max": float(real.max()) if real.numel() else 1.0,
        }
