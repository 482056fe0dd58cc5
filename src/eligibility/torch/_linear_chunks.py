r"""A linear head's logits z = h Wᵀ + b, one chunk of rows at a time, and their gradients.

What the fused head's loss (:mod:`.fused`) and its log-probabilities (:mod:`.fused_logprobs`)
both do around their own per-row formulas: check the layer and choose the rows per chunk, form
a chunk's logits, and fold a chunk's g = ∂out/∂z into ∂h = g W, ∂W += gᵀ h and ∂b += Σ g, in
float32 accumulators for 16-bit inputs.
"""

from __future__ import annotations

import contextlib

import torch

from eligibility.torch import _common
from eligibility.torch.hardware import native_bf16


def accumulator(dtype: torch.dtype) -> torch.dtype:
    """The dtype sums over chunks are kept in: float32 for 16-bit inputs, else the input's."""
    # Sums of many chunks lose too much in 16-bit floats; accumulate in float32 and cast once.
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


Grads = tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]


def autocast_dtype(x: torch.Tensor) -> torch.dtype | None:
    """The dtype autocast runs matmuls in on ``x``'s device where it is on there, else None.

    A backward runs outside the forward's autocast: a chunked backward that recomputes the
    forward's products reads this in the forward and makes them in the same dtype (else its
    logits are not the forward's, and a bfloat16 run's backward makes float32 products).
    """
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None


def natively(low: torch.dtype, device: torch.device) -> bool:
    """Whether ``device`` makes ``low``'s products in hardware (else emulated, and slower)."""
    if low == torch.bfloat16:
        return native_bf16(device)
    return device.type == "cuda"


def in_dtype(low: torch.dtype | None, *xs: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """``xs`` rounded once to ``low`` for the products of every chunk (None: as they are).

    Held in ``low`` where their device makes its products natively, else in float32: the same
    values (a 16-bit product accumulates in float32 either way), float32's products being the
    fast ones there. Each product is then :func:`rounded` to ``low``, as autocast's is.
    """
    if low is None:
        return xs
    device = next(x.device for x in xs if x is not None)  # one layer's tensors: one device
    work = low if natively(low, device) else torch.float32
    return tuple(None if x is None else x.to(low).to(work) for x in xs)


def rounded(z: torch.Tensor, low: torch.dtype | None) -> torch.Tensor:
    """A product made from :func:`in_dtype`'s tensors, in ``low`` as autocast would give it."""
    return z if low is None else z.to(low)


def outside_autocast(x: torch.Tensor, low: torch.dtype | None) -> contextlib.AbstractContextManager:
    """Autocast off on ``x``'s device where ``low`` is set: the chunks make its products."""
    if low is None:
        return contextlib.nullcontext()
    return torch.autocast(x.device.type, enabled=False)


def grad_buffers(
    h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, needs: tuple[bool, ...]
) -> Grads:
    """Empty ∂/∂h (rows filled chunk by chunk) and zero ∂/∂W, ∂/∂b accumulators, where needed.

    ∂W and ∂b sum over every chunk, so they accumulate in float32 for 16-bit inputs.
    """
    acc = accumulator(weight.dtype)
    gh = torch.empty_like(h) if needs[0] else None
    gw = torch.zeros(weight.shape, dtype=acc, device=weight.device) if needs[1] else None
    with_b = bias is not None and needs[2]
    gb = torch.zeros(bias.shape, dtype=acc, device=bias.device) if with_b else None  # type: ignore[union-attr]
    return gh, gw, gb


def logits(h_c: torch.Tensor, wt: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """z = h Wᵀ + b for one chunk of rows (``wt`` = Wᵀ, a view), a fresh C × V buffer."""
    return torch.addmm(bias, h_c, wt) if bias is not None else h_c @ wt


def fold(
    g: torch.Tensor,
    h_c: torch.Tensor,
    weight: torch.Tensor,
    rows: slice,
    grads: Grads,
    low: torch.dtype | None = None,
) -> None:
    """Add one chunk's g = ∂out/∂z (C × V) into ∂h = g W (its rows), ∂W += gᵀ h, ∂b += Σ g.

    ``low``: the forward ran under autocast in that dtype (:func:`autocast_dtype`), and
    ``h_c`` and ``weight`` come from :func:`in_dtype`: the products are made as autocast makes
    a plain layer's (the upstream g rounded to ``low``, each product too), and ∂W summed in its
    float32 accumulator.
    """
    gh, gw, gb = grads
    if gh is not None:
        if low is None:
            torch.mm(g.to(weight.dtype), weight, out=gh[rows])
        else:
            gh[rows] = rounded(torch.mm(g.to(low).to(weight.dtype), weight), low)
    if gw is not None:
        if low is None:
            gw.addmm_(g.t().to(gw.dtype), h_c.to(gw.dtype))
        else:
            gw.add_(rounded(torch.mm(g.t().to(low).to(h_c.dtype), h_c), low))
    if gb is not None:
        gb.add_(g.sum(0, dtype=gb.dtype))


def cast_grads(grads: Grads, h: torch.Tensor, weight: torch.Tensor) -> Grads:
    """The accumulated gradients in the dtypes of the tensors they belong to."""
    return tuple(
        None if x is None else x.to(like.dtype)
        for x, like in zip(grads, (h, weight, weight), strict=True)
    )  # type: ignore[return-value]


def checked_layer(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    chunk_size: int | None,
    *,
    chunk_name: str,
    entries: int,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """hidden, weight and the rows per chunk, checked (shapes, dtypes, devices, bias, chunk).

    ``chunk_size`` None: max(1, ``entries`` // V) rows; ``chunk_name`` is the option the
    message names.
    """
    h = _common.check_tensor("hidden", hidden)
    wt = _common.check_tensor("weight", weight)
    for name, x in (("hidden", h), ("weight", wt)):
        _common.check_float(name, x)
    if h.dim() < 1 or wt.dim() != 2 or wt.shape[1] != h.shape[-1] or wt.shape[0] == 0:
        raise ValueError(
            f"hidden (*L, H) and weight (V, H) must share H, with V ≥ 1; got hidden "
            f"{tuple(h.shape)} and weight {tuple(wt.shape)} (weight is nn.Linear(H, V).weight)"
        )
    if wt.dtype != h.dtype or wt.device != h.device:
        raise ValueError(
            f"hidden and weight must share dtype and device; got {h.dtype}/{h.device} "
            f"and {wt.dtype}/{wt.device}"
        )
    v = wt.shape[0]
    if bias is not None:
        _common.check_tensor("bias", bias)
        if bias.shape != (v,) or bias.dtype != h.dtype or bias.device != h.device:
            raise ValueError(
                f"bias must have shape ({v},) and the dtype and device of hidden; got shape "
                f"{tuple(bias.shape)}, {bias.dtype} on {bias.device}"
            )
    if chunk_size is None:
        chunk = max(1, entries // v)
    elif isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(
            f"{chunk_name} must be a positive int (rows per chunk); got {chunk_size!r}"
        )
    else:
        chunk = chunk_size
    return h, wt, chunk
