"""The fields every trainer's result has, read by the sweep and the command line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from eligibility.runs.schema import Schema


@dataclass
class RunResult:
    """What a run did, in the fields every trainer reports and the sweep and the CLI read.

    ``train``'s :class:`~eligibility.reinforce.trainer.TrainResult` and ``finetune``'s
    ``FinetuneResult`` add their own; each documents what the counts are in its world
    (environment steps or completion tokens, returns or accuracies), and names its metrics'
    columns in ``SCHEMA`` (``history``'s rows are metrics.csv's).
    """

    SCHEMA: ClassVar[Schema]

    solved: bool
    env_steps: int
    episodes: int
    updates: int
    wall_s: float
    eval_wall_s: float
    final_eval_return: float | None
    out_dir: Path | None
    target_return: float | None = None
    history: list[dict[str, Any]] = field(default_factory=list, repr=False)
    already_solved: bool = False
