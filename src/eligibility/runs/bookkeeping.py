"""The bookkeeping of one training run, written once for every trainer's loop.

``train`` and ``finetune`` each keep a small private class, ``_Run``, beside their loop: what is
their own (the envs and the agent; the task, the model and the sampler). What they share is its
base, :class:`Bookkeeping`:

- the resources of a run: the stop flag, the run directory, the exit stack that closes them;
- the run's state (:class:`~eligibility.runs.TrainState`): the counters (``updates``, the
  schema's steps, …), the RNGs, the history (metrics.csv's rows) and the checkpoint cadence,
  which the run directory saves and restores (it never writes a field of the run);
- the loop's clock and progress display, the wall time of evaluations kept apart;
- an update logged (metrics.csv, TensorBoard, progress) and checkpointed;
- the state after the last completed update, which a stop or an error goes back to;
- the run directory closed, and the fields of :class:`~eligibility.runs.RunResult` filled.

A trainer's ``_Run`` names its :class:`~eligibility.runs.Schema` (``SCHEMA``: its steps and its
evaluation's column) and says what its checkpoint holds besides the counters and RNGs
(:meth:`Bookkeeping.state`), or how a checkpoint is written where more than one process holds
its state (:meth:`Bookkeeping.save`); its loop still reads top to bottom in one function.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from eligibility._signals import Stop
from eligibility.runs.directory import RunDir
from eligibility.runs.progress import Budget, Progress
from eligibility.runs.schema import Schema
from eligibility.runs.state import TrainState


@dataclass(kw_only=True)
class Bookkeeping:
    """One call of a trainer: the resources it holds and the state a checkpoint saves.

    Everything opened is entered on ``stack``, closed in reverse order when the trainer returns.

    Attributes:
        config: the run's settings (``progress`` read here).
        target: the evaluation's target (None: none).
        t_start: when the trainer was called (``time.perf_counter``).
        stack: where every resource of the run is entered.
        stop: the stop flag the loop polls (:func:`~eligibility.runs.stop_on_signals`).
        files: the run directory (None: nothing is written).
        train_state: the counters, RNGs, history and checkpoint cadence
            (:class:`~eligibility.runs.TrainState`; :attr:`counters`, :attr:`rngs` and
            :attr:`history` are its, as the loop reads them).
        progress: the progress display (None: off, or not started).
        eval_wall: the wall time spent evaluating.
        t_loop: when the loop started; ``steps_at_loop`` the steps then (the speed's origin).
    """

    SCHEMA: ClassVar[Schema]

    config: Any
    target: float | None
    t_start: float
    stack: contextlib.ExitStack
    stop: Stop
    files: RunDir | None
    train_state: TrainState
    progress: Progress | None = None
    eval_wall: float = 0.0
    t_loop: float = 0.0
    steps_at_loop: int = 0

    @property
    def counters(self) -> dict[str, int]:
        """The run's counters (its state's)."""
        return self.train_state.counters

    @property
    def rngs(self) -> list[np.random.Generator]:
        """The run's random streams (its state's)."""
        return self.train_state.rngs

    @property
    def history(self) -> list[dict[str, Any]]:
        """The run's rows so far (its state's)."""
        return self.train_state.history

    @property
    def out_dir(self) -> Path | None:
        """The run directory's path (None when nothing is written)."""
        return None if self.files is None else self.files.path

    def restore(self, expected: Mapping[str, Any], framework: str = "numpy") -> Any:
        """Read the last checkpoint and the rows up to it into the run's state.

        Args:
            expected: the state dict of the freshly built model (names and shapes checked).
            framework: how the tensors come back (``numpy``, ``pt``).

        Returns:
            The checkpoint's tensors, for the trainer to load (None: there was none, and the
            run starts from scratch). Called only for a run with a directory.
        """
        return self.files.restore(expected, self.train_state, framework=framework)

    def already_solved(self) -> float | None:
        """The last evaluation of a resumed run when it met the target (None: go on)."""
        column = self.SCHEMA.evaluation
        evals = [r[column] for r in self.history if r[column] is not None]
        if self.target is not None and evals and evals[-1] >= self.target:
            return evals[-1]
        return None

    def start(
        self,
        name: str,
        total: int | None,
        budget: Budget | None = None,
        *,
        bounded: bool = False,
    ) -> None:
        """Start the progress display and the loop's clock; now is the last completed update.

        Args:
            name: the display's label (the env id, the task).
            total: the steps the display fills (None: no known end).
            budget: what the run's end is counted in (``runs.progress.Budget``), for the
                display's estimate of the time left (None: ``total``).
            bounded: the run may stop before its budget (a target): the time left is a bound.
        """
        steps = self.counters[self.SCHEMA.steps]
        if self.config.progress:
            shown = Progress(name, total, steps, self.SCHEMA, budget=budget, bounded=bounded)
            self.progress = self.stack.enter_context(shown)
        self.t_loop, self.steps_at_loop = time.perf_counter(), steps
        self.mark_completed()

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """Time an evaluation: its wall time is counted apart, in ``eval_wall``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.eval_wall += time.perf_counter() - t0

    def clock(self) -> tuple[float, float]:
        """The loop's wall time so far and its speed since it started (steps per second)."""
        elapsed = time.perf_counter() - self.t_loop
        steps = self.counters[self.SCHEMA.steps] - self.steps_at_loop
        return elapsed, steps / max(elapsed, 1e-9)

    def log(
        self,
        row: dict[str, Any],
        recent_mean: float,
        checkpoint: bool,
        shown: dict[str, Any] | None = None,
    ) -> None:
        """Log one update (history, metrics.csv, TensorBoard, progress), checkpoint if asked.

        Args:
            row: the update's metrics, the schema's columns.
            recent_mean: the progress display's score (a running mean, or the batch's own).
            checkpoint: write the checkpoint once the row is logged.
            shown: what the progress display shows, when it is more than ``row``.
        """
        self.history.append(row)
        if self.files is not None:
            self.files.log(row)
        if checkpoint:
            self.checkpoint()
        if self.progress is not None:
            self.progress.update(row if shown is None else shown, recent_mean)

    def state(self) -> dict[str, Any]:
        """The tensors a checkpoint holds besides the counters and RNGs: the trainer's own."""
        raise NotImplementedError(f"{type(self).__name__} says what its checkpoint holds")

    def save(self, snapshot: dict[str, Any]) -> bool:
        """Write a checkpoint of the weights now with ``snapshot``'s counters and RNGs.

        The run directory's (when there is one) of :meth:`state`; whether one was written. A
        trainer whose other processes write their part of the state says so here.
        """
        if self.files is None:
            return False
        self.files.checkpoint(self.state(), snapshot)
        return True

    def checkpoint(self) -> None:
        """Checkpoint the update just made (:meth:`save`)."""
        snapshot = self.train_state.snapshot()
        if self.save(snapshot):
            self.train_state.saved(snapshot)

    def mark_completed(self) -> None:
        """Remember the counters and RNGs now: the last completed update, where a stop goes back."""
        self.train_state.mark_completed()

    def go_back(self) -> None:
        """Set the counters and RNGs back to the last completed update's."""
        self.train_state.go_back()

    def close(self) -> None:
        """Draw the learning curve and close the run directory (when there is one)."""
        if self.files is not None:
            self.files.finish(self.history)

    def outcome(
        self, solved: bool, final_eval: float | None, already_solved: bool = False
    ) -> dict[str, Any]:
        """The fields of :class:`~eligibility.runs.RunResult` every trainer fills alike.

        ``samples`` (episodes, completions) and the trainer's own fields are its to add.
        """
        return dict(
            solved=solved,
            steps=self.counters[self.SCHEMA.steps],
            updates=self.counters["updates"],
            wall_s=time.perf_counter() - self.t_start,
            eval_wall_s=self.eval_wall,
            final_eval=final_eval,
            out_dir=self.out_dir,
            target=self.target,
            history=self.history,
            already_solved=already_solved,
        )
