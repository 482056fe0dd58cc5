r"""The one B×V buffer of the categorical REINFORCE loss, and the in-place steps over it.

π = softmax(z) is formed once, in a fresh contiguous buffer; the loss reads ln π(a) off it and
the backward turns it into the gradient in place, c (π − onehot(a)) + β s π ⊙ (ln π + H)
(:mod:`eligibility.torch.categorical`). The taken entries are read and written by flat index.
Used by the lean and general paths and by :mod:`eligibility.torch.fused`.
"""

from __future__ import annotations

import functools

import torch

from eligibility.torch import _common


def rows(buf: torch.Tensor) -> torch.Tensor:
    """The buffer as (rows, V), a view (buffers made here are contiguous)."""
    return buf.view(-1, buf.shape[-1])


@functools.lru_cache(maxsize=64)
def row_starts(rows: int, v: int, device: torch.device) -> torch.Tensor:
    """(0, V, 2V, …), one per row: the flat index of each row's first entry, cached.

    A training loop calls with the same shape every step, and the arange costs as much as a
    small op. Never written to: callers add to it out of place.
    """
    return torch.arange(0, rows * v, v, device=device)


def taken_index(buf: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Flat indices of the taken entries (row i, column aᵢ) in ``buf.view(-1)``, shape (rows,).

    Reads and writes of the taken entries go through these (``take``, ``index_put_``,
    ``index_add_``) rather than ``gather``/``scatter`` along the last axis: on the CPU a
    ``scatter_add_`` of one entry per row into a bfloat16 buffer of 1024 × 50 000 takes 10⁴
    times as long as ``index_add_`` or more (566 and 584 ms against 0.05 and 0.03 ms in two
    runs, 2 threads, median of 20 paired rounds, on a 2-core machine shared with other jobs:
    ``python bench/losses/categorical_ops.py``).
    """
    return row_starts(a.numel(), buf.shape[-1], buf.device).add(a.reshape(-1))


def chunk_rows(p2: torch.Tensor) -> int:
    """Rows of a (rows, V) buffer per chunk, so a temporary stays near TEMP_ENTRIES entries."""
    return max(1, _common.TEMP_ENTRIES // max(p2.shape[1], 1))


def xlogx_chunks(pi: torch.Tensor) -> torch.Tensor:
    """−Σᵢ πᵢ ln πᵢ per row (0 ln 0 = 0), through a temporary of a bounded number of rows."""
    p2 = rows(pi)
    h = torch.empty(p2.shape[0], dtype=pi.dtype, device=pi.device)
    step = chunk_rows(p2)
    for r0 in range(0, p2.shape[0], step):
        p = p2[r0 : r0 + step]
        h[r0 : r0 + step] = torch.special.xlogy(p, p).sum(-1).neg_()
    return h.view(pi.shape[:-1])


def scale_in_place(
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
    ``rest`` (see :func:`sum_others`), ``pi_a`` being π_a before scaling.
    """
    if beta_s is None:
        pi.mul_(c.unsqueeze(-1))
    else:
        assert h is not None
        k = rows((c + beta_s * h).unsqueeze(-1))
        bs = rows(beta_s.unsqueeze(-1))
        p2 = rows(pi)
        if pi_log_pi is not None:
            p2.mul_(k).add_(rows(pi_log_pi).mul_(bs))
        else:
            step = chunk_rows(p2)
            for r0 in range(0, p2.shape[0], step):
                p = p2[r0 : r0 + step]
                t = torch.special.xlogy(p, p).mul_(bs[r0 : r0 + step])
                p.mul_(k[r0 : r0 + step]).add_(t)
    flat = taken_index(pi, a)
    if rest is None:
        pi.view(-1).index_add_(0, flat, c.reshape(-1), alpha=-1)
        return pi
    # Where 1 − π_a was summed exactly, the taken entry −c (1 − π_a) + β s π_a (ln π_a + H) is
    # formed from its parts, not as (c π_a + …) − c, which cancels when π_a ≈ 1.
    assert pi_a is not None and use_rest is not None
    taken = pi.take(flat).view(a.shape)
    exact = -c * rest
    if beta_s is not None:
        exact = exact + beta_s * torch.special.xlogy(pi_a, pi_a) + beta_s * h * pi_a
    fixed = torch.where(use_rest, exact, taken - c)
    pi.view(-1).index_put_((flat,), fixed.reshape(-1))
    return pi


def softmax(z: torch.Tensor) -> torch.Tensor:
    """π = softmax(z) in a fresh contiguous buffer, exp shifted by max(z) so it cannot overflow.

    torch's fused softmax kernel is the fastest from V ≈ 16 on, but below that (V = 4: about 4×
    slower than the composite) its per-row overhead dominates; the composite form then wins.
    """
    if z.shape[-1] >= 16:
        pi = torch.softmax(z, dim=-1)
    else:
        pi = torch.sub(z, z.amax(dim=-1, keepdim=True)).exp_()
        pi = pi.div_(pi.sum(dim=-1, keepdim=True))
    return pi if pi.is_contiguous() else pi.contiguous()


def sum_others(pi: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
    """1 − π_a as Σ_{j≠a} π_j, summed without π_a (no cancellation), per row (shape (rows,)).

    In float32, π_a = 1 − 2e-9 rounds to 1, so 1 − π_a is 0 where the truth is 2e-9; the sum
    of the other probabilities keeps every digit (the core's ``score_logits`` does the same).
    ``flat`` are the taken entries (:func:`taken_index`); they are set to 0 in place for the
    sum and put back: no copy of the buffer.
    """
    p1 = pi.view(-1)
    saved = p1.take(flat)
    p1.index_fill_(0, flat, 0.0)
    others = rows(pi).sum(-1)
    p1.index_put_((flat,), saved)
    return others


def differentiable_grad(
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


@functools.lru_cache(maxsize=256)
def reciprocal(n: int) -> torch.Tensor:
    """1/n as a 0-d float64 CPU tensor, cached.

    A product of a tensor with it keeps the tensor's dtype, and costs half of a product with a
    python float (which wraps the number in a new tensor).
    """
    return torch.tensor(1.0 / n, dtype=torch.float64)
