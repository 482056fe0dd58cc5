r"""REINFORCE loss for Bernoulli-logistic units, backward = the eligibility y − σ(z).

Williams' original REINFORCE unit (1992, eq. 9): y ∈ {0, 1} with P(y = 1) = σ(z). Per step

    ℓ = −A ln P(y) − β H,   ln P(y) = −softplus((1 − 2y) z),
    H = p softplus(−z) + (1 − p) softplus(z),   p = σ(z),
    ∂ℓ/∂z = −A (y − σ(z)) + β z σ(z) (1 − σ(z)),

the eligibility being :func:`eligibility.distributions.bernoulli.score_logits` and ∂H/∂z being
:func:`~eligibility.distributions.bernoulli.entropy_grad_logits`; this module calls those core
kernels (and ``log_prob_logits``, ``entropy_logits``) on the tensors directly. Everything is
elementwise, so the gain over autograd is small: the point is one loss with the same reduction,
mask and entropy conventions as :func:`eligibility.torch.reinforce_loss`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from eligibility._array import first_index
from eligibility.distributions import bernoulli as core
from eligibility.torch import _common

_NONFINITE = (
    "logits of step {step} give a non-finite ln P(y): "
    "pass finite logits (±inf make the other outcome impossible)"
)


def _steps(
    z: Tensor, y: Tensor, adv: Tensor, valid: Tensor | None, beta: float, k: int, validate: bool
) -> Tensor:
    """ℓ = −A ln P(y) − β H per step (Σ over the event axes), 0 on padding."""
    lp = core.log_prob_logits(z, y)
    h = core.entropy_logits(z) if beta != 0.0 else None
    return _common.reinforce_steps(lp, h, adv, valid, beta, k, validate, _NONFINITE)


class _BernoulliReinforce(torch.autograd.Function):
    """Autograd node: forward ℓ (reduced), backward −A (y − σ(z)) + β z σ(z)(1 − σ(z))."""

    @staticmethod
    def forward(ctx, z, y, adv, valid, w, beta, reduction, event_dims, validate):
        ell = _steps(z, y, adv, valid, beta, event_dims, validate)
        ctx.beta, ctx.event_dims = beta, event_dims
        ctx.save_for_backward(z, y, adv, w, valid)
        return _common.reduce(ell, w, reduction)

    @staticmethod
    def backward(ctx, g):
        # Plain differentiable ops: under create_graph=True they build the second derivative.
        z, y, adv, w, valid = ctx.saved_tensors
        k = ctx.event_dims
        s = _common.expand_event(g * w, k)
        grad = -(s * _common.expand_event(adv, k)) * core.score_logits(z, y)
        if ctx.beta != 0.0:
            grad = grad - ctx.beta * s * core.entropy_grad_logits(z)
        if valid is not None:
            grad = _common.zero_padding(grad, _common.expand_event(valid, k))
        return grad, None, None, None, None, None, None, None, None


def bernoulli_reinforce_loss(
    logits: torch.Tensor,
    actions: torch.Tensor,
    advantages: torch.Tensor | float,
    *,
    reduction: str = "mean",
    mask: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    event_dims: int = 0,
    validate: bool = True,
) -> torch.Tensor:
    r"""REINFORCE loss ℓ = −A ln P(y) − β H for Bernoulli units P(y = 1) = σ(z).

    Backward in closed form: ∂ℓ/∂z = −A (y − σ(z)) + β z σ(z)(1 − σ(z)) per unit.

    Args:
        logits: z, shape (*L, *E): leading step shape L, then ``event_dims`` axes E of units
            that form one action (their log-probabilities add, ln P(y) = Σₑ ln P(yₑ)).
        actions: y, same shape as logits, 0/1 (bool, integer or floating).
        advantages: A, broadcastable to L; constants (detached, no gradient).
        reduction: "mean" (over the real steps of L; 0 if none), "sum", or "none" (shape L).
        mask: optional bool tensor broadcastable to L: True for a real step, False for padding.
        entropy_coef: β, a python float; the loss subtracts β H per step (H summed over E).
        event_dims: how many trailing axes of logits make up one action (default 0: every unit
            is its own step with its own advantage).
        validate: check the values (0/1 actions, finite ln P, finite advantages), one host sync
            each; False skips them (see :func:`eligibility.torch.reinforce_loss`).

    Returns:
        The loss: a scalar for "mean"/"sum", shape L for "none"; in the logits' dtype.

    Raises:
        ValueError: bad shapes or dtypes, actions other than 0/1, or non-finite ln P(y) or
            advantages on a real step.

    Second derivatives are exact; under torch.compile and torch.func it is plain ops.
    """
    _common.check_reduction(reduction)
    beta = _common.check_coef(entropy_coef)
    z = _common.float_tensor("logits", logits)
    k = _common.check_event_dims(event_dims, z.dim(), "logits")
    y = _common.check_tensor("actions", actions)
    if y.shape != z.shape:
        raise ValueError(
            f"actions of shape {tuple(y.shape)} must have the shape of logits {tuple(z.shape)}"
        )
    y = y.to(device=z.device, dtype=z.dtype)
    lead = z.shape[: z.dim() - k]
    adv = _common.advantages_like(advantages, lead, z)
    valid = _common.valid_mask(mask, lead, z.device)
    w = _common.element_weights(valid, lead, reduction, z)
    if _common.transformed(z):
        return _common.reduce(_steps(z, y, adv, valid, beta, k, False), w, reduction)
    if validate:
        _common.check_advantages(adv, valid)
    not01 = (y != 0) & (y != 1)
    if valid is not None:
        not01 &= _common.expand_event(valid, k)
    if validate and bool(not01.any()):
        raise ValueError(
            f"actions{list(first_index(not01))} = {float(y[first_index(not01)])} is not 0 or 1: "
            "a Bernoulli action is an outcome y ∈ {0, 1}"
        )
    return _BernoulliReinforce.apply(z, y, adv, valid, w, beta, reduction, k, validate)
