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
    *,
    pi_a: torch.Tensor | None = None,
    rest: torch.Tensor | None = None,
    use_rest: torch.Tensor | None = None,
) -> torch.Tensor:
    """π ↦ c (π − onehot(a)) + β s π ⊙ (ln π + H), row by row, overwriting π.

    c = s A per row; ``beta_s`` = β s per row (None when β = 0). With the entropy term the row is
    (c + β s H) π + β s π ln π. π ln π is ``pi_log_pi`` when the caller already holds it (it is
    then overwritten); otherwise it is formed here in bounded chunks, since it needs π itself.
    Where ``use_rest`` is True the taken entry's c π_a − c is formed as −c Σ_{j≠a} π_j from
    ``rest`` (see :func:`_rest`), ``pi_a`` being π_a before scaling.
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
    if rest is None:
        return pi.scatter_add_(-1, a.unsqueeze(-1), c.neg().unsqueeze(-1))
    # Where 1 − π_a was summed exactly, the taken entry −c (1 − π_a) + β s π_a (ln π_a + H) is
    # formed from its parts, not as (c π_a + …) − c, which cancels when π_a ≈ 1.
    assert pi_a is not None and use_rest is not None
    taken = pi.gather(-1, a.unsqueeze(-1)).squeeze(-1)
    exact = -c * rest
    if beta_s is not None:
        exact = exact + beta_s * torch.special.xlogy(pi_a, pi_a) + beta_s * h * pi_a
    fixed = torch.where(use_rest, exact, taken - c)
    return pi.scatter_(-1, a.unsqueeze(-1), fixed.unsqueeze(-1))


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
    pi = _softmax(z)  # the one B×V buffer
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
        _raise_bad(z, a, bad, out_of_range)
    logp_a = pi_a.log()
    if any_small:
        rows = small.nonzero(as_tuple=True)
        z_r = z[rows]
        logp_r = z_r.gather(-1, a[rows].unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z_r, -1)
        if not bool(torch.isfinite(logp_r).all()):
            _raise_bad(z, a, small & ~torch.isfinite(logp_a.index_put(rows, logp_r)), out_of_range)
        logp_a = logp_a.index_put(rows, logp_r)
    return pi, logp_a, pi_a, (peaked if any_peaked else None)


def _rest(pi: torch.Tensor, a: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor | None:
    """1 − π_a as Σ_{j≠a} π_j, summed without π_a (no cancellation), on ``rows`` (bool, L).

    In float32, π_a = 1 − 2e-9 rounds to 1, so 1 − π_a is 0 where the truth is 2e-9; the sum
    of the other probabilities keeps every digit (the core's ``score_logits`` does the same).
    None: all rows (validate=False). Returns a tensor of shape L (0 where not computed).
    """
    p2 = _rows(pi)
    a1 = a.reshape(-1, 1)
    if rows is None:
        others = p2.scatter(-1, a1, 0.0).sum(-1)
        return others.view(a.shape)
    idx = rows.reshape(-1).nonzero().squeeze(-1)
    out = torch.zeros(p2.shape[0], dtype=pi.dtype, device=pi.device)
    out[idx] = p2[idx].scatter(-1, a1[idx], 0.0).sum(-1)
    return out.view(a.shape)


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
        pi, logp_a, pi_a, peaked = _log_pi(z, a, valid, adv, validate)
        if valid is not None:
            # Padding rows may be all −inf (NaN after softmax); zero them so that the
            # backward's per-row scale of 0 leaves 0 there, not NaN.
            pi[~valid] = 0.0
        h = _xlogx_chunks(pi) if beta != 0.0 else None
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
            grad = _differentiable_grad(z, a_safe, c, ctx.beta * s if ctx.beta else None, valid)
            return grad, None, None, None, None, None, None, None, None
        pi, ctx.pi = ctx.pi, None  # used (and overwritten) once; a second backward recomputes
        if pi is None:
            pi = _softmax(z)
            if valid is not None:
                pi[~valid] = 0.0
        pi_a = pi.gather(-1, a_safe.unsqueeze(-1)).squeeze(-1)
        rows = ctx.peaked
        rest = use_rest = None
        if rows is not None or not ctx.validate:
            rest = _rest(pi, a_safe, rows)
            use_rest = torch.ones_like(a_safe, dtype=torch.bool) if rows is None else rows
        beta_s = ctx.beta * s if h is not None else None
        grad = _scale_in_place(pi, a_safe, c, beta_s, h, pi_a=pi_a, rest=rest, use_rest=use_rest)
        return grad, None, None, None, None, None, None, None, None


def _differentiable_grad(
    z: torch.Tensor,
    a: torch.Tensor,
    c: torch.Tensor,
    beta_s: torch.Tensor,
    valid: torch.Tensor | None,
) -> torch.Tensor:
    """∂ℓ/∂z = c (π − onehot(a)) + β s π ⊙ (ln π + H), out of place, every op differentiable."""
    logp = torch.log_softmax(z, dim=-1)
    pi = logp.exp()
    onehot = torch.nn.functional.one_hot(a, z.shape[-1]).to(z.dtype)
    grad = c.unsqueeze(-1) * (pi - onehot)
    if beta_s is not None:
        plogp = torch.where(pi > 0, pi * logp, torch.zeros((), dtype=z.dtype))
        H = -plogp.sum(-1, keepdim=True)
        grad = grad + beta_s.unsqueeze(-1) * (plogp + pi * H)
    if valid is not None:
        grad = torch.where(valid.unsqueeze(-1), grad, torch.zeros((), dtype=z.dtype))
    return grad


def _plain_loss(
    z: torch.Tensor,
    a: torch.Tensor,
    adv: torch.Tensor,
    valid: torch.Tensor | None,
    w: torch.Tensor,
    beta: float,
    reduction: str,
) -> torch.Tensor:
    """The same loss in plain differentiable ops, for torch.compile and torch.func transforms.

    ln π(a) = z_a − logsumexp(z), H = −Σ π ln π; autograd's own backward is then the closed
    form, and every transform (grad, vmap, jvp, compile) applies. No input checks (they need
    host syncs that a traced graph cannot hold).
    """
    a_safe = a if valid is None else a.masked_fill(~valid, 0)
    logp = torch.log_softmax(z, dim=-1)
    ell = -adv * logp.gather(-1, a_safe.unsqueeze(-1)).squeeze(-1)
    if beta != 0.0:
        pi = logp.exp()
        ell = ell + beta * torch.where(pi > 0, pi * logp, torch.zeros((), dtype=z.dtype)).sum(-1)
    return _common.reduce(_common.zero_padding(ell, valid), w, reduction)


def reinforce_loss(
    logits: torch.Tensor,
    actions: torch.Tensor,
    advantages: torch.Tensor | float,
    *,
    reduction: str = "mean",
    mask: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    validate: bool = True,
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
        validate: check the values (actions in range, logits, finite advantages) at the cost
            of one host sync per call; False skips every value check and the sync (for users
            who must avoid it, e.g. in a CUDA graph), and then a bad value gives NaN or ±∞.

    Returns:
        The loss: a scalar for "mean" and "sum", shape L for "none"; in the logits' dtype.

    Second derivatives (``create_graph=True``, Hessian-vector products) are exact. Under
    ``torch.compile`` and the ``torch.func`` transforms (grad, vmap, jvp) the loss is written in
    plain differentiable ops, without the value checks.

    Raises:
        ValueError: bad shapes or dtypes; an action outside 0…V−1; on a real step, logits that
            are all −∞, contain NaN or +∞, or give the taken action probability 0, or a
            non-finite advantage (the value checks only with ``validate``).
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
    if _common.transformed(z):
        return _plain_loss(z, a, adv, valid, w, beta, reduction)
    keep = torch.is_grad_enabled() and z.requires_grad
    return _CategoricalReinforce.apply(z, a, adv, valid, w, beta, reduction, keep, validate)
