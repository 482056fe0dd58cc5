r"""Per-token log-probabilities (and entropies) of a linear head, for any loss on top.

:func:`fused_linear_logprobs` is the selective log-softmax of a language model's head, ln π(aₜ)
= zₜ,ₐ − logsumexp(zₜ), computed chunk by chunk of rows so that the N·T × V logits are never
held whole; the backward recomputes each chunk's logits (:mod:`.fused` has the REINFORCE loss
of the same head; both walk the rows with :mod:`._linear_chunks`).
"""

from __future__ import annotations

import numbers
from typing import Any

import torch

from eligibility._array import first_index
from eligibility.torch import _common
from eligibility.torch import _linear_chunks as chunks
from eligibility.torch._linear_chunks import Grads

LOGPROBS_CHUNK_ENTRIES = 1 << 25
""":func:`fused_linear_logprobs`' automatic chunk: about 32 M logits (128 MiB in float32).

Larger than the loss's: its backward recomputes the logits, so both passes stream W once per
chunk, and on the CPU a C × H by H × V matmul runs at a fraction of its speed below a few hundred
rows (at H = 1024, V = 32 000, 2 threads: 32-row chunks took 3.1× as long as one matmul, 512-row
chunks 1.0×). At V = 128 256 it is 261 rows.
"""


def _head_logits(
    h_c: torch.Tensor,
    wt: torch.Tensor,
    bias: torch.Tensor | None,
    cap: float | None,
    tau: float,
    low: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """z = c tanh((h Wᵀ + b)/c)/τ of one chunk (no cap: (h Wᵀ + b)/τ), and τ ∂z/∂(h Wᵀ + b).

    Both in the accumulator dtype; the second is 1 − tanh²((h Wᵀ + b)/c), None without a cap.
    ``low``: the product made as autocast makes it in that dtype (``chunks.in_dtype``).
    """
    z = chunks.rounded(chunks.logits(h_c, wt, bias), low).to(chunks.accumulator(wt.dtype))
    d = None
    if cap is not None:
        z.div_(cap).tanh_()
        d = torch.mul(z, z).neg_().add_(1.0)
        z.mul_(cap)
    if tau != 1.0:
        z.div_(tau)
    return z, d


def _logprob_chunks(
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: torch.Tensor,
    tau: float,
    cap: float | None,
    with_entropy: bool,
    chunk: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Forward: ln π(aᵢ), logsumexp(zᵢ) and (if asked) Hᵢ per row, in float32 for 16-bit inputs.

    z = (h Wᵀ + b)/τ (soft-capped first with a cap) is formed one chunk of rows at a time, in
    the inputs' dtype (the matmul), then carried in the accumulator dtype for the softmax.
    """
    n = h.shape[0]
    acc = chunks.accumulator(weight.dtype)
    logp = torch.empty(n, dtype=acc, device=h.device)
    lse = torch.empty(n, dtype=acc, device=h.device)
    ent = torch.empty(n, dtype=acc, device=h.device) if with_entropy else None
    # under autocast its products (chunks.in_dtype): the inputs rounded once, not once a chunk
    low = chunks.autocast_dtype(h)
    h, weight, bias = chunks.in_dtype(low, h, weight, bias)
    wt = weight.t()
    with chunks.outside_autocast(h, low):
        for r0 in range(0, n, chunk):
            r1 = min(r0 + chunk, n)
            z, _ = _head_logits(h[r0:r1], wt, bias, cap, tau, low)
            a_c = a[r0:r1].unsqueeze(-1)
            z_a = z.gather(-1, a_c).squeeze(-1)
            # log_softmax over the chunk's own buffer on the CPU (see _chunks): one C × V at the
            # peak
            lp = torch._log_softmax(z, -1, False, out=z) if z.is_cpu else torch.log_softmax(z, -1)
            logp[r0:r1] = lp_a = lp.gather(-1, a_c).squeeze(-1)
            lse[r0:r1] = z_a - lp_a
            if ent is not None:
                ent[r0:r1] = -torch.linalg.vecdot(lp.exp(), lp)
            del z, lp
    return logp, lse, ent


def _logprob_grad_chunks(
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: torch.Tensor,
    tau: float,
    cap: float | None,
    lse: torch.Tensor,
    ent: torch.Tensor | None,
    g_logp: torch.Tensor,
    g_ent: torch.Tensor | None,
    needs: tuple[bool, ...],
    chunk: int,
    low: torch.dtype | None = None,
) -> Grads:
    """Backward: Σᵢ (uᵢ ∂ln πᵢ(aᵢ) + vᵢ ∂Hᵢ)/∂(h, W, b) for the upstream gradients u, v.

    Per row, with z the logits (temperature τ included) and π = softmax(z):

        ∂/∂z = u (onehot(a) − π) − v π ⊙ (ln π + H),   and ∂z/∂(hWᵀ + b) = 1/τ,

    or with a soft-cap c, z = c tanh((hWᵀ + b)/c)/τ: ∂z/∂(hWᵀ + b) = (1 − tanh²((hWᵀ + b)/c))/τ.

    The logits are recomputed chunk by chunk (one matmul), π from the saved logsumexp; the
    upstream u, v are any numbers per row: nothing here assumes they are equal. ``low``: the
    forward's autocast dtype, or None: the products made in it again (the forward's logits).
    """
    grads = chunks.grad_buffers(h, weight, bias, needs)
    acc = chunks.accumulator(weight.dtype)
    u = g_logp.to(acc) / tau
    v = None if g_ent is None else g_ent.to(acc) / tau
    h, weight, bias = chunks.in_dtype(low, h, weight, bias)
    wt = weight.t()
    n = h.shape[0]
    for r0 in range(0, n, chunk):
        r1 = min(r0 + chunk, n)
        h_c = h[r0:r1]
        g, d = _head_logits(h_c, wt, bias, cap, tau, low)
        g.sub_(lse[r0:r1].unsqueeze(-1))  # ln π
        u_c = u[r0:r1].unsqueeze(-1)
        if v is None:
            g.exp_().mul_(-u_c)  # −u π
        else:
            assert ent is not None
            pi = g.exp()
            # −π ⊙ (u + v (ln π + H)), written over ln π
            g.add_(ent[r0:r1].unsqueeze(-1)).mul_(v[r0:r1].unsqueeze(-1)).add_(u_c).mul_(pi)
            g.neg_()
            del pi
        flat = torch.arange(r1 - r0, device=g.device) * g.shape[1] + a[r0:r1]
        g.view(-1).index_add_(0, flat, u[r0:r1])  # + u onehot(a)
        if d is not None:
            g.mul_(d)  # through the cap
            del d
        chunks.fold(g, h_c, weight, slice(r0, r1), grads, low)
        del g
    return grads


class _FusedLinearLogprobs(torch.autograd.Function):
    """Autograd node: ln π(aᵢ) (and Hᵢ) per row; the backward recomputes the logits by chunks."""

    @staticmethod
    def forward(ctx, h, weight, bias, a, tau, cap, with_entropy, chunk):
        logp, lse, ent = _logprob_chunks(h, weight, bias, a, tau, cap, with_entropy, chunk)
        ctx.tau, ctx.cap, ctx.chunk = tau, cap, chunk
        ctx.low = chunks.autocast_dtype(h)  # the backward's products in the forward's dtype
        ctx.save_for_backward(h, weight, bias, a, lse, ent)
        out = logp.to(h.dtype)
        return (out, ent.to(h.dtype)) if ent is not None else (out, None)

    @staticmethod
    def backward(ctx, g_logp, g_ent):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "fused_linear_logprobs has no second derivative (its backward is formed chunk "
                "by chunk without a graph); for create_graph=True compute "
                "F.linear(hidden, weight, bias).log_softmax(-1).gather(…)"
            )
        h, weight, bias, a, lse, ent = ctx.saved_tensors
        if g_logp is None:
            g_logp = torch.zeros_like(lse)
        needs = ctx.needs_input_grad
        grads = _logprob_grad_chunks(
            h,
            weight,
            bias,
            a,
            ctx.tau,
            ctx.cap,
            lse,
            ent,
            g_logp,
            g_ent,
            needs,
            ctx.chunk,
            ctx.low,
        )
        return *chunks.cast_grads(grads, h, weight), None, None, None, None, None


def _plain_logprobs(
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    ids: torch.Tensor,
    tau: float,
    cap: float | None,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The same in plain differentiable ops, materialising the logits (torch.func, compile)."""
    z = torch.nn.functional.linear(h, weight, bias).to(chunks.accumulator(h.dtype))
    z = (z if cap is None else cap * torch.tanh(z / cap)) / tau
    lp = torch.log_softmax(z, -1)
    logp = lp.gather(-1, ids.unsqueeze(-1)).squeeze(-1).to(h.dtype)
    ent = -(lp.exp() * lp).sum(-1).to(h.dtype) if with_entropy else None
    return logp, ent


def _positive(name: str, value: object, *, optional: bool = False) -> float:
    """``value`` as a positive finite float, or a ValueError naming ``name``."""
    x = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else None
    if x is None or not (0 < x < float("inf")):
        either = " or None" if optional else ""
        raise ValueError(f"{name} must be a positive finite python float{either}; got {value!r}")
    return x


def _flat_ids(ids: torch.Tensor, lead: Any, v: int) -> torch.Tensor:
    """``ids`` flattened, each checked to lie in 0…V−1 (a ValueError names the first outside)."""
    a = ids.reshape(-1)
    oor = (a < 0) | (a >= v)
    if bool(oor.any()):
        where = first_index(oor.view(lead))
        raise ValueError(
            f"token_ids{list(where)} = {int(ids[where])} is outside 0…{v - 1} (weight has {v} "
            "rows); pass a valid id (on padding any valid id, masked in the loss)"
        )
    return a


def fused_linear_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    token_ids: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    softcap: float | None = None,
    entropy: bool = False,
    chunk: int | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    r"""ln π(aₜ) = zₜ,ₐ − logsumexp(zₜ), z = (h Wᵀ + b)/τ, per token, never holding all the logits.

    The selective log-softmax of a language model's head, ``F.linear(hidden, weight, bias) /
    temperature`` → ``log_softmax`` → ``gather(token_ids)``, computed over chunks of ``chunk``
    rows, so the extra memory is O(chunk × V) (plus, in the backward, the gradients of
    ``hidden``, ``weight`` and ``bias``) instead of the N·T × V logits. With ``entropy=True`` it
    also returns H(πₜ) = logsumexp(zₜ) − Σᵥ πₜ,ᵥ zₜ,ᵥ per token.

    The outputs are ordinary differentiable tensors: any loss may sit on them, with any upstream
    gradient per token (per-token weights, masks, a sequence aggregation, a KL term). The
    backward recomputes the logits chunk by chunk (one more matmul) and applies, per row,

        ∂/∂z = u (onehot(a) − π) − v π ⊙ (ln π + H),   ∂/∂h = (∂/∂z) W / τ,
        ∂/∂W = (∂/∂z)ᵀ h / τ,   ∂/∂b = Σ (∂/∂z) / τ,

    u and v the upstream gradients of ln π(a) and H. With ``softcap`` c the logits are Gemma 2's
    soft-capped ones, z = c tanh((h Wᵀ + b)/c)/τ, and ∂/∂z is multiplied by 1 − tanh²(·/c) on
    its way to h, W and b. It never forms a gradient in the forward
    on the assumption that the upstream gradient is one number for every token (the bug of
    Liger-Kernel #968, a silently wrong weight gradient under per-token weights).

    Precision: for bfloat16 and float16 inputs the matmul runs in the input dtype, the softmax,
    logsumexp, entropy and the accumulation of ∂W and ∂b in float32; outputs are in the input
    dtype. Per row only the logsumexp (and H) is kept between forward and backward. Under
    autocast the products are made as it makes a plain layer's, in its dtype, in the forward
    and again in the backward (which runs outside autocast), the rest as for 16-bit inputs;
    outputs in the dtype of ``hidden``.

    Args:
        hidden: h, (*L, H), floating (the last hidden states of the completion positions).
        weight: W, (V, H), the LM head (``lm_head.weight``), same dtype and device.
        token_ids: a, integer tensor of shape L, 0 ≤ a < V everywhere (pass any valid id on
            padding and mask the result in the loss).
        bias: b, (V,), or None.
        temperature: τ > 0, a python float; the logits are divided by it (as the sampler did).
        softcap: c > 0, a python float (a Hugging Face config's ``final_logit_softcapping``),
            or None: no cap.
        entropy: also return the entropy per token.
        chunk: rows per chunk; None: max(1, 2²⁵ // V) (about 128 MiB of float32 logits).

    Returns:
        ln π(a), shape L, in the dtype of ``hidden``; with ``entropy=True`` the pair (ln π(a), H).

    No second derivative: ``create_graph=True`` raises a RuntimeError. Under torch.compile and
    torch.func the same values come from plain ops (the logits materialised).

    Raises:
        ValueError: shapes, dtypes or devices that do not match, a token id outside 0…V−1, a
            temperature or soft-cap that is not a positive finite number, a bad chunk.
    """
    h, wt, rows = chunks.checked_layer(
        hidden, weight, bias, chunk, chunk_name="chunk", entries=LOGPROBS_CHUNK_ENTRIES
    )
    lead = h.shape[:-1]
    tau = _positive("temperature", temperature)
    cap = None if softcap is None else _positive("softcap", softcap, optional=True)
    ids = _common.index_actions(token_ids, lead, "hidden", h.shape, name="token_ids")
    ids = ids.to(device=h.device, dtype=torch.int64)
    if _common.transformed(h) or _common.transformed(wt):
        logp, ent = _plain_logprobs(h, wt, bias, ids, tau, cap, entropy)
        return (logp, ent) if entropy else logp  # type: ignore[return-value]
    a = _flat_ids(ids, lead, wt.shape[0])
    h2 = h.reshape(-1, h.shape[-1])
    logp, ent = _FusedLinearLogprobs.apply(h2, wt, bias, a, tau, cap, entropy, rows)
    if entropy:
        return logp.view(lead), ent.view(lead)
    return logp.view(lead)
