r"""REINFORCE loss for a categorical policy whose backward pass is the eligibility, in closed form.

For logits z ∈ ℝⱽ, π = softmax(z), a taken action a and its advantage A, the per-step loss is

    ℓ = −A ln π(a) − β H(π),     ln π(a) = z_a − logsumexp(z),     H(π) = −Σᵢ πᵢ ln πᵢ

and its gradient is the characteristic eligibility e = ∂ ln π(a)/∂z = onehot(a) − π (Williams,
1992, §4), scaled by −A, plus the entropy term:

    ∂ℓ/∂z = A (π − onehot(a)) + β π ⊙ (ln π + H).

These are the closed forms of the core,
:func:`eligibility.distributions.categorical.score_logits` (e) and
:func:`~eligibility.distributions.categorical.entropy_grad_logits` (∂H/∂z = −π ⊙ (ln π + H));
the tests hold this module to them. The core kernels build ``onehot(a)`` and several other
B×V arrays; here the same formulas run in one B×V buffer, in place: π (a fused ``softmax``),
then A π (``mul_``), then minus A at the taken index (``scatter_add_``). That buffer is the
gradient handed back to autograd, so a backward costs one B×V allocation where autograd's
backward of ``-(A * Categorical(logits=z).log_prob(a)).mean()`` costs several.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from eligibility._array import first_index
from eligibility.torch import _common


def _rows(buf: torch.Tensor) -> torch.Tensor:
    """The buffer as (rows, V), a view (buffers made here are contiguous)."""
    return buf.view(-1, buf.shape[-1])


def _chunk_rows(p2: torch.Tensor) -> int:
    """Rows of a (rows, V) buffer per chunk, so a temporary stays near TEMP_ENTRIES entries."""
    return max(1, _common.TEMP_ENTRIES // max(p2.shape[1], 1))


def _xlogx_chunks(pi: torch.Tensor) -> torch.Tensor:
    """−Σᵢ πᵢ ln πᵢ per row (0 ln 0 = 0), through a temporary of a bounded number of rows."""
    p2 = _rows(pi)
    h = torch.empty(p2.shape[0], dtype=pi.dtype, device=pi.device)
    step = _chunk_rows(p2)
    for r0 in range(0, p2.shape[0], step):
        p = p2[r0 : r0 + step]
        h[r0 : r0 + step] = torch.special.xlogy(p, p).sum(-1).neg_()
    return h.view(pi.shape[:-1])


def _scale_in_place(
    pi: torch.Tensor,
    a: torch.Tensor,
    c: torch.Tensor,
    beta_s: torch.Tensor | None,
    h: torch.Tensor | None,
    pi_log_pi: torch.Tensor | None = None,
) -> torch.Tensor:
    """π ↦ c (π − onehot(a)) + β s π ⊙ (ln π + H), row by row, overwriting π.

    c = s A per row; ``beta_s`` = β s per row (None when β = 0). With the entropy term the row is
    (c + β s H) π + β s π ln π. π ln π is ``pi_log_pi`` when the caller already holds it (it is
    then overwritten); otherwise it is formed here in bounded chunks, since it needs π itself.
    """
    if beta_s is None:
        pi.mul_(c.unsqueeze(-1))
    else:
        assert h is not None
        k = _rows((c + beta_s * h).unsqueeze(-1))
        bs = _rows(beta_s.unsqueeze(-1))
        p2 = _rows(pi)
        if pi_log_pi is not None:
            p2.mul_(k).add_(_rows(pi_log_pi).mul_(bs))
        else:
            step = _chunk_rows(p2)
            for r0 in range(0, p2.shape[0], step):
                p = p2[r0 : r0 + step]
                t = torch.special.xlogy(p, p).mul_(bs[r0 : r0 + step])
                p.mul_(k[r0 : r0 + step]).add_(t)
    return pi.scatter_add_(-1, a.unsqueeze(-1), c.neg().unsqueeze(-1))


def _softmax(z: torch.Tensor) -> torch.Tensor:
    """π = softmax(z) in a fresh contiguous buffer, exp shifted by max(z) so it cannot overflow.

    torch's fused softmax kernel is the fastest from V ≈ 16 on, but below that (V = 4: about 4×
    slower than the composite) its per-row overhead dominates; the composite form then wins.
    """
    if z.shape[-1] >= 16:
        pi = torch.softmax(z, dim=-1)
        return pi if pi.is_contiguous() else pi.contiguous()
    pi = torch.sub(z, z.amax(dim=-1, keepdim=True)).exp_()
    return pi.div_(pi.sum(dim=-1, keepdim=True))


def _log_pi(
    z: torch.Tensor, a: torch.Tensor, valid: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(π as a fresh buffer, ln π(a)), raising a ValueError on a step that has no valid answer.

    ln π(a) is read off the buffer as ln(π_a): one softmax pass serves both the loss and
    the backward, and π_a carries the same relative rounding as z_a − logsumexp(z). Only where
    π_a falls below the smallest normal float (ln π(a) ≲ −87 in float32), where that rounding
    would grow, are the few rows redone as z_a − logsumexp(z).

    One host sync checks everything: an action outside 0…V−1, an all −∞ row (no category left),
    a NaN or +∞ logit, and (in the rare slow path) a taken action of probability 0. Padding steps
    are exempt: their actions and logits may hold anything.
    """
    v = z.shape[-1]
    out_of_range = (a < 0) | (a >= v)
    if valid is not None:
        out_of_range &= valid
    a_safe = a.masked_fill(out_of_range if valid is None else out_of_range | ~valid, 0)
    pi = _softmax(z)  # the one B×V buffer
    pi_a = pi.gather(-1, a_safe.unsqueeze(-1)).squeeze(-1)
    bad = out_of_range | torch.isnan(pi_a)  # NaN: an all −∞ row, or a NaN or +∞ logit
    small = pi_a < torch.finfo(pi.dtype).tiny
    if valid is not None:
        bad &= valid
        small &= valid
    any_bad, any_small = torch.stack((bad.any(), small.any())).tolist()
    if any_bad:
        _raise_bad(z, a, bad, out_of_range)
    logp_a = pi_a.log()
    if any_small:
        rows = small.nonzero(as_tuple=True)
        z_r = z[rows]
        logp_r = z_r.gather(-1, a[rows].unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z_r, -1)
        if not bool(torch.isfinite(logp_r).all()):
            _raise_bad(z, a, small & ~torch.isfinite(logp_a.index_put(rows, logp_r)), out_of_range)
        logp_a = logp_a.index_put(rows, logp_r)
    return pi, logp_a


def _raise_bad(z: torch.Tensor, a: torch.Tensor, bad: torch.Tensor, oor: torch.Tensor) -> None:
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
    """Autograd node: forward ℓ (reduced), backward the eligibility in one in-place buffer."""

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
    ) -> torch.Tensor:
        # keep: a backward will follow (grad mode on and z requires grad), so π is kept for it.
        pi, logp_a = _log_pi(z, a, valid)
        if valid is not None:
            # Padding rows may be all −inf (NaN after softmax); zero them so that the
            # backward's per-row scale of 0 leaves 0 there, not NaN.
            pi[~valid] = 0.0
        h = _xlogx_chunks(pi) if beta != 0.0 else None
        ell = -adv * logp_a
        if h is not None:
            ell = ell - beta * h
        ell = _common.zero_padding(ell, valid)
        ctx.beta = beta
        ctx.save_for_backward(z, a, adv, w, valid, h)
        ctx.pi = pi if keep else None
        return _common.reduce(ell, w, reduction)

    @staticmethod
    @once_differentiable
    def backward(ctx, g: torch.Tensor):
        z, a, adv, w, valid, h = ctx.saved_tensors
        pi, ctx.pi = ctx.pi, None  # used (and overwritten) once; a second backward recomputes
        if pi is None:
            pi = _softmax(z)
            if valid is not None:
                pi[~valid] = 0.0
        a_safe = a if valid is None else a.masked_fill(~valid, 0)
        s = g * w
        c = s * adv
        beta_s = ctx.beta * s if h is not None else None
        grad = _scale_in_place(pi, a_safe, c, beta_s, h)
        return grad, None, None, None, None, None, None, None


def reinforce_loss(
    logits: torch.Tensor,
    actions: torch.Tensor,
    advantages: torch.Tensor | float,
    *,
    reduction: str = "mean",
    mask: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
) -> torch.Tensor:
    r"""REINFORCE loss ℓ = −A ln π(a) − β H(π), π = softmax(z); backward e in closed form.

    Per step: ℓ = −A (z_a − logsumexp z) − β H, and ∂ℓ/∂z = A (π − onehot(a)) + β π ⊙ (ln π + H),
    i.e. −A times the characteristic eligibility onehot(a) − π (Williams, 1992) plus β times
    −∂H/∂z. The backward runs in one buffer of the logits' shape, in place, with no autograd
    graph: it is the same number as the autograd of
    ``-(A * Categorical(logits=z).log_prob(a)).mean() - β Categorical(logits=z).entropy().mean()``,
    at a fraction of the time and memory for large V.

    Categories masked with a logit of −∞ have π = 0 and a gradient of exactly 0. Steps marked
    as padding (``mask`` False) contribute 0 to the loss and to every gradient, and their
    logits and actions are not looked at, so they may hold anything (even all −∞ rows).

    The advantages are constants: they are detached, and no gradient reaches them (train a
    learned baseline with its own loss). The actions are indices, with no gradient either.
    Checking the inputs costs one host sync per call (a device → host read of one flag).

    Args:
        logits: z, shape (*L, V): any leading shape L (batch, time, …), V categories last.
            Floating (float64, float32, bfloat16, float16), on any device.
        actions: a, integer tensor of shape L, 0 ≤ a < V on every real step.
        advantages: A, broadcastable to L (a number, or one per step), cast to the logits'
            dtype.
        reduction: "mean" (Σ ℓ over the real steps divided by their count N; 0 when N = 0),
            "sum" (Σ ℓ over the real steps), or "none" (ℓ of shape L, 0 on padding).
        mask: optional bool tensor broadcastable to L: True for a real step, False for padding.
        entropy_coef: β ≥ 0 typically, a python float; the loss subtracts β H(π) per step.

    Returns:
        The loss: a scalar for "mean" and "sum", shape L for "none"; in the logits' dtype.

    Raises:
        ValueError: bad shapes or dtypes; an action outside 0…V−1; on a real step, logits that
            are all −∞, contain NaN or +∞, or give the taken action probability 0.
    """
    _common.check_reduction(reduction)
    beta = _common.check_coef(entropy_coef)
    z = _common.check_tensor("logits", logits)
    _common.check_float("logits", z)
    if z.dim() < 1 or z.shape[-1] == 0:
        raise ValueError(
            "logits must have a last axis of categories (shape (*L, V), V ≥ 1); "
            f"got {tuple(z.shape)}"
        )
    lead = z.shape[:-1]
    a = _common.index_actions(actions, lead, "logits", z.shape)
    a = a.to(device=z.device, dtype=torch.int64)
    adv = _common.advantages_like(advantages, lead, z)
    valid = _common.valid_mask(mask, lead, z.device)
    w = _common.element_weights(valid, lead, reduction, z)
    keep = torch.is_grad_enabled() and z.requires_grad
    return _CategoricalReinforce.apply(z, a, adv, valid, w, beta, reduction, keep)
