"""The fields every trainer's result has, in no trainer's words (each names them in its own)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from eligibility.runs.schema import Schema


@dataclass
class RunResult:
    """What a run did, in the fields the run layer fills and the sweep and tools read.

    ``train``'s :class:`~eligibility.reinforce.trainer.TrainResult` and ``finetune``'s
    ``FinetuneResult`` add their own fields and name these in their own words (:func:`word`:
    ``env_steps`` or ``tokens`` for :attr:`steps`, ``target_return`` or ``target_accuracy``
    for :attr:`target`); each names its metrics' columns in ``SCHEMA`` (``history``'s rows are
    metrics.csv's).

    Attributes:
        solved: the greedy evaluation reached :attr:`target`.
        steps: the run's steps in training, in the unit of its ``SCHEMA.steps`` column
            (environment steps, completion tokens); evaluation not counted.
        samples: what it sampled in training (episodes, completions).
        updates: its updates.
        wall_s: total wall time, evaluation included.
        eval_wall_s: the part of ``wall_s`` spent in greedy evaluation.
        final_eval: the last greedy evaluation (a mean return, an accuracy); None if none ran.
        out_dir: the run directory (None when nothing was written).
        target: the greedy evaluation's target (None: none).
        history: one dict per update (the rows of metrics.csv).
        already_solved: a resumed run that had met its target: nothing was trained.
    """

    SCHEMA: ClassVar[Schema]

    solved: bool
    steps: int
    samples: int
    updates: int
    wall_s: float
    eval_wall_s: float
    final_eval: float | None
    out_dir: Path | None
    target: float | None = None
    history: list[dict[str, Any]] = field(default_factory=list, repr=False)
    already_solved: bool = False


def word(name: str, doc: str) -> Any:
    """A trainer's own word for the field ``name`` of :class:`RunResult`: read and set through.

    In a result class: ``env_steps = word("steps", "environment steps taken in training")``.
    """

    def get(self: RunResult) -> Any:
        return getattr(self, name)

    def put(self: RunResult, value: Any) -> None:
        setattr(self, name, value)

    return property(get, put, doc=f"{doc} (:attr:`~eligibility.runs.RunResult.{name}`)")
