r"""The lean path of the categorical REINFORCE loss: no padding, β = 0, checked, in one buffer.

Its forward forms π, ln π(a) and the loss outside the autograd node and checks them with one
host read; the node's backward turns the buffer into the gradient in place.
"""

from __future__ import annotations

import torch

from eligibility.torch import _categorical_buffer as buffer


class _Lean(torch.autograd.Function):
    """Autograd node of the common case (no padding, β = 0, checked), its forward done outside.

    :func:`loss` has already formed π in one buffer, the flat indices of the taken
    entries, ln π(a) and the loss, and checked them with one host sync; this node only hands
    the loss to autograd and, in the backward, turns the buffer into the gradient in place:
    c π (``mul_``), then the taken entries, −c at each (``index_add_``) or, where some π_a > ½,
    −c Σ_{j≠a} π_j (``index_put_``), which keeps every digit where 1 − π_a would cancel.
    """

    @staticmethod
    def forward(ctx, z, loss, pi, flat, adv, scale, peaked):
        ctx.save_for_backward(z, adv)
        ctx.pi, ctx.flat, ctx.scale, ctx.peaked = pi, flat, scale, peaked
        return loss  # formed outside; autograd returns it as a view whose grad_fn is this node

    @staticmethod
    def backward(ctx, g):
        z, adv = ctx.saved_tensors
        c = (adv * g).reshape(-1)
        if ctx.scale is not None:
            c.mul_(ctx.scale)  # in place: c keeps the logits' dtype
        if torch.is_grad_enabled():  # create_graph=True: a graph of the gradient itself
            a = ctx.flat - buffer.row_starts(c.numel(), z.shape[-1], z.device)
            grad = buffer.differentiable_grad(
                z, a.view(z.shape[:-1]), c.view(z.shape[:-1]), None, None
            )
            return grad, None, None, None, None, None, None
        pi, ctx.pi = ctx.pi, None  # used (and overwritten) once; a second backward recomputes
        if pi is None:
            pi = buffer.softmax(z.detach())
        flat = ctx.flat
        rest = buffer.sum_others(pi, flat) if ctx.peaked else None
        buffer.rows(pi).mul_(c.unsqueeze(-1))
        if rest is None:
            pi.view(-1).index_add_(0, flat, c, alpha=-1)
        else:
            pi.view(-1).index_put_((flat,), rest.mul_(c).neg_())
        return pi, None, None, None, None, None, None


def loss(
    z: torch.Tensor, a: torch.Tensor, adv: torch.Tensor, reduction: str
) -> torch.Tensor | None:
    """The common case's loss, checked with one host sync; None where the general path must act.

    π = softmax(z) fills the one buffer; ln π(a) = ln π_a off it; an action outside 0…V−1 makes
    its ln π(a) NaN. One read of (the loss, max π_a) then tells everything: a non-finite loss
    (a bad action, NaN or ±∞ logits or advantages, a taken action whose π_a underflowed below
    the smallest normal float) returns None, and the general path names the problem or, for an
    underflow, recomputes those rows as z_a − logsumexp(z); max π_a > ½ says whether the
    backward must form 1 − π_a without cancellation.
    """
    v = z.shape[-1]
    zd = z.detach()
    pi = buffer.softmax(zd)  # the one B×V buffer
    a1 = a.reshape(-1)
    a_safe = a1.clamp(0, v - 1)
    flat = buffer.taken_index(pi, a_safe)
    pi_a = pi.view(-1).take(flat)
    logp_a = pi_a.log().masked_fill_(a_safe != a1, float("nan"))
    adv1 = adv.reshape(-1)
    if reduction == "none":
        loss = (logp_a * adv1).neg_()
        check = loss.sum()
        scale = None
    else:
        scale = buffer.reciprocal(a1.numel()) if reduction == "mean" else None
        loss = torch.dot(logp_a, adv1).neg_()
        if scale is not None:
            loss.mul_(scale)  # in place: the loss keeps the logits' dtype
        check = loss
    total, top = torch.stack((check, pi_a.amax())).tolist()
    if total - total != 0.0:  # NaN or ±∞
        return None
    loss = loss.view(a.shape) if reduction == "none" else loss
    return _Lean.apply(z, loss, pi, flat, adv, scale, top > 0.5)
