r"""Sequence REINFORCE losses for language models: every option a row of one table.

The options (baselines, scales, aggregations, KL placements) are the rows of
:mod:`eligibility.torch.options`: each row's pure function, formula, framework names and the
verdict ``eligibility check --sequence`` gives it live there, once; this module checks the
inputs and composes the rows into a loss. The group advantages are in
:mod:`eligibility.torch.advantages` (and re-exported here).

Notation (``docs/torch-losses.md``): G completions oᵢ per prompt, group-major, N sequences in
all; ℓᵢ,ₜ = ln π_θ(oᵢ,ₜ | q, oᵢ,<ₜ) the per-token log-probabilities, mᵢ,ₜ ∈ {0, 1} the completion
mask, Rᵢ the reward, Aᵢ the advantage. Every aggregation is linear in the per-token losses l:
loss = Σᵢ,ₜ wᵢ,ₜ lᵢ,ₜ with the row's weights w (0 on padding). **The defaults are the unbiased
set**: the RLOO baseline, no scale, ``aggregation="sequence-sum"``, ``kl="reward-to-go"``.

The loss is one plain differentiable formula (autograd differentiates it; a hand-written
backward was measured slower, see ``docs/torch-losses.md``), checked with one host read: a
non-finite input on a real token makes the loss non-finite, and only then are the inputs
searched for the culprit.
"""

from __future__ import annotations

import math

import torch

from eligibility.torch import _common, options
from eligibility.torch.advantages import (  # noqa: F401  (re-exported: the sequence API)
    BASELINES,
    SCALES,
    _check_mask,
    _raise_nonfinite,
    group_advantages,
    whiten_advantages,
)
from eligibility.torch.formulas import (  # noqa: F401  (re-exported: the formulas' one home)
    kl_k1,
    kl_k2,
    kl_k3,
    kl_k3_clamped,
    kl_k3_ratio,
    kl_reward_to_go,
    kl_sequence,
)

AGGREGATIONS = options.names("aggregation")
"""The aggregations ``sequence_reinforce_loss`` takes (the table's rows)."""
KL_PLACEMENTS = tuple(o.name for o in options.rows("kl").values() if o.placement != "reward")
"""The KL placements ``sequence_reinforce_loss`` takes (``sequence-reward`` acts on the rewards,
before :func:`group_advantages`: R̃ = R − β :func:`kl_sequence`)."""

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


_OLD_KL_NONE = (
    "kl=None meant the reward-to-go before; the word 'none' now means no KL term: pass "
    "kl='reward-to-go' (the exact gradient, the default) or kl='none'"
)


def _check_options(
    aggregation: str,
    max_completion_length: int | None,
    normaliser: float | None,
    kl: str,
    beta: float,
    ref_logps: object,
    width: int,
) -> tuple[options.Option, options.Option, float]:
    agg = options.row("aggregation", aggregation)
    if max_completion_length is not None:
        if isinstance(max_completion_length, bool) or not isinstance(max_completion_length, int):
            raise ValueError(f"max_completion_length must be an int; got {max_completion_length!r}")
        if max_completion_length < max(width, 1):
            raise ValueError(
                f"max_completion_length = {max_completion_length} is less than the width of "
                f"logps ({width}): pass T_max, the generation limit, at least the padded width"
            )
    elif aggregation in ("constant", "constant-sum"):
        raise ValueError(
            f"aggregation={aggregation!r} divides by max_completion_length: pass it (the "
            "generation limit T_max)"
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
    if kl is None:
        raise ValueError(_OLD_KL_NONE)
    if kl not in KL_PLACEMENTS:
        hint = (
            " (it acts on the rewards: R − β kl_sequence(...))" if kl == "sequence-reward" else ""
        )
        raise ValueError(f"kl must be one of {KL_PLACEMENTS}; got {kl!r}{hint}")
    placement = options.row("kl", kl)
    b = _common.check_coef(beta)
    if kl == "none":
        b = 0.0  # no KL term: β is not used
    elif b != 0.0 and ref_logps is None:
        raise ValueError("beta > 0 needs ref_logps, the reference policy's per-token log-probs")
    return agg, placement, b


def sequence_reinforce_loss(
    logps: torch.Tensor,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    aggregation: str = "sequence-sum",
    max_completion_length: int | None = None,
    normaliser: float | None = None,
    kl: str = "reward-to-go",
    beta: float = 0.0,
    ref_logps: torch.Tensor | None = None,
    old_logps: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""loss = Σᵢ,ₜ wᵢ,ₜ lᵢ,ₜ, lᵢ,ₜ = −Âᵢ,ₜ ℓᵢ,ₜ + β kᵢ,ₜ: the REINFORCE loss of whole completions.

    w are the weights of the ``aggregation`` row, 0 on padding. Per real token (mᵢ,ₜ = 1;
    padding contributes 0 and is never looked at):

    * the policy term −Âᵢ,ₜ ℓᵢ,ₜ, Â the advantage (per sequence, or per token), minus β Kᵢ,ₜ
      when ``kl`` is ``"reward-to-go"`` (:func:`kl_reward_to_go`); with ``old_logps`` it is
      written −Â rᵢ,ₜ, r = exp(ℓ − ℓ_old), as TRL and verl write it (same gradient where
      ℓ_old = ℓ, as on-policy; the value is then −Â, not −Â ℓ);
    * the KL term β kᵢ,ₜ when ``kl`` is a row placed in the loss (``"k1"``, ``"k2"``,
      ``"k3"``, ``"k3-clamped"``, ``"k3-ratio"``), through the same aggregation (as TRL and
      verl); ``"none"``: no KL term (β is not used). The rows, their formulas and verdicts:
      :mod:`eligibility.torch.options`.

    Args:
        logps: ℓ, floating (N, T): per-token log π_θ of each sampled completion token,
            differentiable. Values on padding are never read.
        advantages: A, floating, (N,) (per sequence, e.g. :func:`group_advantages`) or (N, T)
            (per token, e.g. REINFORCE++ returns-to-go); constants (detached).
        completion_mask: m, bool or 0/1 numbers, (N, T): 1 on real completion tokens (EOS
            included), 0 on padding.
        aggregation: an aggregation row's name.
        max_completion_length: T_max, the generation limit (needed by ``"constant"`` and
            ``"constant-sum"``; at least T).
        normaliser: M for ``"token-mean"`` (default: this call's token count), F for
            ``"token-sum-norm"`` (default: T). Pass the count of the whole optimiser step when
            accumulating micro-batches.
        kl: a KL row's name: ``"reward-to-go"`` (default), ``"none"``, ``"k1"``, ``"k2"``,
            ``"k3"``, ``"k3-clamped"``, ``"k3-ratio"``. None is refused (it meant
            ``"reward-to-go"`` before ``"none"`` meant no KL).
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
    agg, placement, b = _check_options(
        aggregation, max_completion_length, normaliser, kl, beta, ref_logps, lp.shape[1]
    )
    if aggregation == "micro-batch-token-mean" and lp.shape[0] % 2:
        raise ValueError(f"'micro-batch-token-mean' splits N in two halves; N = {lp.shape[0]}")
    m = _check_mask(completion_mask, lp.shape)
    if m.device != lp.device:
        m = m.to(lp.device)
    a = _check_advantages(advantages, lp)
    ref = _check_like("ref_logps", ref_logps, lp) if b != 0.0 else None
    old = _check_like("old_logps", old_logps, lp) if old_logps is not None else None
    loss = _loss(lp, a, m, agg, placement, b, max_completion_length, normaliser, ref, old)
    if not _common.transformed(lp) and not math.isfinite(loss.item()):  # the one host read
        _diagnose(lp, a, m, ref, old)
    return loss


def _loss(
    lp: torch.Tensor,
    a: torch.Tensor,
    m: torch.Tensor,
    agg: options.Option,
    placement: options.Option,
    beta: float,
    t_max: int | None,
    normaliser: float | None,
    ref: torch.Tensor | None,
    old: torch.Tensor | None,
) -> torch.Tensor:
    """Σ w l in plain differentiable ops (autograd, torch.func, torch.compile, double backward).

    The policy term is linear in ℓ (score form): Σ w (−Â) ℓ = ⟨c, ℓ⟩ with c = −w ⊙ Â a constant,
    one dot product whose backward is one product: fewer N × T temporaries than Σ w l
    differentiated term by term.
    """
    ell = _masked(lp, m)
    w = agg.fn(m.to(ell.dtype), lp.shape[1], t_max, normaliser)  # type: ignore[misc]
    adv = _as(a, ell.dtype)
    if adv.shape[1] != 1:
        adv = torch.where(m, adv, 0.0)  # per-token advantages may hold anything on padding
    ref_c = None if ref is None else torch.where(m, _as(ref, ell.dtype), ell.detach())
    if beta != 0.0 and placement.placement == "advantage":
        adv = adv - beta * placement.fn(ell, ref_c, m)  # type: ignore[misc]
    coef = w * -adv  # ∂(policy term)/∂ℓ (or /∂r in the ratio form): a constant
    if old is None:
        loss = torch.dot(coef.reshape(-1), ell.reshape(-1))
    else:
        r = torch.exp(ell - torch.where(m, _as(old, ell.dtype), ell.detach()))
        loss = (coef * r).sum()
    if beta != 0.0 and placement.placement == "loss":
        loss = loss + beta * (w * placement.fn(ell, ref_c)).sum()  # type: ignore[misc]
    return _as(loss, lp.dtype)


def _as(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x in ``dtype`` (itself when it already is: a call saved on the hot path)."""
    return x if x.dtype == dtype else x.to(dtype)


def _masked(lp: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """ℓ in the accumulator dtype, 0 on padding (where, not a product: padding may hold NaN)."""
    return torch.where(m, _as(lp, _accumulator(lp.dtype)), 0.0)


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


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
