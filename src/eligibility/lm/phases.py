"""Where an update's time goes: seconds by phase, logged with each metrics row.

``finetune`` times each phase of an update and logs ``time/<phase>`` beside ``wall_s``:

* ``start``: the set-up before the first update of this process (the task, the model and its
  tokenizer loaded, measured and placed, the run directory opened), in the first row only;
* ``sample``: drawing the completions (each rank its share, and gathering the batch's rows);
* ``reward``: the reward functions, in their workers, and gathering the rewards;
* ``score``: the scoring passes, forward and backward (and the KL reference's pass);
* ``all_reduce``: a wait for the gradient's sum over the ranks after its backward: 0, since
  DDP (and FSDP's reduce-scatter) sums each bucket while the backward runs, inside ``score``
  (the column stays, so that a run's metrics keep their columns);
* ``step``: clipping the gradient and Adam's step;
* ``eval``: the held-out greedy evaluation, in the updates that run one;
* ``write``: writing the previous update's row, its TensorBoard scalars and its checkpoint
  (a row is written before its checkpoint, so that time shows in the next row).

The phases do not overlap, so their sum is at most the wall time between two rows (the first
row's since the run started); what is left is the loop's own bookkeeping. On CUDA each
phase waits for the device at its end, so the seconds are the device's, not its queue's.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

PHASES = ("start", "sample", "reward", "score", "all_reduce", "step", "eval", "write")
"""An update's phases, in the order they run."""

COLUMNS = tuple(f"time/{p}" for p in PHASES)
"""Their metrics.csv columns (timing columns: two runs of one seed differ there)."""


class Phases:
    """The seconds spent in each phase since the last row.

    Args:
        wait: called at the end of each phase before the clock is read (the policy's
            ``synchronize``: the device's queued work waited for on CUDA, nothing elsewhere).
    """

    def __init__(self, wait: Callable[[], None] | None = None) -> None:
        self.wait = wait
        self.spent = dict.fromkeys(PHASES, 0.0)

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        """Time the block as ``phase`` (a name of :data:`PHASES`)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self.wait is not None:
                self.wait()
            self.spent[phase] += time.perf_counter() - t0

    def started(self, seconds: float) -> None:
        """The set-up's ``seconds`` (``start``), logged with the next row."""
        self.spent["start"] = seconds

    def row(self) -> dict[str, float]:
        """The ``time/*`` columns of the row being logged; the clocks start again at 0."""
        out = {f"time/{p}": s for p, s in self.spent.items()}
        self.spent = dict.fromkeys(PHASES, 0.0)
        return out


__all__ = ["COLUMNS", "PHASES", "Phases"]
