r"""Micro-batches: an update's scoring and backward pass M sequences at a time, the same gradient.

The loss of an update is one function L(ℓ) of the [N, T] log-probs ℓ of the whole batch (its
advantages, normalisers and KL are the batch's). Its gradient is

    ∇_θ L = Σ_c (∂L/∂ℓ_c)ᵀ ∇_θ ℓ_c        (c: the chunks of M rows, ℓ_c their log-probs)

and ∂L/∂ℓ_c is taken at the whole batch's ℓ. So each chunk is scored with gradients, put in
place among the other rows' values as constants, L is evaluated on the whole [N, T] tensor
and backpropagated: the chunk's share of the gradient accumulates in ``.grad``, and the sum
over chunks is the one-chunk gradient, with every normaliser (a ``token-mean``'s Σ mᵢ,ₜ over
the batch, ``constant``'s N·T_max) and every group advantage the batch's. The loss is not
rewritten per chunk: it is called as it is, on the batch's shapes.

The other rows' values enter ∂L/∂ℓ_c only where L couples rows through ℓ: the
``sequence-reward`` KL (R̃ = R − β D(ℓ), then a group baseline of the others' R̃). There the
whole batch is first scored without gradients (one more forward pass); elsewhere any values
serve (the sampler's log-probs stand in for the rows not scored yet), and
``tests/test_lm_micro.py`` holds the accumulated gradient to the one-chunk gradient for every
aggregation, KL and scale row of the option table.

Memory: the activations kept for a backward pass are those of M sequences, not N; the loss's
[N, T] tensors are small beside them (no V axis).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from eligibility.lm.batch import Completions
from eligibility.lm.rows import Rows
from eligibility.torch import options


def chunks(n: int, size: int | None) -> list[slice]:
    """The row ranges of ``n`` sequences in chunks of ``size`` (None or ≥ n: one chunk)."""
    step = n if size is None or size >= n else size
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


def coupled(kl: str) -> bool:
    """Whether the loss couples rows through their log-probs' values (R̃ = R − β D(ℓ))."""
    return options.row("kl", kl).placement == "reward"


Scored = tuple[torch.Tensor, ...]
"""A scoring pass's [n, T] outputs for its rows: the log-probs ℓ first (differentiable), then
any per-row companions (a truncating scorer's ln π_τ before it and its tokens outside the kept
set: ``lm.mismatch``'s), which are gathered and put in place as ℓ is."""


def _scored(out: torch.Tensor | Scored) -> Scored:
    return (out,) if isinstance(out, torch.Tensor) else tuple(out)


def scores(
    score: Callable[[Completions], torch.Tensor | Scored],
    batch: Completions,
    size: int | None,
    rows: Rows | None = None,
) -> torch.Tensor:
    """The log-probs ``score`` gives every row, ``size`` rows at a time (call under no_grad).

    ``rows``: the run's data-parallel rows (``lm.rows``): each rank scores its block of the
    batch and every rank gets them all (None: one process).
    """
    rows = rows or Rows()
    n = batch.completion_ids.shape[0]
    own = rows.own(n)
    part = batch if own == slice(0, n) else batch.select(own)
    parts = chunks(own.stop - own.start, size)
    if len(parts) == 1:
        logps = _scored(score(part))[0]
    else:
        logps = torch.cat([_scored(score(part.select(s)))[0] for s in parts])
    return rows.gather(logps, n)


def backward(
    score: Callable[[Completions], torch.Tensor | Scored],
    loss_of: Callable[[torch.Tensor], torch.Tensor],
    batch: Completions,
    *,
    size: int | None,
    kl: str = "none",
    values_of: Callable[[Completions], torch.Tensor | Scored] | None = None,
    rows: Rows | None = None,
    live: torch.Tensor | None = None,
    deferred: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> tuple[torch.Tensor, torch.Tensor, Scored]:
    """Backpropagate ``loss_of(score(batch))`` chunk by chunk (see the module docstring).

    Args:
        score: the [n, T] log-probs of ``n`` rows, differentiable (or a :data:`Scored`: the
            log-probs and their per-row companions).
        loss_of: the update's loss of the whole batch's [N, T] log-probs.
        batch: the update's batch.
        size: M, rows per chunk (None: one chunk, the plain backward pass).
        kl: the loss's KL row: where it couples rows (:func:`coupled`), every row is first
            scored without gradients by ``values_of``; elsewhere the sampler's log-probs
            stand in for the rows not yet scored.
        values_of: the log-probs without dropout (None: ``score``).
        rows: the run's data-parallel rows (``lm.rows``; None: one process): each rank
            backpropagates its block (the sum over ranks of the blocks' gradients is the
            gradient, which the caller all-reduces); every rank gets the whole batch's
            log-probs and companions back.
        live: [N] bool, the rows scored (None: every row); the others' values stay the
            sampler's log-probs, constants: exact where their terms have no gradient
            (``lm.objective.live_rows``). A rank none of whose rows is live scores its first
            row (its gradient 0), so every rank's log-probs and gradient come back alike.
        deferred: the context of every chunk's pass but the last, where the gradient's sum
            over the ranks waits for the last (DDP's ``no_sync``: ``Policy.deferred``).

    Returns:
        The [N, T] log-probs (detached), the loss's value at them, and the scoring pass's
        companions of every row (zeros on a row not scored; empty: ``score`` gave none).
    """
    rows = rows or Rows()
    n = batch.completion_ids.shape[0]
    own = rows.own(n)
    mine = torch.arange(own.start, own.stop, device=batch.completion_ids.device)
    if live is not None:
        mine = mine[live[own].to(mine.device)]
        mine = mine if len(mine) else mine.new_tensor([own.start])  # one row, no gradient
    if len(mine) == n and len(chunks(n, size)) == 1:  # the whole batch at once: plain backward
        logps, *extra = _scored(score(batch))
        value = loss_of(logps)
        value.backward()
        return logps.detach(), value.detach(), tuple(e.detach() for e in extra)
    held = batch.logps
    if coupled(kl):
        with torch.no_grad():
            held = scores(values_of or score, batch, size, rows)
    held, extra = _chunked(score, loss_of, batch, mine, size, held.detach(), deferred)
    held = rows.gather(held[own].contiguous(), n)  # every rank's own rows, as each scored them
    extra = tuple(rows.gather(e[own].contiguous(), n) for e in extra)
    with torch.no_grad():
        return held, loss_of(held), extra


def _chunked(
    score: Callable[[Completions], torch.Tensor | Scored],
    loss_of: Callable[[torch.Tensor], torch.Tensor],
    batch: Completions,
    mine: torch.Tensor,
    size: int | None,
    held: torch.Tensor,
    deferred: Callable[[], AbstractContextManager[Any]],
) -> tuple[torch.Tensor, Scored]:
    """Rows ``mine`` scored ``size`` at a time, each chunk in place among ``held``, backpropagated.

    Returns ``held`` with the rows' log-probs, and their companions (zeros on other rows).
    """
    n, extra, parts = len(held), None, chunks(len(mine), size)
    for k, s in enumerate(parts):
        index = mine[s]
        with deferred() if k < len(parts) - 1 else nullcontext():
            scored, *more = _scored(score(batch.select(index)))
            held = held.to(scored.dtype)
            loss_of(held.index_put((index,), scored)).backward()
        held = held.index_put((index,), scored.detach())
        if extra is None:
            extra = [e.new_zeros((n, *e.shape[1:])) for e in more]
        extra = [e.index_put((index,), m.detach()) for e, m in zip(extra, more, strict=True)]
    return held, tuple(extra or ())


__all__ = ["Scored", "backward", "chunks", "coupled", "scores"]
