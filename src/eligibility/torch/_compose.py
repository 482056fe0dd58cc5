r"""The one composer of the sequence losses, and the one check of what their rows need.

Every sequence loss is four pieces, composed here once:

    loss = Σᵢ,ₜ wᵢ,ₜ (w̃ᵢ,ₜ fᵢ,ₜ(Â) + β kᵢ,ₜ),   Âᵢ,ₜ = Aᵢ − β Kᵢ,ₜ (KL as a reward-to-go)

* the **advantage placement**: Â per sequence (N, 1) or per token (N, T), 0 on padding, less
  β K when the KL row is placed on the advantage (``reward-to-go``);
* the **policy term** f(Â): the score form −Â ℓ (on-policy), the ratio form −Â r, or an
  off-policy surrogate f(ρ, Â) (:mod:`eligibility.torch.offpolicy`);
* the **sampler weight** w̃ = π_old/μ (off-policy, truncated or masked; 1 otherwise);
* the **KL placement** β k through the same aggregation weights w, for a KL row placed in the
  loss (``k1``, ``k2``, ``k3``, …); the reward placement (R̃ = R − β D) acts before the
  advantages: :func:`~eligibility.torch.advantages.kl_penalised_rewards`.

The rows (their functions, what each needs) are :mod:`eligibility.torch.options`; the public
losses, :func:`~eligibility.torch.sequence.sequence_reinforce_loss` and
:func:`~eligibility.torch.offpolicy.off_policy_loss`, check their inputs and call
:func:`compose`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from eligibility.torch import _common, options

KL_PLACEMENTS = tuple(o.name for o in options.rows("kl").values() if o.placement != "reward")
"""The KL rows a loss takes (``sequence-reward`` acts on the rewards, before the advantages:
:func:`~eligibility.torch.advantages.kl_penalised_rewards`)."""

_OLD_KL_NONE = (
    "kl=None meant the reward-to-go before; the word 'none' now means no KL term: pass "
    "kl='reward-to-go' (the exact gradient, the default) or kl='none'"
)


def check_rows(
    aggregation: str,
    kl: str,
    beta: float,
    *,
    max_completion_length: int | None,
    normaliser: float | None,
    ref_logps: object,
    shape: tuple[int, ...],
) -> tuple[options.Option, options.Option, float]:
    """The aggregation and KL rows, and β (0 when unused), once every row's needs are met.

    The one check of the rows' declarations (:data:`~eligibility.torch.options.NEEDS`): every
    loss that takes an aggregation and a KL calls it, so a missing need is the same ValueError,
    naming the argument, from each of them.
    """
    agg = options.row("aggregation", aggregation)
    if kl is None:
        raise ValueError(_OLD_KL_NONE)
    if kl not in KL_PLACEMENTS:
        hint = (
            " (it acts on the rewards: kl_penalised_rewards(...))"
            if kl == "sequence-reward"
            else ""
        )
        raise ValueError(f"kl must be one of {KL_PLACEMENTS}; got {kl!r}{hint}")
    kl_row = options.row("kl", kl)
    b = 0.0 if kl_row.fn is None else _common.check_coef(beta)  # no KL term: β not used
    met = {
        "max_completion_length": max_completion_length is not None,
        "even_rows": shape[0] % 2 == 0,
        "ref_logps": ref_logps is not None or b == 0.0,
    }
    for row in (agg, kl_row):
        for need in row.needs:
            if not met[need]:
                raise ValueError(f"{row.kind}={row.name!r} needs {options.NEEDS[need]}")
    if max_completion_length is not None:
        t_max = max_completion_length
        if isinstance(t_max, bool) or not isinstance(t_max, int):
            raise ValueError(f"max_completion_length must be an int; got {t_max!r}")
        if t_max < max(shape[1], 1):
            raise ValueError(
                f"max_completion_length = {t_max} is less than the width of logps "
                f"({shape[1]}): pass T_max, the generation limit, at least the padded width"
            )
    if normaliser is not None:
        nv = float(normaliser)
        if not (nv > 0 and nv != float("inf")):
            raise ValueError(f"normaliser must be a positive finite number; got {normaliser!r}")
        if "normaliser" not in agg.takes:
            readers = [o.name for o in options.rows("aggregation").values() if o.takes]
            raise ValueError(
                f"normaliser is the divisor of {readers} only; aggregation {aggregation!r} has "
                "none of its own"
            )
    return agg, kl_row, b


def check_like(name: str, x: object, lp: torch.Tensor) -> torch.Tensor:
    """``x``, a tensor of the shape, dtype and device of ``lp`` (else a ValueError naming it)."""
    t = _common.check_tensor(name, x)
    if t.shape != lp.shape or t.dtype != lp.dtype or t.device != lp.device:
        raise ValueError(
            f"{name} must have the shape, dtype and device of logps {tuple(lp.shape)}, "
            f"{lp.dtype}, {lp.device}; got {tuple(t.shape)}, {t.dtype}, {t.device}"
        )
    return t


Policy = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""f(ℓ, Â) → the per-token policy term (N, T), ℓ masked in the accumulator dtype."""


def compose(
    lp: torch.Tensor,
    a: torch.Tensor,
    m: torch.Tensor,
    agg: options.Option,
    kl: options.Option,
    beta: float,
    ref: torch.Tensor | None,
    *,
    t_max: int | None,
    normaliser: float | None,
    policy: Policy | None = None,
    sampler: torch.Tensor | None = None,
) -> torch.Tensor:
    """Σ w (w̃ f(Â) + β k) in plain differentiable ops (autograd, torch.func, torch.compile).

    ``policy`` None is the score form Σ w (−Â) ℓ = ⟨c, ℓ⟩, c = −w ⊙ Â a constant: one dot
    product whose backward is one product (fewer N × T temporaries than Σ w l differentiated
    term by term). ``sampler``: w̃, (N, 1) or (N, T), or None (1). Inputs checked by the caller.
    """
    ell = torch.where(m, _as(lp, _accumulator(lp.dtype)), 0.0)  # where: padding may hold NaN
    w = agg.fn(m.to(ell.dtype), lp.shape[1], t_max, normaliser)  # type: ignore[misc]
    adv = _as(a, ell.dtype)
    if adv.shape[1] != 1:
        adv = torch.where(m, adv, 0.0)  # per-token advantages may hold anything on padding
    ref_c = None if ref is None else torch.where(m, _as(ref, ell.dtype), ell.detach())
    if beta != 0.0 and kl.placement == "advantage":
        adv = adv - beta * kl.fn(ell, ref_c, m)  # type: ignore[misc]
    if policy is None:
        loss = torch.dot((w * -adv).reshape(-1), ell.reshape(-1))
    else:
        l_t = policy(ell, adv)
        if sampler is not None:
            l_t = l_t * _as(sampler, ell.dtype)
        loss = (w * torch.where(m, l_t, 0.0)).sum()
    if beta != 0.0 and kl.placement == "loss":
        loss = loss + beta * (w * kl.fn(ell, ref_c)).sum()  # type: ignore[misc]
    return _as(loss, lp.dtype)


def _as(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x in ``dtype`` (itself when it already is: a call saved on the hot path)."""
    return x if x.dtype == dtype else x.to(dtype)


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
