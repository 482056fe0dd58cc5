"""What a kind of run logs, in the words of its field: one :class:`Schema` per trainer.

``train`` logs episode returns against environment steps; ``finetune`` logs rewards and
accuracies against completion tokens. The run layer writes, plots and shows whichever it is
given, and knows neither.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Schema:
    """The metrics of one kind of run.

    Attributes:
        columns: metrics.csv's header, in order; the last is a timing column every complete row
            has (a row cut short by a kill lacks it).
        tags: TensorBoard tag → column.
        steps: the column that counts the run's steps (the x axis; TensorBoard's step).
        score: the column of the batch's mean score (the y axis of the learning curve).
        evaluation: the column of the greedy evaluation (None in the rows without one).
        timing: the columns that differ between two runs of the same seed (wall clock).
        unit: the steps' unit as the progress bar says it (``steps``, ``tokens``).
        x_label: the learning curve's x-axis label (the steps in words).
        y_label: its y-axis label.
        score_name: the score in a word (``return``, ``reward``).
        evaluation_name: the evaluation in words (``greedy return``, ``greedy accuracy``).
        info: ``info(row, recent_mean)``: the progress line's numbers of one update.
        widens: a row's keys that are not columns become columns (:meth:`widened`) where the
            run writes it: what a user's code names as it runs (``finetune``'s reward
            functions' ``log_metric``); False: such keys are not written.
    """

    columns: tuple[str, ...]
    tags: dict[str, str]
    steps: str
    score: str
    evaluation: str
    timing: tuple[str, ...]
    unit: str
    x_label: str
    y_label: str
    score_name: str
    evaluation_name: str
    info: Callable[[dict[str, Any], float], str] = field(repr=False)
    widens: bool = False

    def __post_init__(self) -> None:
        """Every column named elsewhere is one of ``columns``."""
        named = {self.steps, self.score, self.evaluation, *self.timing, *self.tags.values()}
        missing = sorted(named - set(self.columns))
        if missing:
            raise ValueError(f"a Schema names columns it does not have: {missing}")
        if self.columns[-1] not in self.timing:
            raise ValueError("a Schema's last column must be a timing column (complete rows)")

    def widened(self, names: Iterable[str]) -> Schema:
        """This schema with ``names`` (those it lacks, in order) as columns and as their own tags.

        They come before the timing columns, so that the last column stays a timing one (a row
        cut short by a kill still lacks it).
        """
        new = tuple(n for n in dict.fromkeys(names) if n not in self.columns)
        if not new:
            return self
        first = next(i for i, c in enumerate(self.columns) if c in self.timing)
        columns = (*self.columns[:first], *new, *self.columns[first:])
        return replace(self, columns=columns, tags={**self.tags, **{c: c for c in new}})
