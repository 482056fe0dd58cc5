"""SIGINT and SIGTERM in the sweep's own process: recorded while runs run, at once after.

(The workers use :func:`eligibility._signals.stop_on_signals`, as ``train`` does; the sweep
itself needs more than a flag: it forwards the first signal to its workers and kills them at a
second, then still writes results.json, so it keeps its own handlers.)

While the runs run, a signal is only recorded (:attr:`StopSignals.received`); the launcher
reads the list, passes the first signal on to its workers (each run checkpoints the update in
progress) and kills them at a second. Once every run has ended (the statistics, results.json and
the pictures), :attr:`StopSignals.at_once` makes a signal raise :class:`SweepInterrupted`
straight away: what is being written then is written atomically, so results.json is either the
old file or the new one.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from eligibility._signals import Interrupted


class SweepInterrupted(Interrupted):
    """SIGINT or SIGTERM stopped the sweep; every run that had not ended is checkpointed.

    Attributes:
        signum: the (first) signal.
        out_dir: the sweep directory; the same command resumes it.
        finished: runs that have ended (their results are in results.json).
        total: runs in the grid.
    """

    def __init__(self, signum: int, out_dir: Path, finished: int = 0, total: int = 0) -> None:
        super().__init__(signum, out_dir)
        self.finished = finished
        self.total = total


class StopSignals:
    """A context in which SIGINT/SIGTERM are recorded instead of ending the process.

    Installed in the main thread only (Python delivers signals there); elsewhere it records
    nothing and the process's own handlers stay. The previous handlers come back on exit.
    """

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.received: list[int] = []
        self.at_once = False
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        self.received.append(signum)
        if self.at_once:
            raise SweepInterrupted(self.received[0], self.out_dir)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._previous[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)


__all__ = ["StopSignals", "SweepInterrupted"]
