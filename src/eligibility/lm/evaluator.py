"""A run's held-out evaluation: when it is due, whether it reaches the target, its transcripts.

The greedy evaluation itself is the rollout's (``lm.rollout.Rollout.evaluate``: completions,
or whole episodes on a task of turns) on the rows memory allows (``lm.build.evaluation_rows``);
here is what a run does around it: every ``--eval-every`` updates (and before the first with
``--eval-on-start``), against
``--target-accuracy``, its first episodes whole in ``episodes.jsonl`` and the trackers'
``completions`` table (as TRL's ``log_completions``), and the last accuracy the progress line
carries between evaluations.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eligibility.lm.build import evaluation_rows
from eligibility.lm.episodes.shown import table
from eligibility.lm.evaluation import SHOWN, Evaluation, logged
from eligibility.lm.rollout import Run, trainer_state
from eligibility.runs import RunDir


@dataclass
class Evaluator:
    """The run's evaluation schedule and target, and where its transcripts go.

    Attributes:
        every: evaluate after every ``every`` updates (0: never during the run).
        target: the greedy accuracy that ends the run (None: none).
        last: the last greedy accuracy (the progress line's, between evaluations).
        start: the greedy accuracy before the first update (``--eval-on-start``; None: none).
    """

    every: int
    target: float | None
    last: float | None = None
    start: float | None = None

    def due(self, updates: int) -> bool:
        """Whether the update just counted is one to evaluate after."""
        return bool(self.every) and updates % self.every == 0

    def reached(self, accuracy: float) -> bool:
        """Whether ``accuracy`` reaches the target (never without one)."""
        return self.target is not None and accuracy >= self.target

    def evaluate(self, run: Run) -> Evaluation:
        """The greedy evaluation on the evaluation prompts, as many a pass as memory allows."""
        policy = run.learner.policy
        chunk = evaluation_rows(run.config, run.task, policy, run.t_max)
        with run.phase("eval"):  # episodes played, on a task of turns
            result = run.rollout.evaluate(
                policy,
                run.t_max,
                chunk,
                rows=run.rows,
                keep=SHOWN,
                state=trainer_state(run),  # the run's step (it was blank: step 0 of 0)
            )
        self.last = result.accuracy
        return result

    def show(self, files: RunDir | None, update: int, step: int, result: Evaluation) -> None:
        """An evaluation's first episodes, whole, in episodes.jsonl and the trackers.

        In episodes.jsonl as messages, the system prompts once (``result.systems``); in the
        trackers as the table ``completions`` (``lm.episodes.shown.table``), as TRL's
        ``log_completions`` logs a batch's; ``step`` is theirs. Rank 0 writes them, where the
        run has a directory (``files``).
        """
        records = result.episodes
        if files is not None and records:
            logged(Path(files.path) / "episodes.jsonl", update, records, result.systems)
            files.table(step, "completions", *table(step, records))


__all__ = ["Evaluator"]
