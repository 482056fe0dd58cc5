r"""The general path of the categorical REINFORCE loss, and the plain one for traced code.

The general node serves every call: a padding mask, the entropy term, ``validate=False``, and
the calls the native and lean paths decline, whose bad inputs it diagnoses and names. The plain
loss writes the same loss in differentiable ops for ``torch.compile`` and ``torch.func``.
"""

from __future__ import annotations

from typing import Any

import torch

from eligibility._array import first_index
from eligibility.torch import _categorical_buffer as buffer
from eligibility.torch import _common


def log_pi(
    z: torch.Tensor,
    a: torch.Tensor,
    valid: torch.Tensor | None,
    adv: torch.Tensor,
    validate: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(π as a fresh buffer, ln π(a), π_a, the rows where π_a > ½ or None), checked.

    ln π(a) is read off the buffer as ln(π_a): one softmax pass serves both the loss and
    the backward, and π_a carries the same relative rounding as z_a − logsumexp(z). Only where
    π_a falls below the smallest normal float (ln π(a) ≲ −87 in float32), where that rounding
    would grow, are the few rows redone as z_a − logsumexp(z).

    With ``validate``, one host sync checks everything: an action outside 0…V−1, an all −∞ row
    (no category left), a NaN or +∞ logit, a non-finite advantage, and (in the rare slow path)
    a taken action of probability 0; it also learns whether any π_a > ½ (the rows whose
    backward needs 1 − π_a without cancellation). Padding steps are exempt. Without
    ``validate`` nothing is read back: ln π(a) = z_a − logsumexp(z) wherever π_a underflows
    (a second pass over z), and every row takes the cancellation-free path.
    """
    v = z.shape[-1]
    out_of_range = (a < 0) | (a >= v)
    if valid is not None:
        out_of_range &= valid
    a_safe = a.masked_fill(out_of_range if valid is None else out_of_range | ~valid, 0)
    pi = buffer.softmax(z)  # the one B×V buffer
    pi_a = pi.gather(-1, a_safe.unsqueeze(-1)).squeeze(-1)
    small = pi_a < torch.finfo(pi.dtype).tiny
    if not validate:
        lse = torch.logsumexp(z, -1)
        exact = z.gather(-1, a_safe.unsqueeze(-1)).squeeze(-1) - lse
        return pi, torch.where(small, exact, pi_a.log()), pi_a, None
    bad = out_of_range | torch.isnan(pi_a) | ~torch.isfinite(adv)
    peaked = pi_a > 0.5
    if valid is not None:
        bad &= valid
        small &= valid
        peaked &= valid
    any_bad, any_small, any_peaked = torch.stack((bad.any(), small.any(), peaked.any())).tolist()
    if any_bad:
        _common.check_advantages(adv, valid)
        raise_bad(z, a, bad, out_of_range)
    logp_a = pi_a.log()
    if any_small:
        rows = small.nonzero(as_tuple=True)
        z_r = z[rows]
        logp_r = z_r.gather(-1, a[rows].unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z_r, -1)
        if not bool(torch.isfinite(logp_r).all()):
            raise_bad(z, a, small & ~torch.isfinite(logp_a.index_put(rows, logp_r)), out_of_range)
        logp_a = logp_a.index_put(rows, logp_r)
    return pi, logp_a, pi_a, (peaked if any_peaked else None)


def raise_bad(z: torch.Tensor, a: torch.Tensor, bad: torch.Tensor, oor: torch.Tensor) -> None:
    """Name the first step that has no valid ln π(a), and say how to fix it."""
    i = first_index(bad)
    idx = "[" + ", ".join(str(j) for j in i) + "]"
    v = z.shape[-1]
    a_i = int(a[i])
    row = z[i]
    if bool(oor[i]):
        raise ValueError(
            f"actions{idx} = {a_i} is outside 0…{v - 1} (logits have {v} categories on their "
            "last axis); pass a valid action, or mark the step as padding with mask"
        )
    if bool(torch.isnan(row).any()) or bool(torch.isposinf(row).any()):
        raise ValueError(f"logits{idx} contain NaN or +inf; pass finite logits (−inf masks)")
    if bool(torch.isneginf(row).all()):
        raise ValueError(
            f"logits{idx} are all −inf: every category is masked, so no action has a "
            "probability; unmask at least one category, or mark the step as padding with mask"
        )
    raise ValueError(
        f"actions{idx} = {a_i} has logit −inf (probability 0), so ln π(a) = −∞; the action "
        "cannot have been drawn from this policy: check the action mask and the actions"
    )


class _CategoricalReinforce(torch.autograd.Function):
    """Autograd node: forward ℓ (reduced), backward the eligibility in one in-place buffer.

    Under ``create_graph=True`` the backward is written with differentiable ops instead (the
    same closed form), so second derivatives are exact rather than silently zero.
    """

    @staticmethod
    def forward(
        ctx,
        z: torch.Tensor,
        a: torch.Tensor,
        adv: torch.Tensor,
        valid: torch.Tensor | None,
        w: torch.Tensor,
        beta: float,
        reduction: str,
        keep: bool,
        validate: bool,
    ) -> torch.Tensor:
        # keep: a backward will follow (grad mode on and z requires grad), so π is kept for it.
        pi, logp_a, pi_a, peaked = log_pi(z, a, valid, adv, validate)
        if valid is not None:
            # Padding rows may be all −inf (NaN after softmax); zero them so that the
            # backward's per-row scale of 0 leaves 0 there, not NaN.
            pi[~valid] = 0.0
        h = buffer.xlogx_chunks(pi) if beta != 0.0 else None
        ell = -adv * logp_a
        if h is not None:
            ell = ell - beta * h
        ell = _common.zero_padding(ell, valid)
        ctx.beta, ctx.validate = beta, validate
        ctx.save_for_backward(z, a, adv, w, valid, h)
        ctx.pi = pi if keep else None
        ctx.pi_a, ctx.peaked = pi_a, peaked
        return _common.reduce(ell, w, reduction)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        z, a, adv, w, valid, h = ctx.saved_tensors
        a_safe = a if valid is None else a.masked_fill(~valid, 0)
        s = g * w
        c = s * adv
        if torch.is_grad_enabled():  # create_graph=True: a graph of the gradient itself
            grad = buffer.differentiable_grad(
                z, a_safe, c, ctx.beta * s if ctx.beta else None, valid
            )
            return grad, None, None, None, None, None, None, None, None
        pi, ctx.pi = ctx.pi, None  # used (and overwritten) once; a second backward recomputes
        if pi is None:
            pi = buffer.softmax(z)
            if valid is not None:
                pi[~valid] = 0.0
        flat = buffer.taken_index(pi, a_safe)
        pi_a = pi.take(flat).view(a_safe.shape)
        rows = ctx.peaked
        rest = use_rest = None
        if rows is not None or not ctx.validate:
            rest = buffer.sum_others(pi, flat).view(a_safe.shape)
            use_rest = torch.ones_like(a_safe, dtype=torch.bool) if rows is None else rows
        beta_s = ctx.beta * s if h is not None else None
        grad = buffer.scale_in_place(
            pi, a_safe, c, beta_s, h, pi_a=pi_a, rest=rest, use_rest=use_rest
        )
        return grad, None, None, None, None, None, None, None, None


def _weights(c: Any) -> torch.Tensor:
    return _common.element_weights(c.mask, c.z.shape[:-1], c.reduction, c.z)


def plain_loss(c: Any) -> torch.Tensor:
    """The same loss in plain differentiable ops, for torch.compile and torch.func transforms.

    ln π(a) = z_a − logsumexp(z), H = −Σ π ln π; autograd's own backward is then the closed
    form, and every transform (grad, vmap, jvp, compile) applies. No input checks (they need
    host syncs that a traced graph cannot hold). ``c``: a checked
    :class:`~eligibility.torch.categorical.Call` (``c.mask`` the bool mask of real steps).
    """
    z, valid = c.z, c.mask
    a_safe = c.a if valid is None else c.a.masked_fill(~valid, 0)
    logp = torch.log_softmax(z, dim=-1)
    ell = -c.adv * logp.gather(-1, a_safe.unsqueeze(-1)).squeeze(-1)
    if c.beta != 0.0:
        pi = logp.exp()
        ell = ell + c.beta * torch.where(pi > 0, pi * logp, torch.zeros((), dtype=z.dtype)).sum(-1)
    return _common.reduce(_common.zero_padding(ell, valid), _weights(c), c.reduction)


def loss(c: Any) -> torch.Tensor:
    """The loss through the general node, π kept when a backward will follow (``c`` checked)."""
    keep = torch.is_grad_enabled() and c.z.requires_grad
    w = _weights(c)
    return _CategoricalReinforce.apply(
        c.z, c.a, c.adv, c.mask, w, c.beta, c.reduction, keep, c.validate
    )
