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
from dataclasses import dataclass

import torch

from eligibility.torch import _common, options
from eligibility.torch._compose import Policy, check_like, check_rows, compose
from eligibility.torch.formulas import (  # the rows' formulas, re-exported here
    cispo_weight_absolute,
    cispo_weight_relative,
    log_ratio_token,
    mask_weight,
    ratio_geometric_mean,
    ratio_sequence,
    ratio_token,
    sampler_log_weight,
    surrogate_cispo,
    surrogate_dual_clip,
    surrogate_ppo_clip,
    surrogate_ratio,
    truncate_weight,
)

RATIOS: dict[str, Callable[..., torch.Tensor]] = {
    name: o.fn
    for name, o in options.rows("ratio").items()  # type: ignore[misc]
}
"""The ratio levels by name (the option table's ``ratio`` rows): ρ(logps, old_logps, m) → (N, T),
stop-gradient form."""

SURROGATES = options.base_names("surrogate")
"""The surrogates of :func:`off_policy_loss` (the ``surrogate`` rows less the settings of one,
such as ``clip-higher``; ``"ratio"``: −ρ A)."""

CORRECTIONS = options.base_names("correction")
"""The sampler corrections (the ``correction`` rows): ``exact`` (the whole weight, default),
``none`` (no weight), ``tis`` (truncated), ``mis`` (masked)."""

CISPO_CAPS = ("relative", "absolute")
"""CISPO's cap semantics: verl's relative clip, TRL's absolute cap."""

# ----------------------------------------------------------------------------------------------
# The loss
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PolicySettings:
    """The policy term's settings: the ``ratio`` row ρ, the ``surrogate`` row f and f's constants.

    Attributes:
        ratio: the ratio row's name.
        surrogate: the surrogate row's name.
        eps_low: ε_low.
        eps_high: ε_high (``eps_low`` already put in for None).
        dual_clip: c of ``"dual-clip"``.
        cispo_cap: CISPO's cap semantics (:data:`CISPO_CAPS`).
    """

    ratio: str
    surrogate: str
    eps_low: float
    eps_high: float
    dual_clip: float
    cispo_cap: str


@dataclass(frozen=True)
class _CorrectionSettings:
    """The sampler weight's settings: the ``correction`` row, its level and its bounds.

    Attributes:
        name: the correction row's name (``"exact"`` already put in for None).
        level: ``"token"`` or ``"sequence"``.
        cap: C, the upper bound.
        cap_min: C_min, the lower bound (None: none).
    """

    name: str
    level: str
    cap: float
    cap_min: float | None


def _check_options(policy: _PolicySettings, correction: _CorrectionSettings) -> None:
    """Raise a ValueError naming the first option or setting out of its range."""
    names = (
        ("ratio", policy.ratio, tuple(RATIOS)),
        ("surrogate", policy.surrogate, SURROGATES),
        ("cispo_cap", policy.cispo_cap, CISPO_CAPS),
        ("correction", correction.name, CORRECTIONS),
        ("correction_level", correction.level, ("token", "sequence")),
    )
    for name, value, allowed in names:
        if value not in allowed:
            raise ValueError(f"{name} must be one of {allowed}; got {value!r}")
    eps_low, cap, cap_min = policy.eps_low, correction.cap, correction.cap_min
    for name, x in (("eps_low", eps_low), ("eps_high", policy.eps_high), ("cap", cap)):
        if isinstance(x, torch.Tensor) or not (float(x) > 0 and float(x) != float("inf")):
            raise ValueError(f"{name} must be a positive finite python float; got {x!r}")
    if policy.surrogate != "cispo" and eps_low >= 1:
        raise ValueError(f"eps_low must be < 1 (the clip band is [1 − eps_low, …]); got {eps_low}")
    if policy.surrogate == "dual-clip" and not policy.dual_clip > 1:
        raise ValueError(
            f"dual_clip c must be > 1 (c ≤ 1 cuts every A < 0 token); got {policy.dual_clip}"
        )
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
    correction: str | None = "exact",
    correction_level: str = "sequence",
    cap: float = 3.0,
    cap_min: float | None = None,
    aggregation: str = "sequence-sum",
    max_completion_length: int | None = None,
    normaliser: float | None = None,
    kl: str = "reward-to-go",
    beta: float = 0.0,
    ref_logps: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""loss = Σᵢ,ₜ wᵢ,ₜ (w̃ᵢ,ₜ f(ρᵢ,ₜ, Âᵢ,ₜ) + β kᵢ,ₜ): an off-policy sequence REINFORCE loss.

    The ratio ρ, surrogate f, sampler weight w̃ (1 without ``sampler_logps``), aggregation w
    and KL row are rows of :mod:`eligibility.torch.options`, composed by the function that
    composes :func:`~eligibility.torch.sequence.sequence_reinforce_loss` (the KL at θ: Â =
    A − β K(θ), or β k(θ) in the loss); at θ = θ_old its value and gradient are that loss's
    with ``old_logps``. The defaults are unbiased: E[−∇loss] = ∇J(θ) under sampling from π_old
    (from μ with ``sampler_logps``).

    Args:
        logps: ℓ, floating (N, T): per-token ln π_θ, differentiable.
        old_logps: ℓ^old, π_old's per-token log-probs (detached), like ``logps``.
        advantages: A, (N,) or (N, 1) per sequence, or (N, T) per token; constants.
        completion_mask: m, bool or 0/1 (N, T).
        ratio: a ``ratio`` row: ``"sequence"`` (the product, default), ``"token"``, ….
        surrogate: a ``surrogate`` row: ``"ratio"`` (−ρA, default), ``"ppo-clip"``, ….
        eps_low: ε_low of the clip (and of CISPO's relative clip).
        eps_high: ε_high (None: ``eps_low``); for ``cispo_cap="absolute"`` the cap itself.
        dual_clip: c > 1 of ``"dual-clip"``.
        cispo_cap: ``"relative"`` (verl) or ``"absolute"`` (TRL).
        sampler_logps: ℓ^μ, the sampler's per-token log-probs (optional), like ``logps``.
        correction: a ``correction`` row (None: ``"exact"``; ``"tis"``/``"mis"`` need μ's).
        correction_level: ``"sequence"`` (the product, default) or ``"token"``.
        cap: C, the upper bound of the correction.
        cap_min: C_min, its lower bound (None: none).
        aggregation: an ``aggregation`` row (default ``"sequence-sum"``).
        max_completion_length: T_max (the need of ``"constant"`` and ``"constant-sum"``).
        normaliser: M or F (for ``"token-mean"`` and ``"token-sum-norm"``).
        kl: a KL row placed on the advantage or in the loss (default ``"reward-to-go"``).
        beta: β ≥ 0, the KL's weight (0: no KL term).
        ref_logps: ℓ^ref, the reference policy's log-probs, like ``logps`` (needed if β ≠ 0).

    Returns:
        The loss, a scalar to minimise.

    Raises:
        ValueError: bad shapes, options or settings, or a row's need unmet (as on-policy).
    """
    eh = eps_low if eps_high is None else eps_high
    correction = "exact" if correction is None else correction
    terms = _PolicySettings(ratio, surrogate, eps_low, eh, dual_clip, cispo_cap)
    corrected = _CorrectionSettings(correction, correction_level, cap, cap_min)
    _check_options(terms, corrected)
    lp, old, a, m = _check_inputs(logps, old_logps, advantages, completion_mask)
    t_max = max_completion_length
    n_t, rows = lp.shape, (aggregation, kl, beta)
    agg, kl_row, b = check_rows(
        *rows, max_completion_length=t_max, normaliser=normaliser, ref_logps=ref_logps, shape=n_t
    )
    ref = check_like("ref_logps", ref_logps, lp) if b != 0.0 else None
    w = _sampler_weight(logps, sampler_logps, advantages, completion_mask, old, m, corrected)
    policy = _policy_term(terms, old, m)
    return compose(
        lp, a, m, agg, kl_row, b, ref, t_max=t_max, normaliser=normaliser, policy=policy, sampler=w
    )


def _policy_term(terms: _PolicySettings, old: torch.Tensor, m: torch.Tensor) -> Policy:
    """f(ℓ, Â) = f(ρ(ℓ), Â): the ``ratio`` row's ρ under the ``surrogate`` row's f."""

    def f(ell: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
        rho = RATIOS[terms.ratio](ell, old.to(ell.dtype), m)
        return _surrogate(terms, rho, adv, ell)

    return f


def _sampler_weight(
    logps: object,
    sampler_logps: object,
    advantages: object,
    completion_mask: object,
    old: torch.Tensor,
    m: torch.Tensor,
    corrected: _CorrectionSettings,
) -> torch.Tensor | None:
    """w̃ from μ's log-probs (None: no sampler weight), or a ValueError for a cap without μ."""
    correction = corrected.name
    if sampler_logps is not None and correction != "none":
        mu = _check_inputs(logps, sampler_logps, advantages, completion_mask)[1]
        return _corrected_weight(old, mu, m, corrected)
    if correction in ("tis", "mis"):
        raise ValueError(f"correction={correction!r} needs sampler_logps (μ's log-probs)")
    return None


def _corrected_weight(
    old: torch.Tensor, mu: torch.Tensor, m: torch.Tensor, corrected: _CorrectionSettings
) -> torch.Tensor:
    """w̃: the sampler weight π_old/μ at the level, truncated or masked by the correction."""
    row = options.row("correction", corrected.name)
    exact = options.row("correction", "exact").fn
    w = torch.exp(exact(old, mu, m, corrected.level))  # type: ignore[misc]
    if row.name == "exact":
        return w
    return row.fn(w, corrected.cap, corrected.cap_min)  # type: ignore[misc]


def _surrogate(
    terms: _PolicySettings, rho: torch.Tensor, a: torch.Tensor, lp: torch.Tensor
) -> torch.Tensor:
    """f(ρ, A) of the ``surrogate`` row, its settings passed as its formula takes them."""
    name, eps_low, eps_high = terms.surrogate, terms.eps_low, terms.eps_high
    f = options.row("surrogate", name).fn
    if name == "cispo":
        weight = (
            cispo_weight_absolute(rho, eps_high)
            if terms.cispo_cap == "absolute"
            else cispo_weight_relative(rho, eps_low, eps_high)
        )
        return f(weight, a, lp)  # type: ignore[misc]
    args = {
        "ratio": (lp,),
        "ppo-clip": (eps_low, eps_high),
        "dual-clip": (eps_low, eps_high, terms.dual_clip),
    }
    return f(rho, a, *args[name])  # type: ignore[misc]


def _check_inputs(
    logps: object, old_logps: object, advantages: object, completion_mask: object
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    lp = _common.float_tensor("logps", logps, 2, "(N, T)")
    old = _common.check_tensor("old_logps", old_logps)
    if old.shape != lp.shape:
        raise ValueError(
            f"old_logps (and sampler_logps) must have the shape of logps {tuple(lp.shape)}; "
            f"got {tuple(old.shape)}"
        )
    a = _common.float_tensor("advantages", advantages)
    if a.shape not in ((lp.shape[0],), (lp.shape[0], 1), tuple(lp.shape)):
        raise ValueError(
            f"advantages must be (N,) or (N, 1), one per sequence, or (N, T) per token, "
            f"(N, T) = {tuple(lp.shape)}; got {tuple(a.shape)}"
        )
    m = _common.check_mask(completion_mask, lp.shape).to(lp.device)
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


__all__ = [
    "CISPO_CAPS",
    "CORRECTIONS",
    "RATIOS",
    "SURROGATES",
    "cispo_weight_absolute",
    "cispo_weight_relative",
    "log_ratio_token",
    "mask_weight",
    "off_policy_loss",
    "ratio_diagnostics",
    "ratio_geometric_mean",
    "ratio_sequence",
    "ratio_token",
    "sampler_log_weight",
    "surrogate_cispo",
    "surrogate_dual_clip",
    "surrogate_ppo_clip",
    "surrogate_ratio",
    "truncate_weight",
]
