r"""Sequence REINFORCE losses for language models: aggregations and KL placements.

The group advantages they take are in :mod:`eligibility.torch.advantages` (and re-exported here).

Notation (``docs/torch-losses.md``, and ``../shared/reference/sequence-reinforce.md``): G
completions oᵢ per prompt, group-major (the G completions of one prompt are contiguous, as TRL
and verl order them), N sequences in all; ℓᵢ,ₜ = ln π_θ(oᵢ,ₜ | q, oᵢ,<ₜ) the per-token
log-probabilities, mᵢ,ₜ ∈ {0, 1} the completion mask, Lᵢ = Σₜ mᵢ,ₜ, Rᵢ the reward, Aᵢ the
advantage. The unbiased estimator of ∇J, J = E[R] − β KL(π_θ ‖ π_ref) over whole sequences, is

    ĝ = (1/N) Σᵢ Σₜ mᵢ,ₜ ∇ℓᵢ,ₜ · (Aᵢ − β Σ_{t′≥t} mᵢ,ₜ′ (ℓᵢ,ₜ′ − ℓ^ref_ᵢ,ₜ′)),

with Aᵢ = Rᵢ − b₋ᵢ for a baseline b₋ᵢ that does not depend on oᵢ (leave-one-out). Every other
choice the frameworks make (a self-including mean, a 1/σ, a 1/Lᵢ, a token count of a window,
a KL estimator in the loss) changes E[ĝ]: each option below states to what, in the words the
sequence ``eligibility check`` reports (``unbiased``; ``scaled`` with its constant c;
``length-normalised``, ``std-normalised``, ``batch-dependent-normaliser``; ``kl-no-gradient``,
``kl-forward``, ``kl-token-local``). **The defaults are the unbiased set**: the RLOO baseline, no
std scaling, ``aggregation="sequence-sum"`` (or ``"constant"``), the KL as a reward-to-go.

Every aggregation the frameworks use is linear in the per-token losses l: loss = Σᵢ,ₜ wᵢ,ₜ lᵢ,ₜ
with weights w (0 on padding). So :func:`sequence_reinforce_loss` hands autograd the closed form
∂loss/∂ℓ = w ⊙ ∂l/∂ℓ, one N × T tensor formed in the forward, and checks the inputs with one
host read (of the loss: a non-finite input on a real token makes it non-finite, and only then are
the inputs searched for the culprit). Under ``torch.compile``, ``torch.func`` and
``create_graph=True`` the same formula runs in plain differentiable ops.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from eligibility.torch import _common
from eligibility.torch.advantages import (  # noqa: F401  (re-exported: the sequence API)
    BASELINES,
    SCALES,
    _check_mask,
    _raise_nonfinite,
    group_advantages,
    whiten_advantages,
)

# ----------------------------------------------------------------------------------------------
# KL to a reference policy, per token (d = ℓ − ℓ_ref = −ln ρ)
# ----------------------------------------------------------------------------------------------


def kl_k1(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    r"""k1 = ℓ − ℓ_ref = −ln ρ per token: E[k1] = KL(π_θ‖π_ref).

    In the loss, ∇(β k1) = β ∇ℓ, whose expectation is zero (E[∇ℓ] = 0): ``kl-no-gradient``, the
    KL term only adds noise.
    """
    return logps - ref_logps


def kl_k1_grad(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """∂k1/∂ℓ = 1."""
    return torch.ones_like(logps)


def kl_k2(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    r"""k2 = ½ (ℓ − ℓ_ref)² per token.

    In the loss, ∇(β k2) = β (ℓ − ℓ_ref) ∇ℓ: each token's own reverse-KL score term, which misses
    the effect of a token on the later tokens' KL: ``kl-token-local``.
    """
    d = logps - ref_logps
    return 0.5 * d * d


def kl_k2_grad(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """∂k2/∂ℓ = ℓ − ℓ_ref."""
    return logps - ref_logps


def kl_k3(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    r"""k3 = ρ − 1 − ln ρ per token, ρ = π_ref/π_θ = exp(ℓ_ref − ℓ) (GRPO paper, TRL, verl).

    In the loss, ∇(β k3) = β (1 − ρ) ∇ℓ, whose expectation is ∇ KL(π_ref‖π_θ), the gradient of
    the *forward* KL: ``kl-forward``.
    """
    log_rho = ref_logps - logps
    return torch.expm1(log_rho) - log_rho


def kl_k3_grad(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """∂k3/∂ℓ = 1 − ρ = −(exp(ℓ_ref − ℓ) − 1)."""
    return -torch.expm1(ref_logps - logps)


def kl_reward_to_go(
    logps: torch.Tensor, ref_logps: torch.Tensor, completion_mask: torch.Tensor
) -> torch.Tensor:
    r"""Kᵢ,ₜ = Σ_{t′≥t} mᵢ,ₜ′ (ℓᵢ,ₜ′ − ℓ^ref_ᵢ,ₜ′): the sequence KL still ahead of token t.

    Since ∇ KL(π_θ(·|q)‖π_ref(·|q)) = E[Σₜ ∇ℓₜ Σ_{t′≥t} (ℓₜ′ − ℓ^ref_ₜ′)] (the terms t′ < t
    have zero expectation), −β K as a per-token penalty on the advantage (detached) gives the
    exact gradient of −β KL over whole sequences: ``unbiased``. Returned detached, 0 on padding
    (``completion_mask`` is a bool tensor).
    """
    d = torch.where(completion_mask, (logps - ref_logps).detach(), 0.0)
    return d.flip(-1).cumsum(-1).flip(-1)


KL_IN_LOSS: dict[str, tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor]]] = {
    "k1": (kl_k1, kl_k1_grad),
    "k2": (kl_k2, kl_k2_grad),
    "k3": (kl_k3, kl_k3_grad),
}
"""The KL estimators placed in the loss, by name: (k, ∂k/∂ℓ)."""
KL_PLACEMENTS = ("reward-to-go", *KL_IN_LOSS)

# ----------------------------------------------------------------------------------------------
# Aggregations: loss = Σᵢ,ₜ wᵢ,ₜ lᵢ,ₜ, the per-token losses l weighted by w (0 on padding). Every
# aggregation the frameworks use is linear in l, so each is its weights w = ∂loss/∂l.
# ----------------------------------------------------------------------------------------------


def weights_sequence_sum(m: torch.Tensor, normaliser: float | None, t_max: int | None):
    r"""wᵢ,ₜ = mᵢ,ₜ / N: loss = (1/N) Σᵢ Σₜ mᵢ,ₜ lᵢ,ₜ, each sequence's sum, then the mean.

    verl ``seq-mean-token-sum``; the gradient of TRL's RLOO (whose sequence-level ratio gives the
    value −mean A on-policy). With lᵢ,ₜ = −Aᵢ ℓᵢ,ₜ it is the estimator ĝ itself: ``unbiased``.
    """
    return m / m.shape[0]


def weights_constant(m: torch.Tensor, normaliser: float | None, t_max: int | None):
    r"""wᵢ,ₜ = mᵢ,ₜ / (N · T_max): loss = Σ m l / (N · T_max), T_max = ``max_completion_length``.

    Dr. GRPO; TRL ``loss_type="dr_grpo"``. A constant divisor: E[ĝ] = ∇J / T_max, ``scaled``
    with c = 1/T_max (a step size, not a bias).
    """
    return m / (m.shape[0] * t_max)  # type: ignore[operator]


def weights_token_mean(m: torch.Tensor, normaliser: float | None, t_max: int | None):
    r"""wᵢ,ₜ = mᵢ,ₜ / M: loss = Σ m l / M, M = ``normaliser`` or, when None, Σ m of this call.

    DAPO; TRL ``dapo`` (M = the tokens of the generation batch), ``bnpo`` (M = this
    micro-batch's); verl ``token-mean`` (its default). With M fixed for the whole optimiser step
    (pass it), ``scaled`` by 1/M; with M counted from this call's tokens, the scale is a random
    number correlated with the lengths (and wrong by the ratio of windows when the loss is
    accumulated over micro-batches): ``batch-dependent-normaliser``.
    """
    return m / (m.sum().clamp_min(1) if normaliser is None else normaliser)


def weights_sequence_mean(m: torch.Tensor, normaliser: float | None, t_max: int | None):
    r"""wᵢ,ₜ = mᵢ,ₜ / (N Lᵢ), Lᵢ = max(Σₜ mᵢ,ₜ, 1): loss = (1/N) Σᵢ (1/Lᵢ) Σₜ mᵢ,ₜ lᵢ,ₜ.

    The mean of per-sequence token means: the GRPO paper; TRL ``loss_type="grpo"``; verl
    ``seq-mean-token-mean``. E[ĝ] is the gradient of the reshaped reward (R − b)/L: long wrong
    answers are penalised less per token, so they grow (Dr. GRPO): ``length-normalised``. An
    empty completion contributes 0.
    """
    return m / (m.shape[0] * m.sum(-1, keepdim=True).clamp_min(1))


def weights_token_sum_norm(m: torch.Tensor, normaliser: float | None, t_max: int | None):
    r"""wᵢ,ₜ = mᵢ,ₜ / F: loss = Σ m l / F, F = ``normaliser`` or, when None, T (the padded width).

    verl ``seq-mean-token-sum-norm`` (F its ``loss_scale_factor``, by default the width of the
    mask). Note: not divided by N. With F set to a constant: ``scaled`` with c = N/F (N fixed by
    the batch size). With the padded width (the default, as verl), F is the longest completion
    of the batch: ``batch-dependent-normaliser``.
    """
    return m / (m.shape[-1] if normaliser is None else normaliser)


AGGREGATIONS: dict[str, Callable[..., torch.Tensor]] = {
    "sequence-sum": weights_sequence_sum,
    "constant": weights_constant,
    "token-mean": weights_token_mean,
    "sequence-mean": weights_sequence_mean,
    "token-sum-norm": weights_token_sum_norm,
}
"""The aggregations by name: ``w(m, normaliser, t_max)``, m the 0/1 mask as floats."""

# ----------------------------------------------------------------------------------------------
# The loss
# ----------------------------------------------------------------------------------------------


def _check_like(name: str, x: object, lp: torch.Tensor) -> torch.Tensor:
    t = _common.check_tensor(name, x)
    if t.shape != lp.shape or t.dtype != lp.dtype or t.device != lp.device:
        raise ValueError(
            f"{name} must have the shape, dtype and device of logps {tuple(lp.shape)}, "
            f"{lp.dtype}, {lp.device}; got {tuple(t.shape)}, {t.dtype}, {t.device}"
        )
    return t


def _check_advantages(advantages: object, lp: torch.Tensor) -> torch.Tensor:
    a = _common.check_tensor("advantages", advantages)
    _common.check_float("advantages", a)
    n, t = lp.shape
    if a.shape == (n,):
        a = a.unsqueeze(-1)
    elif a.shape != (n, t):
        raise ValueError(
            f"advantages of shape {tuple(a.shape)} match neither ({n},) (one per sequence) nor "
            f"({n}, {t}) (one per token) for logps of shape {(n, t)}"
        )
    if a.device != lp.device:
        raise ValueError(f"advantages are on {a.device}, logps on {lp.device}: move them")
    return a.detach() if a.requires_grad else a


def _check_options(
    aggregation: str,
    max_completion_length: int | None,
    normaliser: float | None,
    kl: str | None,
    beta: float,
    ref_logps: object,
    width: int,
) -> tuple[str, float]:
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {tuple(AGGREGATIONS)}; got {aggregation!r}")
    if max_completion_length is not None:
        if isinstance(max_completion_length, bool) or not isinstance(max_completion_length, int):
            raise ValueError(f"max_completion_length must be an int; got {max_completion_length!r}")
        if max_completion_length < max(width, 1):
            raise ValueError(
                f"max_completion_length = {max_completion_length} is less than the width of "
                f"logps ({width}): pass T_max, the generation limit, at least the padded width"
            )
    elif aggregation == "constant":
        raise ValueError(
            "aggregation='constant' divides by N · max_completion_length: pass "
            "max_completion_length (the generation limit T_max)"
        )
    if normaliser is not None:
        nv = float(normaliser)
        if not (nv > 0 and nv != float("inf")):
            raise ValueError(f"normaliser must be a positive finite number; got {normaliser!r}")
        if aggregation not in ("token-mean", "token-sum-norm"):
            raise ValueError(
                f"normaliser is the divisor of 'token-mean' and 'token-sum-norm'; aggregation "
                f"{aggregation!r} has none of its own"
            )
    b = _common.check_coef(beta)
    placement = "reward-to-go" if kl is None else kl
    if placement not in KL_PLACEMENTS:
        raise ValueError(f"kl must be None or one of {KL_PLACEMENTS}; got {kl!r}")
    if b != 0.0 and ref_logps is None:
        raise ValueError("beta > 0 needs ref_logps, the reference policy's per-token log-probs")
    return placement, b


def sequence_reinforce_loss(
    logps: torch.Tensor,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    aggregation: str = "sequence-sum",
    max_completion_length: int | None = None,
    normaliser: float | None = None,
    kl: str | None = None,
    beta: float = 0.0,
    ref_logps: torch.Tensor | None = None,
    old_logps: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""loss = Σᵢ,ₜ wᵢ,ₜ lᵢ,ₜ, lᵢ,ₜ = −Âᵢ,ₜ ℓᵢ,ₜ + β kᵢ,ₜ: the REINFORCE loss of whole completions.

    w are the weights of the aggregation (``weights_*``, 0 on padding); the backward is the
    closed form ∂loss/∂ℓ = w ⊙ ∂l/∂ℓ.

    Per real token (mᵢ,ₜ = 1; padding contributes 0 and is never looked at):

    * the policy term −Âᵢ,ₜ ℓᵢ,ₜ, Â the advantage (per sequence, or per token), minus
      β Kᵢ,ₜ (:func:`kl_reward_to_go`) when ``kl`` is the reward-to-go; with ``old_logps`` it
      is written −Â rᵢ,ₜ, r = exp(ℓ − ℓ_old), as TRL and verl write it (same gradient where
      ℓ_old = ℓ, as on-policy; the value is then −Â, not −Â ℓ);
    * the KL term β kᵢ,ₜ when ``kl`` is ``"k1"``, ``"k2"`` or ``"k3"`` (:func:`kl_k1`, …).

    Aggregations (``aggregation``; what E[∇loss] is, against −∇J):

    =================== ===================================== ==================================
    name                loss                                  effect (sequence check)
    =================== ===================================== ==================================
    ``sequence-sum``    (1/N) Σᵢ Σₜ m l  (verl                unbiased (default)
                        seq-mean-token-sum, TRL RLOO)
    ``constant``        Σ m l / (N·T_max) (Dr. GRPO, TRL       scaled, c = 1/T_max
                        dr_grpo)
    ``token-mean``      Σ m l / M, M = ``normaliser`` or Σ m   scaled 1/M if M is fixed;
                        (DAPO, TRL dapo/bnpo, verl            batch-dependent-normaliser if
                        token-mean)                           counted per call
    ``sequence-mean``   (1/N) Σᵢ (1/Lᵢ) Σₜ m l (GRPO paper,    length-normalised: the gradient
                        TRL grpo, verl seq-mean-token-mean)   of the reshaped reward (R − b)/L
    ``token-sum-norm``  Σ m l / F, F = ``normaliser`` or T     scaled N/F if F is fixed;
                        (verl seq-mean-token-sum-norm)        batch-dependent-normaliser at the
                                                              padded width
    =================== ===================================== ==================================

    KL placements (``kl``, used when β ≠ 0; each estimator has E[k] = KL per token):

    * None or ``"reward-to-go"`` (default): k1 as a per-sequence reward-to-go penalty on the
      advantage, Â ← A − β Σ_{t′≥t} m (ℓ − ℓ_ref): the exact gradient of −β KL(π_θ‖π_ref) over
      whole sequences (``unbiased``). The loss value carries no KL.
    * ``"k1"``: β (ℓ − ℓ_ref) in the loss: gradient β∇ℓ, expectation 0 (``kl-no-gradient``).
    * ``"k2"``: β ½(ℓ − ℓ_ref)²: the per-token reverse-KL score, blind to later tokens
      (``kl-token-local``).
    * ``"k3"``: β (ρ − 1 − ln ρ), ρ = π_ref/π_θ (GRPO paper, TRL): the forward KL's gradient
      (``kl-forward``).

    The KL terms pass through the same aggregation as the policy term (as in TRL and verl).

    Args:
        logps: ℓ, floating (N, T): per-token log π_θ of each sampled completion token,
            differentiable. Values on padding are never read.
        advantages: A, floating, (N,) (per sequence, e.g. :func:`group_advantages`) or (N, T)
            (per token, e.g. REINFORCE++ returns-to-go); constants (detached).
        completion_mask: m, bool or 0/1 numbers, (N, T): 1 on real completion tokens (EOS
            included), 0 on padding.
        aggregation: one of the names above.
        max_completion_length: T_max, the generation limit (needed by ``"constant"``; at
            least T).
        normaliser: M for ``"token-mean"`` (default: this call's token count), F for
            ``"token-sum-norm"`` (default: T). Pass the count of the whole optimiser step when
            accumulating micro-batches.
        kl: None (= ``"reward-to-go"``), ``"reward-to-go"``, ``"k1"``, ``"k2"`` or ``"k3"``.
        beta: β ≥ 0, a python float; 0 means no KL term (and ``ref_logps`` may be None).
        ref_logps: ℓ_ref, the reference policy's per-token log-probs, the shape, dtype and
            device of ``logps``; needed when β ≠ 0.
        old_logps: ℓ_old (optional), the sampling policy's per-token log-probs, for the ratio
            form of the policy term; like ``logps``.

    Returns:
        The loss, a scalar to minimise, in the dtype of ``logps`` (float32 arithmetic for
        16-bit inputs).

    Raises:
        ValueError: shapes, dtypes or devices that do not match, a mask other than 0/1, an
            unknown option, ``"constant"`` without ``max_completion_length``, β ≠ 0 without
            ``ref_logps``, or a non-finite log-prob or advantage on a real token.
    """
    lp = _common.check_tensor("logps", logps)
    _common.check_float("logps", lp)
    if lp.dim() != 2:
        raise ValueError(
            f"logps must be (N, T): one row of per-token log-probs per completion; got shape "
            f"{tuple(lp.shape)}"
        )
    placement, b = _check_options(
        aggregation, max_completion_length, normaliser, kl, beta, ref_logps, lp.shape[1]
    )
    m = _check_mask(completion_mask, lp.shape)
    if m.device != lp.device:
        m = m.to(lp.device)
    a = _check_advantages(advantages, lp)
    ref = _check_like("ref_logps", ref_logps, lp) if b != 0.0 else None
    old = _check_like("old_logps", old_logps, lp) if old_logps is not None else None
    args = (a, m, aggregation, max_completion_length, normaliser, placement, b, ref, old)
    if _common.transformed(lp):  # torch.compile, torch.func: plain ops, no host-side check
        return _loss(lp, *args)
    return _SequenceReinforce.apply(lp, *args)


def _terms(
    lp: torch.Tensor,
    a: torch.Tensor,
    m: torch.Tensor,
    placement: str,
    beta: float,
    ref: torch.Tensor | None,
    old: torch.Tensor | None,
    grad: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token losses l = −Â ℓ (or −Â r) + β k and, if ``grad``, ∂l/∂ℓ; finite on padding.

    ``lp`` is already 0 on padding and in the accumulator dtype; ``a`` is (N, 1) or (N, T).
    """
    adv = _as(a, lp.dtype)
    if adv.shape[1] != 1:
        adv = torch.where(m, adv, 0.0)  # per-token advantages may hold anything on padding
    ref_c = None if ref is None else torch.where(m, _as(ref, lp.dtype), lp)
    if beta != 0.0 and placement == "reward-to-go":
        adv = adv - beta * kl_reward_to_go(lp, ref_c, m)  # type: ignore[arg-type]
    neg_adv = -adv
    if old is None:
        l_t = lp * neg_adv
        dl = neg_adv if grad else None
    else:
        r = torch.exp(lp - torch.where(m, _as(old, lp.dtype), lp.detach()))
        l_t = r * neg_adv
        dl = l_t.detach() if grad else None
    if beta != 0.0 and placement != "reward-to-go":
        k, k_grad = KL_IN_LOSS[placement]
        l_t = l_t + beta * k(lp, ref_c)
        if grad:
            dl = dl + beta * k_grad(lp.detach(), ref_c)  # type: ignore[operator]
    return l_t, dl


def _as(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x in ``dtype`` (itself when it already is: a call saved on the hot path)."""
    return x if x.dtype == dtype else x.to(dtype)


def _masked(lp: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """ℓ in the accumulator dtype, 0 on padding (where, not a product: padding may hold NaN)."""
    return torch.where(m, _as(lp, _accumulator(lp.dtype)), 0.0)


def _loss(
    lp: torch.Tensor,
    a: torch.Tensor,
    m: torch.Tensor,
    aggregation: str,
    t_max: int | None,
    normaliser: float | None,
    placement: str,
    beta: float,
    ref: torch.Tensor | None,
    old: torch.Tensor | None,
) -> torch.Tensor:
    """The loss Σ w l in plain differentiable ops (torch.func, torch.compile, double backward)."""
    ell = _masked(lp, m)
    l_t, _ = _terms(ell, a, m, placement, beta, ref, old, grad=False)
    w = AGGREGATIONS[aggregation](m.to(ell.dtype), normaliser, t_max)
    return _as((w * l_t).sum(), lp.dtype)


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


class _SequenceReinforce(torch.autograd.Function):
    """loss = Σ w l in the forward; the backward is the closed form ∂loss/∂ℓ = w ⊙ ∂l/∂ℓ."""

    @staticmethod
    def forward(ctx, lp, a, m, aggregation, t_max, normaliser, placement, beta, ref, old):
        ell = _masked(lp, m)
        l_t, dl = _terms(ell, a, m, placement, beta, ref, old, grad=True)
        w = AGGREGATIONS[aggregation](m.to(ell.dtype), normaliser, t_max)
        loss = torch.dot(w.view(-1), l_t.view(-1))
        if not math.isfinite(loss.item()):  # the one host read
            _diagnose(lp, a, m, ref, old)
        ctx.save_for_backward(w.mul_(dl), lp, a, m, ref, old)
        ctx.options = (aggregation, t_max, normaliser, placement, beta)
        return _as(loss, lp.dtype)

    @staticmethod
    def backward(ctx, g):
        g_lp, lp, a, m, ref, old = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: the gradient of the plain graph
            with torch.enable_grad():
                loss = _loss(lp, a, m, *ctx.options, ref, old)
                (out,) = torch.autograd.grad(loss, lp, g, create_graph=True)
        else:
            out = _as(g_lp * _as(g, g_lp.dtype), lp.dtype)
        return out, None, None, None, None, None, None, None, None, None


def _diagnose(
    lp: torch.Tensor,
    a: torch.Tensor,
    m: torch.Tensor,
    ref: torch.Tensor | None,
    old: torch.Tensor | None,
) -> None:
    """Name the non-finite input that made the loss non-finite (or say that it overflowed)."""
    _raise_nonfinite("logps", lp, m)
    _raise_nonfinite("advantages", a, m.any(-1, keepdim=True) if a.shape[1] == 1 else m)
    for name, x in (("ref_logps", ref), ("old_logps", old)):
        if x is not None:
            _raise_nonfinite(name, x, m)
    raise ValueError(
        "the loss overflowed to ±inf with finite inputs (|A|, |ℓ − ℓ_ref| or the ratio "
        "exp(ℓ − ℓ_old) too large for the dtype); check the scale of the inputs"
    )
