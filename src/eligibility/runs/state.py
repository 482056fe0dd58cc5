"""A run's own state: its counters, random streams, history and checkpoint cadence.

As torchtitan's ``TrainState`` (a ``Stateful``): one small object that a checkpoint saves with
:meth:`TrainState.state_dict` and a resume restores with :meth:`TrainState.load_state_dict`.
The run directory, the checkpointer and the ranks are handed it; none of them writes a
trainer's field. Its parts:

- ``counters``: ``updates``, the schema's steps and the trainer's other counts;
- ``rngs``: every random stream of the run, in a fixed order (a checkpoint keeps their states,
  so a resumed run draws what the uninterrupted one would have);
- ``history``: one dict per update, metrics.csv's rows (kept in metrics.csv, not in the
  checkpoint: a resume reads them back up to the checkpoint's update);
- the cadence: the counters and streams after the last completed update (what a stop goes
  back to and a failure checkpoints) and the update the checkpoint on disk holds.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class TrainState:
    """The counters, random streams, history and cadence of one run (see the module).

    Attributes:
        counters: ``updates``, the schema's steps, the trainer's other counts.
        rngs: every random stream a checkpoint saves, in a fixed order.
        history: one dict per update (a resumed run's earlier ones first).
        last: the counters and streams' states after the last completed update
            (:meth:`mark_completed`; the form of :meth:`snapshot`).
        checkpointed: the update the checkpoint on disk holds (0: none).
    """

    counters: dict[str, int]
    rngs: list[np.random.Generator]
    history: list[dict[str, Any]] = field(default_factory=list)
    last: dict[str, Any] | None = None
    checkpointed: int = 0

    def snapshot(self) -> dict[str, Any]:
        """The counters and the streams' states now: what a checkpoint file holds of the run."""
        return {
            "counters": dict(self.counters),
            "rngs": [copy.deepcopy(r.bit_generator.state) for r in self.rngs],
        }

    def state_dict(self) -> dict[str, Any]:
        """:meth:`snapshot` and the history: everything a resume restores."""
        return {**self.snapshot(), "history": list(self.history)}

    def load_state_dict(self, saved: Mapping[str, Any]) -> None:
        """Take a saved state (:meth:`state_dict`'s form); the checkpoint holds its update.

        Checked whole before anything is set: a state refused leaves this one as it was.

        Raises:
            ValueError: a counter that is not a whole number ≥ 0, ``updates`` missing, or
                stream states that are not this run's (another number of them, or one that
                is not a generator state of this run's kind), naming which.
        """
        counters = saved.get("counters")
        if not isinstance(counters, dict) or "updates" not in counters:
            raise ValueError("its counters are not a mapping with `updates`")
        bad = [
            f"{k}={v!r}"
            for k, v in counters.items()
            if not isinstance(v, int) or isinstance(v, bool) or v < 0
        ]
        if bad:
            raise ValueError(f"its counters must be whole numbers >= 0: {', '.join(bad)[:200]}")
        states = saved.get("rngs")
        if not isinstance(states, list) or len(states) != len(self.rngs):
            got = len(states) if isinstance(states, list) else type(states).__name__
            raise ValueError(
                f"it holds {got} random generator states where the run has {len(self.rngs)}"
            )
        for i, (r, state) in enumerate(zip(self.rngs, states, strict=True)):
            trial = copy.deepcopy(r)  # set on a copy first: a refusal changes nothing
            try:
                trial.bit_generator.state = state
            except (TypeError, ValueError, KeyError) as err:
                raise ValueError(
                    f"its random generator state {i} is not one of this run's "
                    f"({type(err).__name__}: {str(err)[:120]})"
                ) from None
        self.counters.update(counters)
        for r, state in zip(self.rngs, states, strict=True):
            r.bit_generator.state = state
        self.history = list(saved.get("history", []))
        self.checkpointed = self.counters["updates"]

    def mark_completed(self) -> None:
        """Remember the counters and streams now: the last completed update."""
        self.last = self.snapshot()

    def go_back(self) -> None:
        """Set the counters and streams back to the last completed update's (none: as now)."""
        if self.last is None:
            return
        self.counters.update(self.last["counters"])
        for r, state in zip(self.rngs, self.last["rngs"], strict=True):
            r.bit_generator.state = copy.deepcopy(state)

    def saved(self, snapshot: Mapping[str, Any]) -> None:
        """The checkpoint on disk now holds ``snapshot`` (:meth:`snapshot`'s form)."""
        self.checkpointed = int(snapshot["counters"]["updates"])


__all__ = ["TrainState"]
