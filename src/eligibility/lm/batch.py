r"""A batch of completions, and what is done to its rows: written once, read from its fields.

A batch holds N rows. Each of its fields says what it is, in its declaration (the field's
``metadata``, as torch.distributions declares ``arg_constraints`` beside a class):

- a **row field** ([N, ...], one row per completion) says how it pads where blocks of
  different widths meet (:class:`Pad`: the value, EOS for token ids, and the side: the prompts
  on the left, the rest on the right);
- the **prompts' index** (``prefix``) is dropped where the rows change (it is found again from
  the ids) and moves with the batch;
- anything else is a setting of the whole batch, kept as it is.

Selecting rows, moving to a device and gathering the ranks' blocks into the whole batch are
one walk over the fields (:meth:`Completions.mapped`), so a field that a batch adds
(``lm.episodes.Episodes``: the turns, their rewards, the tool counts) is carried by every
operation; ``tests/test_lm_batch.py`` fills every field apart and holds each operation to a
field-by-field reference, so a field left out fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Self

import torch

EOS_PAD = None
"""A :class:`Pad`'s fill for token ids: the task's EOS (the batch does not know it)."""


@dataclass(frozen=True)
class Pad:
    """How a row field's blocks of different widths (dim 1) are made one: fill and side.

    Attributes:
        fill: the value of the padding (:data:`EOS_PAD`: the task's EOS).
        left: on the left (the prompts, left-padded), else on the right.
    """

    fill: float | int | None = 0
    left: bool = False

    def value(self, eos_id: int) -> float | int:
        """The fill, EOS where it is the task's."""
        return eos_id if self.fill is EOS_PAD else self.fill


def per_row(fill: float | int | None = 0, *, left: bool = False) -> Mapping[str, Pad]:
    """The ``metadata`` of a row field of a batch: ``field(metadata=per_row(...))``."""
    return {"pad": Pad(fill, left)}


@dataclass
class Completions:
    """A batch of prompts and their sampled completions.

    Attributes:
        prompt_ids: [N, P] prompts, left-padded (pads are EOS with ``prompt_mask`` 0).
        prompt_mask: [N, P] 1 for a prompt token.
        completion_ids: [N, T] completions, right-padded with EOS.
        completion_mask: [N, T] 1 for a token of the completion (its EOS included).
        logps: [N, T] log π_τ of each completion token at sampling time (0 on padding).
        ended: [N] the completion stopped at EOS (not at T_max).
        prefix: ([U] the first row of each distinct prompt, [N] each row's distinct prompt),
            or None (then found from ``prompt_ids`` where needed).
        raw_logps: [N, T] with a ``sampling`` processing, ln π_τ of each token before it (the
            mismatch's, ``lm.mismatch``); None: ``logps`` are those.
        kept_sizes: [N, T] with a ``sampling`` processing, mₜ = |Kₜ| the tokens it kept at
            each step (``lm.truncation``: the scorer's set is its own m largest); None: all.
        logged: what the reward functions logged with ``log_metric`` on this batch (every
            rank's calls, where the batch is gathered), by name: a setting of the batch.
    """

    prompt_ids: torch.Tensor = field(metadata=per_row(EOS_PAD, left=True))
    prompt_mask: torch.Tensor = field(metadata=per_row(0, left=True))
    completion_ids: torch.Tensor = field(metadata=per_row(EOS_PAD))
    completion_mask: torch.Tensor = field(metadata=per_row())
    logps: torch.Tensor = field(metadata=per_row())
    ended: torch.Tensor = field(metadata=per_row())
    prefix: tuple[torch.Tensor, torch.Tensor] | None = None
    raw_logps: torch.Tensor | None = field(default=None, metadata=per_row())
    kept_sizes: torch.Tensor | None = field(default=None, metadata=per_row())
    logged: dict[str, list[float]] = field(default_factory=dict)

    @property
    def lengths(self) -> torch.Tensor:
        """L_i, the tokens of each completion (EOS included)."""
        return self.completion_mask.sum(1)

    def completions(self) -> list[list[int]]:
        """Every completion's tokens without its EOS: row i's first Lᵢ − [ended i] tokens."""
        n = (self.lengths - self.ended.long()).tolist()
        return [row[:k] for row, k in zip(self.completion_ids.tolist(), n, strict=True)]

    def mapped(
        self,
        f: Callable[[torch.Tensor, Pad], torch.Tensor],
        prefix: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> Self:
        """The batch with ``f(x, pad)`` for each row field ``x`` that is set, and ``prefix``.

        The one walk over the fields that every operation on the rows takes; the settings of
        the whole batch are kept.
        """
        changed = {
            each.name: f(x, each.metadata["pad"])
            for each in dataclasses.fields(self)
            if "pad" in each.metadata and (x := getattr(self, each.name)) is not None
        }
        return dataclasses.replace(self, **changed, prefix=prefix)

    def select(self, index: slice | torch.Tensor) -> Self:
        """The rows ``index`` (a slice, or row numbers: a row may come more than once).

        Their prompts' index is found again from their ids where it is needed.
        """
        return self.mapped(lambda x, _: x[index])

    def to(self, device: torch.device) -> Self:
        """The batch on ``device``."""
        groups = self.prefix and (self.prefix[0].to(device), self.prefix[1].to(device))
        return self.mapped(lambda x, _: x.to(device), groups)


__all__ = ["EOS_PAD", "Completions", "Pad", "per_row"]
