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
from eligibility.torch._compose import (  # noqa: F401  (KL_PLACEMENTS: re-exported)
    KL_PLACEMENTS,
    Policy,
    check_like,
    check_rows,
    compose,
)
from eligibility.torch.advantages import (  # noqa: F401  (re-exported: the sequence API)
    BASELINES,
    SCALES,
    group_advantages,
    kl_penalised_rewards,
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

# ----------------------------------------------------------------------------------------------
# The loss
# ----------------------------------------------------------------------------------------------


def _check_advantages(advantages: object, lp: torch.Tensor) -> torch.Tensor:
    a = _common.float_tensor("advantages", advantages)
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


def _check_beside(
    lp: torch.Tensor,
    completion_mask: object,
    advantages: object,
    beta: float,
    ref_logps: object,
    old_logps: object,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The tensors beside the checked ``lp``: (m, A, ℓ_ref or None, ℓ_old or None).

    The mask on ``lp``'s device; ℓ_ref only where β ≠ 0, ℓ_old only where given.

    Raises:
        ValueError: a tensor that does not match ``lp`` (as :func:`sequence_reinforce_loss`).
    """
    m = _common.check_mask(completion_mask, lp.shape)
    if m.device != lp.device:
        m = m.to(lp.device)
    a = _check_advantages(advantages, lp)
    ref = check_like("ref_logps", ref_logps, lp) if beta != 0.0 else None
    old = check_like("old_logps", old_logps, lp) if old_logps is not None else None
    return m, a, ref, old


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
      verl); ``"none"``: no KL term (β is not used); ``"sequence-reward"`` acts on the
      rewards (:func:`kl_penalised_rewards`, then ``kl="none"``). The rows, their formulas and
      verdicts: :mod:`eligibility.torch.options` (composed as ``off_policy_loss``'s).

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
        ValueError: mismatched shapes, dtypes or devices, a mask other than 0/1, an unknown
            option, a row's need unmet (its ``needs``, as ``off_policy_loss`` says it), or a
            non-finite log-prob or advantage on a real token.
    """
    lp = _common.float_tensor(
        "logps", logps, 2, "(N, T): one row of per-token log-probs per completion"
    )
    t_max, n_t = max_completion_length, tuple(lp.shape)
    agg, kl_row, b = check_rows(
        aggregation,
        kl,
        beta,
        max_completion_length=t_max,
        normaliser=normaliser,
        ref_logps=ref_logps,
        shape=n_t,
    )
    m, a, ref, old = _check_beside(lp, completion_mask, advantages, b, ref_logps, old_logps)
    policy = None if old is None else _ratio_form(old, m)
    loss = compose(lp, a, m, agg, kl_row, b, ref, t_max=t_max, normaliser=normaliser, policy=policy)
    if not _common.transformed(lp) and not math.isfinite(loss.item()):  # the one host read
        _diagnose(lp, a, m, ref, old)
    return loss


def _ratio_form(old: torch.Tensor, m: torch.Tensor) -> Policy:
    """f(ℓ, Â) = −Â r, r = exp(ℓ − ℓ_old): the policy term as TRL and verl write it."""

    def f(ell: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
        return -adv * torch.exp(ell - torch.where(m, old.to(ell.dtype), ell.detach()))

    return f


def _diagnose(
    lp: torch.Tensor,
    a: torch.Tensor,
    m: torch.Tensor,
    ref: torch.Tensor | None,
    old: torch.Tensor | None,
) -> None:
    """Name the non-finite input that made the loss non-finite (or say that it overflowed)."""
    _common.raise_nonfinite("logps", lp, m)
    _common.raise_nonfinite("advantages", a, m.any(-1, keepdim=True) if a.shape[1] == 1 else m)
    for name, x in (("ref_logps", ref), ("old_logps", old)):
        if x is not None:
            _common.raise_nonfinite(name, x, m)
    raise ValueError(
        "the loss overflowed to ±inf with finite inputs (|A|, |ℓ − ℓ_ref| or the ratio "
        "exp(ℓ − ℓ_old) too large for the dtype); check the scale of the inputs"
    )
