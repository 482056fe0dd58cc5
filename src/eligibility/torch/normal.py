r"""REINFORCE loss for Gaussian units, backward = the eligibilities e_μ, e_σ (or e_{ln σ}).

Williams (1992, §6): y ~ N(μ, σ²). Per step

    ℓ = −A ln N(y; μ, σ) − β H,   H = ½ + ½ ln 2π + ln σ,
    ∂ℓ/∂μ = −A (y − μ)/σ²,
    ∂ℓ/∂σ = −A ((y − μ)² − σ²)/σ³ − β/σ,
    ∂ℓ/∂(ln σ) = −A ((y − μ)²/σ² − 1) − β,

the eligibilities being :func:`eligibility.distributions.normal.score_loc`, ``score_scale`` and
``score_log_scale``, and ∂H/∂σ = 1/σ being ``entropy_grad_scale``; this module calls those core
kernels on the tensors directly. The actions y are samples, not reparameterised: no gradient
reaches them (that would be a pathwise estimator, not REINFORCE).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from eligibility.distributions import normal as core
from eligibility.torch import _common

_NONFINITE = (
    "step {step} has a non-finite ln N(y; μ, σ): loc, actions and scale must be finite, "
    "with scale > 0"
)


def _steps(
    mu: Tensor,
    sigma: Tensor,
    y: Tensor,
    shape: torch.Size,
    adv: Tensor,
    valid: Tensor | None,
    beta: float,
    k: int,
    validate: bool,
) -> Tensor:
    """ℓ = −A ln N(y; μ, σ) − β H per step (Σ over the event axes), 0 on padding."""
    lp = core.log_prob(mu, sigma, y).expand(shape)
    h = core.entropy(sigma).expand(shape) if beta != 0.0 else None
    return _common.reinforce_steps(lp, h, adv, valid, beta, k, validate, _NONFINITE)


class _NormalReinforce(torch.autograd.Function):
    """Autograd node: forward ℓ (reduced), backward −A e − β ∂H, per parameter, summed to shape."""

    @staticmethod
    def forward(ctx, mu, sig, log_param, y, adv, valid, w, beta, reduction, event_dims, validate):
        # sig is σ itself, or ln σ when log_param is True.
        sigma = sig.exp() if log_param else sig
        shape = torch.broadcast_shapes(mu.shape, sigma.shape, y.shape)
        ell = _steps(mu, sigma, y, shape, adv, valid, beta, event_dims, validate)
        ctx.beta, ctx.event_dims, ctx.log_param, ctx.shape = beta, event_dims, log_param, shape
        ctx.save_for_backward(mu, sig, y, adv, w, valid)
        return _common.reduce(ell, w, reduction)

    @staticmethod
    def backward(ctx, g):
        # Plain differentiable ops: under create_graph=True they build the second derivative.
        mu, sig, y, adv, w, valid = ctx.saved_tensors
        k, beta = ctx.event_dims, ctx.beta
        sigma = sig.exp() if ctx.log_param else sig
        s = _common.expand_event(g * w, k)
        c = s * _common.expand_event(adv, k)
        keep = None if valid is None else _common.expand_event(valid, k)
        grad_mu = grad_sig = None
        if ctx.needs_input_grad[0]:
            gm = -c * core.score_loc(mu, sigma, y)
            grad_mu = _common.sum_to(_common.zero_padding(gm.expand(ctx.shape), keep), mu.shape)
        if ctx.needs_input_grad[1]:
            if ctx.log_param:
                # ∂H/∂(ln σ) = σ ∂H/∂σ = 1.
                gs = -c * core.score_log_scale(mu, sigma, y) - beta * s
            else:
                gs = -c * core.score_scale(mu, sigma, y) - beta * s * core.entropy_grad_scale(sigma)
            grad_sig = _common.sum_to(_common.zero_padding(gs.expand(ctx.shape), keep), sig.shape)
        return grad_mu, grad_sig, None, None, None, None, None, None, None, None, None


def _checked_inputs(
    loc: torch.Tensor, actions: torch.Tensor, scale: torch.Tensor | None, log_scale: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Size]:
    """μ, the scale (σ or ln σ), the actions and their common shape, checked."""
    name, sig = ("scale", scale) if scale is not None else ("log_scale", log_scale)
    mu = _common.check_tensor("loc", loc)
    sig = _common.check_tensor(name, sig)
    y = _common.check_tensor("actions", actions)
    for n, x in (("loc", mu), (name, sig), ("actions", y)):
        _common.check_float(n, x)
    if sig.dtype != mu.dtype or sig.device != mu.device:
        raise ValueError(f"loc and {name} must share dtype and device")
    y = y.detach().to(device=mu.device, dtype=mu.dtype)
    try:
        shape = torch.broadcast_shapes(mu.shape, sig.shape, y.shape)
    except RuntimeError as err:
        raise ValueError(
            f"loc {tuple(mu.shape)}, {name} {tuple(sig.shape)} and actions {tuple(y.shape)} "
            "do not broadcast together"
        ) from err
    if shape != y.shape:
        raise ValueError(
            f"loc and {name} must broadcast to the actions' shape {tuple(y.shape)}; "
            f"together they give {tuple(shape)}"
        )
    return mu, sig, y, shape


def normal_reinforce_loss(
    loc: torch.Tensor,
    actions: torch.Tensor,
    advantages: torch.Tensor | float,
    *,
    scale: torch.Tensor | None = None,
    log_scale: torch.Tensor | None = None,
    reduction: str = "mean",
    mask: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    event_dims: int = 0,
    validate: bool = True,
) -> torch.Tensor:
    r"""REINFORCE loss ℓ = −A ln N(y; μ, σ) − β H for Gaussian units, backward in closed form.

    ∂ℓ/∂μ = −A (y − μ)/σ², and either ∂ℓ/∂σ = −A ((y − μ)² − σ²)/σ³ − β/σ (``scale`` σ given)
    or ∂ℓ/∂(ln σ) = −A ((y − μ)²/σ² − 1) − β (``log_scale`` ln σ given). Pass exactly one of
    ``scale`` and ``log_scale``. ``loc`` and the scale broadcast against the actions (a
    state-independent ``log_scale`` of shape (D,) is fine); their gradients are summed back to
    their own shapes.

    Args:
        loc: μ, broadcastable to the actions' shape.
        actions: y, shape (*L, *E): leading step shape L, then ``event_dims`` axes E of
            components of one action (a diagonal Gaussian: ln N sums over E). Constants.
        advantages: A, broadcastable to L; constants (detached, no gradient).
        scale: σ > 0, broadcastable to the actions' shape.
        log_scale: ln σ, broadcastable to the actions' shape.
        reduction: "mean" (over the real steps of L; 0 if none), "sum", or "none" (shape L).
        mask: optional bool tensor broadcastable to L: True for a real step, False for padding.
        entropy_coef: β, a python float; the loss subtracts β H per step (H summed over E).
        event_dims: how many trailing axes of the actions make up one action (default 0).
        validate: check the values (finite ln N, finite advantages), one host sync each; False
            skips them (see :func:`eligibility.torch.reinforce_loss`).

    Returns:
        The loss: a scalar for "mean"/"sum", shape L for "none"; in the dtype of ``loc``.

    Raises:
        ValueError: both or neither of scale/log_scale; bad shapes or dtypes; a non-finite
            ln N or advantage on a real step (scale ≤ 0, or a NaN/inf input).

    Second derivatives are exact; under torch.compile and torch.func it is plain ops.
    """
    _common.check_reduction(reduction)
    beta = _common.check_coef(entropy_coef)
    if (scale is None) == (log_scale is None):
        raise ValueError("pass exactly one of scale (σ) and log_scale (ln σ)")
    mu, sig, y, shape = _checked_inputs(loc, actions, scale, log_scale)
    k = _common.check_event_dims(event_dims, y.dim(), "actions")
    lead = y.shape[: y.dim() - k]
    adv = _common.advantages_like(advantages, lead, mu)
    valid = _common.valid_mask(mask, lead, mu.device)
    w = _common.element_weights(valid, lead, reduction, mu)
    log_param = log_scale is not None
    if _common.transformed(mu) or _common.transformed(sig):
        sigma = sig.exp() if log_param else sig
        ell = _steps(mu, sigma, y, shape, adv, valid, beta, k, False)
        return _common.reduce(ell, w, reduction)
    if validate:
        _common.check_advantages(adv, valid)
    return _NormalReinforce.apply(
        mu, sig, log_param, y, adv, valid, w, beta, reduction, k, validate
    )
