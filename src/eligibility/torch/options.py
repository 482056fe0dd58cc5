r"""The one table of the sequence family's options: every baseline, scale, aggregation and KL.

A row (:class:`Option`) holds an option's pure function (its formula in the docstring), its
name, its names in TRL, verl and OpenRLHF (with the version read), the mistake ``eligibility
check --sequence`` names it by, and the verdict the check gives it on each exact problem
(``length``, ``difficulty``, ``kl``) when it is the only choice off the defaults. Everything
else is a view of these rows: :func:`~eligibility.torch.sequence.sequence_reinforce_loss` and
:func:`~eligibility.torch.advantages.group_advantages` dispatch on them, ``finetune``'s flags
list their names, the check's reference and named variants are built from their functions,
and the option tables of ``docs/`` are printed from them (``python -m
eligibility.torch.options --markdown``). Adding an option is adding a row (and its test).

Notation: G completions per prompt, group-major (the G of one prompt contiguous); N sequences;
Rᵢ the reward, Aᵢ the advantage; ℓᵢ,ₜ = ln π_θ(oᵢ,ₜ | q, oᵢ,<ₜ); mᵢ,ₜ ∈ {0, 1} the completion
mask, Lᵢ = Σₜ mᵢ,ₜ; W the padded width, T_max the generation limit; ℓ^ref the reference
policy's log-probs, ρ = π_ref/π_θ = exp(ℓ^ref − ℓ). Every function takes any leading batch
dimensions (the check evaluates many batches at once): rewards [..., N], masks [..., N, T].

The unbiased estimator of ∇J, J = E[R] − β KL(π_θ ‖ π_ref) over whole sequences, is

    ĝ = (1/N) Σᵢ Σₜ mᵢ,ₜ ∇ℓᵢ,ₜ · (Rᵢ − b₋ᵢ − β Σ_{t′≥t} mᵢ,ₜ′ (ℓᵢ,ₜ′ − ℓ^ref_ᵢ,ₜ′)),

the defaults (``rloo``, scale ``none``, ``sequence-sum``, ``reward-to-go``); every other row
changes E[ĝ], and its verdicts say to what.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

KINDS = ("baseline", "scale", "aggregation", "kl")
"""The columns of a sequence estimator: one row of each kind makes a loss."""

PROBLEMS = ("length", "difficulty", "kl")
"""The exact problems of ``eligibility check --sequence`` a row's verdicts are given on."""

VERSIONS = {"TRL": "TRL 1.16", "verl": "verl 0.9", "OpenRLHF": "OpenRLHF 0.11"}
"""The framework versions whose code the rows' framework names were read from."""

DEFAULTS = {
    "baseline": "rloo",
    "scale": "none",
    "aggregation": "sequence-sum",
    "kl": "reward-to-go",
}
"""The unbiased defaults: a row's verdicts are those of the loss with it and these."""


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
    r"""Â = (A − μ)/√(σ² + ε) over the N advantages of the batch (REINFORCE++'s whitening).

    Subtracting μ is a baseline shared by the batch that depends on oᵢ through its 1/N share,
    and 1/σ one number per batch: a bias of order 1/N (:func:`whiten`, σ² without Bessel).
    """
    return whiten(a, None, (-1,), eps)


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


# ----------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------

Verdict = tuple[str, str | None]
"""What the check reports on one problem: (``unbiased``/``scaled``/``biased``, diagnosis)."""

UNBIASED: Verdict = ("unbiased", None)


def _same(verdict: Verdict) -> dict[str, Verdict]:
    return dict.fromkeys(PROBLEMS, verdict)


@dataclass(frozen=True)
class Option:
    """One row: an option of one kind, its function, its names elsewhere and its verdicts.

    Attributes:
        kind: ``baseline``, ``scale``, ``aggregation`` or ``kl``.
        name: the option's name in ``eligibility`` (the loss's argument, ``finetune``'s flag).
        fn: the pure function (its formula in its docstring), or None for "nothing".
        mistake: the name ``eligibility check`` gives the bias it makes, or None.
        scale: for a step size, the name of the constant the check reports, or None.
        verdicts: problem → the check's verdict of the loss with this row and the defaults.
        frameworks: framework → how it spells this option (``VERSIONS`` names the version).
        placement: for ``kl``: ``reward`` (R̃ = R − β D), ``advantage`` (Â = A − β K) or
            ``loss`` (+ β k per token); empty otherwise.
        summary: one line on what it does to the gradient.
    """

    kind: str
    name: str
    fn: Callable[..., Any] | None
    verdicts: dict[str, Verdict]
    summary: str
    frameworks: dict[str, str] = field(default_factory=dict)
    mistake: str | None = None
    scale: str | None = None
    placement: str = ""


def _biased(mistake: str, **on: Verdict) -> dict[str, Verdict]:
    return {p: on.get(p, ("biased", mistake)) for p in PROBLEMS}


ROWS: tuple[Option, ...] = (
    # -- baselines --
    Option(
        "baseline",
        "rloo",
        baseline_rloo,
        _same(UNBIASED),
        "leave-one-out mean of the others: unbiased (default)",
        {"TRL": "RLOOTrainer", "verl": "adv_estimator=rloo", "OpenRLHF": "rloo"},
    ),
    Option(
        "baseline",
        "mean",
        baseline_group_mean,
        {
            "length": ("scaled", "self-including-mean"),
            "difficulty": ("scaled", "self-including-mean"),
            "kl": ("biased", "self-including-mean"),
        },
        "group mean including the sample: the reward's gradient × (G − 1)/G, not the KL's",
        {
            "TRL": "GRPOTrainer",
            "verl": "adv_estimator=grpo",
            "OpenRLHF": "group_norm, dr_grpo",
        },
        scale="self-including-mean",
    ),
    Option(
        "baseline",
        "none",
        baseline_none,
        _same(UNBIASED),
        "no baseline (A = R): unbiased, noisier",
        {"OpenRLHF": "reinforce"},
    ),
    # -- scales --
    Option(
        "scale",
        "none",
        scale_none,
        _same(UNBIASED),
        "no scaling (default)",
        {"TRL": 'scale_rewards="none"', "verl": "norm_adv_by_std_in_grpo=False"},
    ),
    Option(
        "scale",
        "group-std",
        scale_group_std,
        _biased("std-normalised"),
        "÷ the group's reward std: each prompt reweighted by 1/σ̂_q",
        {
            "TRL": 'scale_rewards="group"',
            "verl": "norm_adv_by_std_in_grpo=True",
            "OpenRLHF": "group_norm",
        },
        mistake="std-normalised",
    ),
    Option(
        "scale",
        "batch-std",
        scale_batch_std,
        _biased("std-normalised"),
        "÷ the batch's reward std: one number per batch, biased at small N",
        {"TRL": 'scale_rewards="batch"'},
        mistake="std-normalised",
    ),
    Option(
        "scale",
        "whiten",
        scale_whiten,
        _biased("batch-whitened"),
        "(A − μ)/σ over the batch (REINFORCE++): biased at small N",
        {
            "verl": "adv_estimator=reinforce_plus_plus",
            "OpenRLHF": "reinforce, reinforce_baseline",
        },
        mistake="batch-whitened",
    ),
    # -- aggregations --
    Option(
        "aggregation",
        "sequence-sum",
        weights_sequence_sum,
        _same(UNBIASED),
        "(1/N) Σᵢ Σₜ: each sequence's sum, the mean over sequences (default)",
        {"verl": "seq-mean-token-sum", "TRL": "RLOOTrainer"},
    ),
    Option(
        "aggregation",
        "constant",
        weights_constant,
        {
            "length": ("scaled", "constant-normaliser"),
            "difficulty": ("scaled", "constant-normaliser"),
            "kl": ("scaled", "constant-normaliser"),
        },
        "Σ/(N·T_max): a step size 1/T_max",
        {"TRL": 'loss_type="dr_grpo"'},
        scale="constant-normaliser",
    ),
    Option(
        "aggregation",
        "constant-sum",
        weights_constant_sum,
        {
            "length": ("scaled", "constant-normaliser"),
            "difficulty": ("scaled", "constant-normaliser"),
            "kl": ("scaled", "constant-normaliser"),
        },
        "Σ/T_max, not ÷ N: a step size N/T_max",
        {"verl": "seq-mean-token-sum-norm, loss_scale_factor=T_max"},
        scale="constant-normaliser",
    ),
    Option(
        "aggregation",
        "sequence-mean",
        weights_sequence_mean,
        _biased("length-normalised"),
        "(1/N) Σᵢ (1/Lᵢ) Σₜ: the gradient of the reshaped reward (R − b)/L",
        {"TRL": 'loss_type="grpo"', "verl": "seq-mean-token-mean"},
        mistake="length-normalised",
    ),
    Option(
        "aggregation",
        "token-mean",
        weights_token_mean,
        _biased("batch-dependent-normaliser"),
        "Σ/Σm over the batch: a random factor correlated with the lengths",
        {"TRL": 'loss_type="dapo"', "verl": "token-mean", "OpenRLHF": "default"},
        mistake="batch-dependent-normaliser",
    ),
    Option(
        "aggregation",
        "micro-batch-token-mean",
        weights_micro_batch_token_mean,
        _biased("batch-dependent-normaliser"),
        "a token mean per half of the batch, averaged (gradient accumulation)",
        {"TRL": 'loss_type="bnpo"'},
        mistake="batch-dependent-normaliser",
    ),
    Option(
        "aggregation",
        "token-sum-norm",
        weights_token_sum_norm,
        _biased("batch-dependent-normaliser"),
        "Σ/W, W the batch's padded width: a random factor correlated with the lengths",
        {"verl": "seq-mean-token-sum-norm"},
        mistake="batch-dependent-normaliser",
    ),
    Option(
        "aggregation",
        "padded-width",
        weights_padded_width,
        _biased("batch-dependent-normaliser"),
        "Σ/(N·W), W the batch's padded width",
        mistake="batch-dependent-normaliser",
    ),
    # -- KL placements --
    Option(
        "kl",
        "reward-to-go",
        kl_reward_to_go,
        _same(UNBIASED),
        "k1 as a per-token reward-to-go on the advantage: the exact gradient (default)",
        {"OpenRLHF": "init_kl_coef (k1 reward, reinforce)"},
        placement="advantage",
    ),
    Option(
        "kl",
        "sequence-reward",
        kl_sequence,
        _same(UNBIASED),
        "the sequence's k1 in the reward, before the baseline: the exact gradient",
        {"TRL": "RLOOTrainer", "verl": "use_kl_in_reward", "OpenRLHF": "init_kl_coef (rloo)"},
        placement="reward",
    ),
    Option(
        "kl",
        "none",
        None,
        _biased("kl-no-gradient", length=UNBIASED, difficulty=UNBIASED),
        "no KL term (β unused)",
        {"TRL": "beta=0.0 (default)"},
        mistake="kl-no-gradient",
    ),
    Option(
        "kl",
        "k1",
        kl_k1,
        _biased("kl-no-gradient", length=UNBIASED, difficulty=UNBIASED),
        "k1 in the loss: gradient 0 in expectation",
        {"verl": "kl_loss_type=k1", "OpenRLHF": "use_kl_loss, kl_estimator=k1"},
        mistake="kl-no-gradient",
        placement="loss",
    ),
    Option(
        "kl",
        "k2",
        kl_k2,
        _biased("kl-token-local", length=UNBIASED, difficulty=UNBIASED),
        "k2 in the loss: each token's own KL score, blind to later tokens",
        {"verl": "kl_loss_type=mse", "OpenRLHF": "use_kl_loss, kl_estimator=k2"},
        mistake="kl-token-local",
        placement="loss",
    ),
    Option(
        "kl",
        "k3",
        kl_k3,
        _biased("kl-forward", length=UNBIASED, difficulty=UNBIASED),
        "k3 in the loss: the forward KL's gradient",
        {
            "TRL": "beta>0, use_bias_correction_kl=False",
            "OpenRLHF": "use_kl_loss, kl_estimator=k3",
        },
        mistake="kl-forward",
        placement="loss",
    ),
    Option(
        "kl",
        "k3-clamped",
        kl_k3_clamped,
        _biased("kl-forward", length=UNBIASED, difficulty=UNBIASED),
        "k3 clamped to ±10 in the loss: the forward KL's gradient where k3 ≤ 10",
        {"verl": "kl_loss_type=low_var_kl"},
        mistake="kl-forward",
        placement="loss",
    ),
    Option(
        "kl",
        "k3-ratio",
        kl_k3_ratio,
        _biased("kl-token-local", length=UNBIASED, difficulty=UNBIASED),
        "k3 × the ratio exp(ℓ − sg ℓ) in the loss: k2's gradient, token-local",
        {"TRL": "beta>0 (use_bias_correction_kl=True, default)"},
        mistake="kl-token-local",
        placement="loss",
    ),
)
"""Every option of the sequence family, one row each."""


def rows(kind: str) -> dict[str, Option]:
    """The rows of one kind, by name, in the table's order."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
    return {o.name: o for o in ROWS if o.kind == kind}


def names(kind: str) -> tuple[str, ...]:
    """The names of the options of one kind (e.g. ``finetune``'s choices)."""
    return tuple(rows(kind))


def row(kind: str, name: object) -> Option:
    """The row ``name`` of ``kind``; a ValueError listing the choices for any other name."""
    table = rows(kind)
    if not isinstance(name, str) or name not in table:
        raise ValueError(f"{kind} must be one of {tuple(table)}; got {name!r}")
    return table[name]


__all__ = [
    "DEFAULTS",
    "KINDS",
    "PROBLEMS",
    "ROWS",
    "VERSIONS",
    "Option",
    "names",
    "row",
    "rows",
]
