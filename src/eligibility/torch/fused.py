r"""Fused linear + categorical REINFORCE loss: logits hW⊤ + b never held whole.

With logits z = h Wᵀ + b from the last linear layer of a policy over V actions (a vocabulary,
say), the B×V logits are the largest tensor of the step. The loss and its gradient only ever
need one row of z at a time:

    ℓ = −A ln π(a) − β H(π),  π = softmax(z),
    g = ∂ℓ/∂z = A (π − onehot(a)) + β π ⊙ (ln π + H)     (one row, see :mod:`.categorical`),
    ∂ℓ/∂h = g W,   ∂ℓ/∂W = gᵀ h,   ∂ℓ/∂b = g.

So the forward pass walks the rows in chunks of C: it forms z for the chunk, the loss, and the
chunk's g in place (the closed form of the core's
:func:`~eligibility.distributions.categorical.score_logits` and
:func:`~eligibility.distributions.categorical.entropy_grad_logits`), then folds g into ∂/∂h
(rows C) and ∂/∂W, ∂/∂b (accumulated) and drops it. The peak extra memory is O(C × V) for the
chunk, plus the gradients themselves (the size of h, W and b), instead of O(B × V). The same trick
underlies memory-efficient "fused linear cross-entropy" kernels; here it is the REINFORCE
gradient.

With a scalar reduction the incoming gradient is one number, so the forward computes the
gradients at a unit incoming gradient and the backward only scales them. With
``reduction="none"`` the incoming gradient is one number per step, unknown in the forward: the
backward then walks the chunks again (one more matmul for z).
"""

from __future__ import annotations

from typing import Any

import torch

from eligibility._array import first_index
from eligibility.torch import _common
from eligibility.torch import _linear_chunks as chunks
from eligibility.torch._categorical_buffer import scale_in_place

DEFAULT_CHUNK_ENTRIES = 1 << 22
"""The automatic chunk holds about 4 M logits (16 MiB in float32): C = max(1, 2²² // V) rows."""


def _chunks(
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: torch.Tensor,
    adv: torch.Tensor,
    beta: float,
    s: torch.Tensor | None,
    needs: tuple[bool, bool, bool],
    chunk: int,
    low: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """One pass over the rows: ℓ per row and, when ``s`` is given, Σᵢ sᵢ ∂ℓᵢ/∂(h, W, b).

    Args:
        h: (n, H) hidden rows (real steps only).
        weight: W, (V, H).
        bias: b, (V,) or None.
        a: (n,) int64 actions in 0…V−1.
        adv: (n,) advantages.
        beta: entropy coefficient β.
        s: (n,) weights of ℓᵢ in the output times the incoming gradient; None: the loss alone.
        needs: which of ∂/∂h, ∂/∂W, ∂/∂b to form.
        chunk: rows per chunk C.
        low: the dtype of the forward's autocast, or None: the logits' products made in it
            (in the forward and again in a backward, which runs outside autocast).

    Returns:
        (ℓ, ∂/∂h, ∂/∂W, ∂/∂b), the gradients None where not asked for.
    """
    n = h.shape[0]
    acc = chunks.accumulator(weight.dtype)
    ell = torch.empty(n, dtype=acc, device=h.device)
    bad = torch.zeros(n, dtype=torch.bool, device=h.device)
    want = s is not None
    grads = chunks.grad_buffers(h, weight, bias, needs if want else (False, False, False))
    like = h, weight
    h, weight, bias = chunks.in_dtype(low, h, weight, bias)
    wt = weight.t()
    for r0 in range(0, n, chunk):
        r1 = min(r0 + chunk, n)
        h_c, a_c = h[r0:r1], a[r0:r1]
        z = chunks.logits(h_c, wt, bias)
        if low is not None:  # autocast's product, and its softmax in float32
            z = chunks.rounded(z, low).to(acc)
        # ln π, then π in place: the chunk's one buffer. On the CPU log_softmax writes over z
        # (its kernel reads each row before writing it; bit-identical, checked in the tests),
        # so a chunk holds one C × V buffer at its peak, not two.
        pi = torch._log_softmax(z, -1, False, out=z) if z.is_cpu else torch.log_softmax(z, -1)
        del z
        logp_a = pi.gather(-1, a_c.unsqueeze(-1)).squeeze(-1)
        bad[r0:r1] = ~torch.isfinite(logp_a)
        pi.exp_()
        ell_c = -adv[r0:r1] * logp_a
        h_row = pi_log_pi = None
        if beta != 0.0:
            # π ln π serves both H and, below, the gradient: formed once per chunk.
            pi_log_pi = torch.special.xlogy(pi, pi)
            h_row = pi_log_pi.sum(-1).neg_()
            ell_c = ell_c - beta * h_row
        ell[r0:r1] = ell_c
        if not want:
            del pi, pi_log_pi
            continue
        assert s is not None
        s_c = s[r0:r1]
        beta_s = beta * s_c if beta else None
        g = scale_in_place(pi, a_c, s_c * adv[r0:r1], beta_s, h_row, pi_log_pi)
        del pi_log_pi  # overwritten by the call; drop it before the matmuls
        chunks.fold(g, h_c, weight, slice(r0, r1), grads, low)
        del g, pi
    if bool(bad.any()):
        raise ValueError(
            f"the logits h W⊤ + b of row {first_index(bad)[0]} (of the real steps) give the "
            "taken action a non-finite log-probability: NaN or ±inf in hidden, weight or bias, "
            "or a −inf bias on the taken action; pass finite inputs"
        )
    return ell, *chunks.cast_grads(grads, *like)


class _FusedLinearReinforce(torch.autograd.Function):
    """Autograd node over the real rows: forward ℓ and (scalar reductions) the gradients."""

    @staticmethod
    def forward(
        ctx,
        h: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        a: torch.Tensor,
        adv: torch.Tensor,
        w: torch.Tensor | None,
        beta: float,
        chunk: int,
        grad_mode: bool,
    ) -> torch.Tensor:
        # w: per-row weight of ℓᵢ in a scalar output (1 or 1/N); None for reduction "none".
        # grad_mode: whether a backward can follow at all (under no_grad no gradient is formed).
        needs = tuple(x and grad_mode for x in ctx.needs_input_grad[:3])
        ctx.beta, ctx.chunk, ctx.needs = beta, chunk, needs
        ctx.low = low = chunks.autocast_dtype(h)  # a backward's products in the forward's dtype
        ctx.save_for_backward(h, weight, bias, a, adv, w)
        if w is None:
            with chunks.outside_autocast(h, low):  # the chunks make autocast's products
                ell, *_ = _chunks(h, weight, bias, a, adv, beta, None, needs, chunk, low)
            ctx.grads = None
            return ell.to(h.dtype)
        with chunks.outside_autocast(h, low):
            ell, *grads = _chunks(
                h, weight, bias, a, adv, beta, w if any(needs) else None, needs, chunk, low
            )
        ctx.grads = grads if any(needs) else None
        return (ell * w.to(ell.dtype)).sum().to(h.dtype)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        if torch.is_grad_enabled():  # create_graph=True: say so, rather than give zeros
            raise RuntimeError(
                "fused_linear_reinforce_loss has no second derivative (its backward is formed "
                "chunk by chunk without a graph); for create_graph=True use "
                "reinforce_loss(F.linear(hidden, weight, bias), actions, advantages)"
            )
        h, weight, bias, a, adv, w = ctx.saved_tensors
        grads, ctx.grads = ctx.grads, None
        if grads is not None:
            # Gradients formed in the forward at a unit incoming gradient: scale in place
            # (used once; a second backward, as in gradcheck, walks the chunks again).
            out = [None if x is None else x.mul_(g.to(x.dtype)) for x in grads]
        else:
            s = g * w if w is not None else g
            _, *out = _chunks(
                h, weight, bias, a, adv, ctx.beta, s.to(h.dtype), ctx.needs, ctx.chunk, ctx.low
            )
        return out[0], out[1], out[2], None, None, None, None, None, None


def _check_actions(a: torch.Tensor, v: int, rows: torch.Tensor | None, lead: Any) -> None:
    """Raise a ValueError naming the first real step whose action is outside 0…V−1."""
    oor = (a < 0) | (a >= v)
    if not bool(oor.any()):
        return
    i = int(oor.nonzero()[0, 0])
    flat = torch.tensor(i if rows is None else int(rows[i]))
    where = tuple(int(j) for j in torch.unravel_index(flat, tuple(lead)))
    raise ValueError(
        f"actions{list(where)} = {int(a[i])} is outside 0…{v - 1} (weight has {v} rows); "
        "pass a valid action, or mark the step as padding with mask"
    )


def _real_rows(
    valid: torch.Tensor | None, h2: torch.Tensor, a: torch.Tensor, adv: torch.Tensor
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the real rows' indices or None, and h, a, A on those rows): padding dropped."""
    if valid is None:
        return None, h2, a, adv
    rows = valid.reshape(-1).nonzero().squeeze(-1)
    return rows, h2.index_select(0, rows), a.index_select(0, rows), adv.index_select(0, rows)


def fused_linear_reinforce_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    actions: torch.Tensor,
    advantages: torch.Tensor | float,
    *,
    bias: torch.Tensor | None = None,
    chunk_size: int | None = None,
    reduction: str = "mean",
    mask: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    validate: bool = True,
) -> torch.Tensor:
    r"""``reinforce_loss(hidden @ weight.T + bias, …)`` without ever holding the B×V logits.

    Same value and same gradients as :func:`eligibility.torch.reinforce_loss` on the logits
    z = h Wᵀ + b (ℓ = −A ln π(a) − β H, with ∂ℓ/∂h = g W, ∂ℓ/∂W = gᵀ h, ∂ℓ/∂b = Σ g for
    g = A (π − onehot(a)) + β π ⊙ (ln π + H)), computed over chunks of ``chunk_size`` rows so that
    the extra memory is O(chunk_size × V) plus the gradients of ``hidden``, ``weight`` and
    ``bias``. Padding rows are dropped before any matmul. Under autocast the logits' products
    are made as it makes a plain layer's, in its dtype, in the forward and again in a backward
    of ``reduction="none"`` (which runs outside autocast); the softmax in float32.

    Args:
        hidden: h, shape (*L, H): the features feeding the policy's last linear layer.
        weight: W, shape (V, H) (``torch.nn.Linear(H, V).weight``).
        actions: a, integer tensor of shape L, 0 ≤ a < V on every real step.
        advantages: A, broadcastable to L; constants (detached, no gradient).
        bias: b, shape (V,), or None. A −inf entry masks that category everywhere.
        chunk_size: rows per chunk C; None: C = max(1, 2²² // V) (≈ 16 MiB of float32 logits).
        reduction: "mean" (over the real steps; 0 if none), "sum", or "none" (shape L).
        mask: optional bool tensor broadcastable to L: True for a real step, False for padding.
        entropy_coef: β, a python float; the loss subtracts β H(π) per step.
        validate: check the actions' range and the advantages' finiteness (a host sync each);
            False skips them (see :func:`eligibility.torch.reinforce_loss`).

    Returns:
        The loss: a scalar for "mean"/"sum", shape L for "none"; in the dtype of ``hidden``.

    No second derivative: ``create_graph=True`` raises a RuntimeError naming the alternative.
    Under torch.compile and torch.func it is ``reinforce_loss`` of ``F.linear`` (plain ops).

    Raises:
        ValueError: bad shapes or dtypes, an action outside 0…V−1, or a non-finite
            log-probability of the taken action on a real step.
    """
    _common.check_reduction(reduction)
    beta = _common.check_coef(entropy_coef)
    h, wt, chunk = chunks.checked_layer(
        hidden, weight, bias, chunk_size, chunk_name="chunk_size", entries=DEFAULT_CHUNK_ENTRIES
    )
    v = wt.shape[0]
    lead = h.shape[:-1]
    if _common.transformed(h) or _common.transformed(wt):
        from eligibility.torch.categorical import reinforce_loss

        z = torch.nn.functional.linear(h, wt, bias)
        return reinforce_loss(
            z, actions, advantages, reduction=reduction, mask=mask, entropy_coef=entropy_coef
        )
    a = _common.index_actions(actions, lead, "hidden", h.shape)
    a = a.to(device=h.device, dtype=torch.int64).reshape(-1)
    adv = _common.advantages_like(advantages, lead, h).reshape(-1)
    valid = _common.valid_mask(mask, lead, h.device)
    rows, h2, a, adv = _real_rows(valid, h.reshape(-1, h.shape[-1]), a, adv)
    if validate:
        _common.check_advantages(adv, None)
        _check_actions(a, v, rows, lead)
    n = h2.shape[0]
    grad_mode = torch.is_grad_enabled()
    if reduction == "none":
        ell = _FusedLinearReinforce.apply(h2, wt, bias, a, adv, None, beta, chunk, grad_mode)
        if rows is not None:
            ell = ell.new_zeros(valid.numel()).index_put((rows,), ell)  # type: ignore[union-attr]
        return ell.reshape(lead)
    w = torch.full(
        (n,), 1.0 / max(n, 1) if reduction == "mean" else 1.0, dtype=h.dtype, device=h.device
    )
    return _FusedLinearReinforce.apply(h2, wt, bias, a, adv, w, beta, chunk, grad_mode)
