r"""The data-parallel rows of a batch: which a rank samples and scores, and their gathering.

A batch holds N = M·G rows, each of its M prompts repeated G times (TRL's ``RepeatSampler``
lays a batch out so). On W ranks the N rows are cut into W contiguous blocks in rank order,
sizes within one (:func:`shares`); each rank samples and scores its block, and every rank
gets the whole batch's rows, rewards and log-probs back, so the advantages, normalisers and
the loss are the batch's, and

    ∇_θ L = Σ_r Σ_{i ∈ rows(r)} (∂L/∂ℓᵢ)ᵀ ∇_θ ℓᵢ.

The draws do not depend on which rank samples a row: each step of the sampler draws the
whole batch's N uniforms and a rank uses its rows' (:meth:`Rows.draws`), and every rank then
moves its generator on as far as the longest block's steps took it (:meth:`Rows.align`).
:class:`Rows` is the one owner of these rules: the draw, the micro-batches and the
evaluation ask it, and never branch on a rank. On one process (W = 1) it is the identity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import torch

from eligibility.lm.batch import Completions
from eligibility.lm.edge.ranks import Ranks
from eligibility.lm.rewards import Scored

B = TypeVar("B", bound=Completions)


def shares(n: int, world: int) -> list[slice]:
    """``n`` rows in ``world`` contiguous blocks, the first ``n mod world`` one row larger."""
    q, extra = divmod(n, world)
    starts = [r * q + min(r, extra) for r in range(world + 1)]
    return [slice(starts[r], starts[r + 1]) for r in range(world)]


class Rows:
    """This rank's rows of each batch and the gathering of every rank's (see the module).

    Args:
        ranks: the run's ranks (None: one process).
        lockstep: every rank must run the same passes (a sharded model: each forward gathers
            weights from all): the evaluation is not split.
    """

    def __init__(self, ranks: Ranks | None = None, *, lockstep: bool = False) -> None:
        self.ranks = ranks or Ranks()
        self.lockstep = lockstep

    def own(self, n: int) -> slice:
        """This rank's rows of a batch of ``n``."""
        return shares(n, self.ranks.world)[self.ranks.rank]

    def draws(
        self, prompts: Sequence[Sequence[int]]
    ) -> tuple[list[Sequence[int]], tuple[slice, int, int]]:
        """This rank's prompts of the batch, and the sampler's ``share=(rows, n, width)``.

        ``width``: the batch's longest prompt (every rank pads to it: the batch's shapes).
        """
        mine = self.own(len(prompts))
        width = max(len(p) for p in prompts)
        return list(prompts[mine]), (mine, len(prompts), width)

    def align(self, rng: np.random.Generator, steps: int, n: int) -> None:
        """Move ``rng`` on past the longest block's sampling: ``n`` uniforms a step in all.

        A rank whose rows ended after ``steps`` steps draws what the others drew since, so
        every rank's generator stays the one process's.
        """
        rng.random((self.ranks.largest(steps) - steps) * n)

    def gather(
        self, x: torch.Tensor, n: int, *, pad: float | int = 0, left: bool = False
    ) -> torch.Tensor:
        """Every rank's rows of ``x`` ([n_r, ...]: this rank's block of ``n``), in rank order.

        Rows of different widths (dim 1) are padded with ``pad`` to the widest, on the left
        where ``left``. A bool tensor comes back bool.
        """
        sizes = [s.stop - s.start for s in shares(n, self.ranks.world)]
        if x.dtype == torch.bool:
            return self.ranks.rows(x.to(torch.uint8), sizes, pad=pad, left=left).bool()
        return self.ranks.rows(x, sizes, pad=pad, left=left)

    def batch(self, batch: B, n: int, eos_id: int) -> B:
        """The whole batch of ``n`` rows, from each rank's block of it (the identity on one).

        Each row field gathered as the batch declares it pads (``lm.batch``), so every kind of
        batch comes back whole, whatever fields it adds.
        """
        if self.ranks.world == 1:
            return batch
        return batch.mapped(lambda x, pad: self.gather(x, n, pad=pad.value(eos_id), left=pad.left))

    def rewards(self, scored: Scored) -> tuple[np.ndarray, np.ndarray, dict[str, list[float]]]:
        """The batch's rewards, scorable flags and ``log_metric`` values, from each rank's.

        The values logged under a name are every rank's, in rank order (their mean is TRL's,
        over every process's calls).
        """
        parts = self.ranks.objects((scored.rewards, scored.scorable, scored.logged))
        r, ok = (np.concatenate([p[i] for p in parts]) for i in (0, 1))
        logged: dict[str, list[float]] = {}
        for _, _, each in parts:
            for name, values in each.items():
                logged.setdefault(name, []).extend(values)
        return r, ok, logged

    def evaluated(self, index: list[int]) -> list[int]:
        """This rank's share of the evaluation's rows (all of them where in lockstep)."""
        if self.lockstep:
            return index
        return index[self.own(len(index))]

    def joined(self, parts: tuple[list[Any], ...]) -> tuple[list[Any], ...]:
        """The evaluation's per-rank lists (this rank's in ``parts``), every rank's in order."""
        if self.lockstep or self.ranks.world == 1:
            return parts
        gathered = self.ranks.objects(parts)
        return tuple([x for p in gathered for x in p[i]] for i in range(len(parts)))


__all__ = ["Rows", "shares"]
