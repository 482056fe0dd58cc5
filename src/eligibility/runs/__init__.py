"""The run layer: what every training run writes and how it is resumed, for every trainer.

``train`` (:mod:`eligibility.reinforce`) and ``finetune`` (:mod:`eligibility.lm`) both stand on
it; it imports neither. A trainer brings its :class:`Schema` (its metrics.csv columns, its
TensorBoard tags, the words of its field) and its config dataclass; the layer gives it:

- :class:`RunDir`: the run directory, made exclusively and locked (``flock``), ``config.json``,
  ``metrics.csv``, TensorBoard events, atomic checkpoints, the learning curve;
- :func:`resume_config`: the resume rule (a run's identity is its saved config; a resume that
  changes an identity field is refused by name);
- :class:`Progress`: the progress bar or log lines on stderr;
- :class:`RunResult`: the fields every trainer's result has, and :func:`word`, a trainer's own
  name for one of them;
- :class:`TrainState`: a run's counters, random streams, history and checkpoint cadence, which
  a checkpoint saves and a resume restores (``state_dict``/``load_state_dict``);
- :class:`Bookkeeping`: the plumbing around a trainer's loop (counters, history, resume,
  progress, logging and checkpointing an update, going back to the last completed one), the
  base of ``train``'s and ``finetune``'s private ``_Run``;
- the stop flag and :class:`Interrupted` (re-exported from :mod:`eligibility._signals`) and
  :func:`interrupted_line`, the line a stopped command prints.
"""

from __future__ import annotations

from eligibility._signals import Interrupted, Stop, stop_on_signals
from eligibility.runs.bookkeeping import Bookkeeping
from eligibility.runs.directory import (
    CHECKPOINT,
    LOCK,
    RunDir,
    holds_run,
    lock_run_dir,
    read_checkpoint,
)
from eligibility.runs.metrics import read_metrics
from eligibility.runs.plot import plot_curves
from eligibility.runs.progress import Progress
from eligibility.runs.result import RunResult, word
from eligibility.runs.resume import checked, flag, load_config, resume_config, resumed
from eligibility.runs.schema import Schema
from eligibility.runs.signals import interrupted_line
from eligibility.runs.state import TrainState

__all__ = [
    "CHECKPOINT",
    "LOCK",
    "Bookkeeping",
    "Interrupted",
    "Progress",
    "RunDir",
    "RunResult",
    "Schema",
    "Stop",
    "TrainState",
    "checked",
    "flag",
    "holds_run",
    "interrupted_line",
    "load_config",
    "lock_run_dir",
    "plot_curves",
    "read_checkpoint",
    "read_metrics",
    "resume_config",
    "resumed",
    "stop_on_signals",
    "word",
]
