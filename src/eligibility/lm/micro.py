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

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from eligibility.lm.sample import Completions
from eligibility.torch import options


def chunks(n: int, size: int | None) -> list[slice]:
    """The row ranges of ``n`` sequences in chunks of ``size`` (None or ≥ n: one chunk)."""
    step = n if size is None or size >= n else size
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


def rows(batch: Completions, s: slice | torch.Tensor) -> Completions:
    """The batch's rows ``s`` (their shared-prompt index is found again from their ids)."""
    return dataclasses.replace(
        batch,
        prompt_ids=batch.prompt_ids[s],
        prompt_mask=batch.prompt_mask[s],
        completion_ids=batch.completion_ids[s],
        completion_mask=batch.completion_mask[s],
        logps=batch.logps[s],
        ended=batch.ended[s],
        prefix=None,
        raw_logps=None if batch.raw_logps is None else batch.raw_logps[s],
        kept_sizes=None if batch.kept_sizes is None else batch.kept_sizes[s],
    )


def coupled(kl: str) -> bool:
    """Whether the loss couples rows through their log-probs' values (R̃ = R − β D(ℓ))."""
    return options.row("kl", kl).placement == "reward"


def scores(
    score: Callable[[Completions], torch.Tensor],
    batch: Completions,
    size: int | None,
    ranks: Any = None,
) -> torch.Tensor:
    """``score`` of every row, ``size`` rows at a time, concatenated (call under no_grad).

    ``ranks``: the run's ranks (``lm.policy.Policy.ranks``); each scores its share of the rows
    and every rank gets them all.
    """
    n = batch.completion_ids.shape[0]
    if ranks is not None and ranks.world > 1:
        return ranks.rows(scores(score, rows(batch, ranks.share(n)), size), n)
    parts = chunks(n, size)
    if len(parts) == 1:
        return score(batch)
    return torch.cat([score(rows(batch, s)) for s in parts])


def gathered(batch: Completions, ranks: Any, n: int, eos_id: int) -> Completions:
    """The whole batch of ``n`` rows on every rank, from each rank's share of it."""
    if ranks.world == 1:
        return batch
    return Completions(
        prompt_ids=ranks.rows(batch.prompt_ids, n, pad=eos_id, left=True),
        prompt_mask=ranks.rows(batch.prompt_mask, n, left=True),
        completion_ids=ranks.rows(batch.completion_ids, n, pad=eos_id),
        completion_mask=ranks.rows(batch.completion_mask, n),
        logps=ranks.rows(batch.logps, n),
        ended=ranks.rows(batch.ended.to(torch.uint8), n).bool(),
        raw_logps=None if batch.raw_logps is None else ranks.rows(batch.raw_logps, n),
        kept_sizes=None if batch.kept_sizes is None else ranks.rows(batch.kept_sizes, n),
    )


def backward(
    score: Callable[[Completions], torch.Tensor],
    loss_of: Callable[[torch.Tensor], torch.Tensor],
    batch: Completions,
    *,
    size: int | None,
    kl: str = "none",
    values_of: Callable[[Completions], torch.Tensor] | None = None,
    ranks: Any = None,
    live: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backpropagate ``loss_of(score(batch))`` chunk by chunk (see the module docstring).

    Args:
        score: the [n, T] log-probs of ``n`` rows, differentiable.
        loss_of: the update's loss of the whole batch's [N, T] log-probs.
        batch: the update's batch.
        size: M, rows per chunk (None: one chunk, the plain backward pass).
        kl: the loss's KL row: where it couples rows (:func:`coupled`), every row is first
            scored without gradients by ``values_of``; elsewhere the sampler's log-probs
            stand in for the rows not yet scored.
        values_of: the log-probs without dropout (None: ``score``).
        ranks: the run's ranks: each backpropagates its share of the rows (the sum over ranks
            of the shares is the gradient, which the caller all-reduces); every rank gets the
            whole batch's log-probs back.
        live: [N] bool, the rows scored (None: every row); the others' values stay the
            sampler's log-probs, constants: exact where their terms have no gradient
            (``lm.objective.live_rows``). A rank none of whose rows is live scores its first
            row (its gradient 0), so every rank's log-probs and gradient come back alike.

    Returns:
        The [N, T] log-probs (detached) and the loss's value at them.
    """
    n = batch.completion_ids.shape[0]
    several = ranks is not None and ranks.world > 1
    own = ranks.share(n) if several else slice(0, n)
    mine = torch.arange(own.start, own.stop, device=batch.completion_ids.device)
    if live is not None and not bool(live.all()):
        mine = mine[live[own].to(mine.device)]
        if several and not len(mine):  # one row of no gradient: every rank scores, alike
            mine = torch.arange(own.start, own.start + 1, device=mine.device)
    elif not several and len(chunks(n, size)) == 1:  # one chunk: the plain backward pass
        logps = score(batch)
        value = loss_of(logps)
        value.backward()
        return logps.detach(), value.detach()
    held = batch.logps
    if coupled(kl):
        with torch.no_grad():
            held = scores(values_of or score, batch, size, ranks)
    held = held.detach()
    for s in chunks(len(mine), size) if len(mine) else []:
        index = mine[s]
        scored = score(rows(batch, index))
        held = held.to(scored.dtype)
        loss_of(held.index_put((index,), scored)).backward()
        held = held.index_put((index,), scored.detach())
    if several:  # every rank's own rows, as each scored them
        held = ranks.rows(held[own].contiguous(), n)
    with torch.no_grad():
        return held, loss_of(held)


__all__ = ["backward", "chunks", "coupled", "gathered", "rows", "scores"]
