"""The contract of a way of sampling: the model's side of one decode loop, written once.

:class:`Decoding` is what ``lm.sample``'s decode loop speaks to (``lm.edge.decoding.Decoding``
is the one the model's edge makes). The other contracts sit beside what they serve: a world's
and a batch's scoring (``lm.tasks.World``, ``lm.tasks.Finish``), the loop's (``lm.rollout.Rollout``,
``lm.rollout.Run``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch


class Decoding(Protocol):
    """The model's side of one sampling, as the decode loop (``lm.sample``) reads it.

    Attributes:
        rows: [m] the batch's rows the model computes (every row at first).
        z: [m, V] the logits of their next token.
        fixed: the step takes fixed shapes (every row to the end: :meth:`shrink` does
            nothing, and :meth:`step_at` and :meth:`captured` replay the step).
    """

    rows: torch.Tensor
    z: torch.Tensor
    fixed: bool

    def advance(self, t: int, tokens: torch.Tensor, live: torch.Tensor) -> None:
        """The logits after step ``t``'s ``tokens`` [N] (``live`` [N]: the rows not ended)."""
        ...

    def shrink(self, going: torch.Tensor) -> None:
        """Drop the finished rows (``going`` [N] False) where the cache's rows can be indexed."""
        ...

    def step_at(self, t: torch.Tensor, tokens: torch.Tensor, live: torch.Tensor) -> None:
        """:meth:`advance` with ``t`` a device scalar (fixed shapes: no host read)."""
        ...

    def captured(self, step: Callable[[], None], state: list[torch.Tensor]) -> Callable[[], None]:
        """``step`` (the draw and :meth:`step_at` together) captured once and replayed."""
        ...


__all__ = ["Decoding"]
