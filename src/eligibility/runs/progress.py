"""The progress of a run on stderr: a rich bar on a terminal, plain log lines elsewhere."""

from __future__ import annotations

import sys
import time
from typing import Any

from eligibility.runs.schema import Schema

QUIET_S = 10.0
"""Seconds without a progress line after which a word from inside an update is printed."""

Budget = tuple[str, int, int]
"""What a run's end is counted in: (a row's column, its value at the start, its value at the end):
``("update", 0, 400)`` for ``finetune --max-updates 400``."""


def left(done: float, remaining: float, elapsed_s: float) -> float | None:
    """t_left = remaining · elapsed / done: the seconds left at the pace so far (None: no pace).

    ``done`` and ``remaining`` count the budget's unit (updates, steps) since the display
    started and to the end; a run that stops at its target stops sooner.
    """
    return None if done <= 0 else max(remaining, 0.0) * elapsed_s / done


def duration(seconds: float) -> str:
    """A duration for a person: ``7 s``, ``2 min 05 s``, ``2 h 01 min``."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Progress:
    """A rich progress bar when stderr is a terminal, plain log lines when not; always stderr.

    ``name`` labels the bar (the env id, the task); ``total`` is the step budget it fills
    (None: no known end); ``done`` the steps already taken (a resumed run's). ``budget``:
    what the run's end is counted in, from which each line estimates the time left at the
    pace of the updates since the display started (None: ``total`` in steps, if any).
    """

    def __init__(
        self,
        name: str,
        total: int | None,
        done: int,
        schema: Schema,
        *,
        budget: Budget | None = None,
    ) -> None:
        self._last = 0.0
        self._t0 = self._quiet_since = time.perf_counter()  # the last line (:meth:`during`)
        self.budget = budget if budget is not None or total is None else (schema.steps, done, total)
        self._bar: Any = None
        self.schema = schema
        if sys.stderr.isatty():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            from eligibility._output import stderr_console

            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(schema.unit + "  {task.fields[info]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                transient=False,
                console=stderr_console(),
            )
            self._task = self._bar.add_task(name, total=total, completed=done, info="")
            self._bar.start()

    def update(self, row: dict[str, Any], recent_mean: float) -> None:
        """Show one update's numbers (a log line at most once a second, and at evaluations)."""
        now = time.perf_counter()
        info = self.schema.info(row, recent_mean) + self._left(row, now)
        steps = row[self.schema.steps]
        if self._bar is not None:
            self._bar.update(self._task, completed=steps, info=info)
            return
        if row[self.schema.evaluation] is not None or now - self._last >= 1.0:
            self._last = self._quiet_since = now
            print(
                f"update {row['update']}  {self.schema.unit} {steps}  {info}",
                file=sys.stderr,
                flush=True,
            )

    def _left(self, row: dict[str, Any], now: float) -> str:
        """``  ~40 s left``: :func:`left` on the budget (empty: no pace yet, or none left)."""
        column, start, end = self.budget or ("", 0, 0)
        if row.get(column) is None or row[column] >= end:
            return ""
        seconds = left(row[column] - start, end - row[column], now - self._t0)
        return "" if seconds is None else f"  ~{duration(seconds)} left"

    def during(self, text: str) -> None:
        """A word from inside an update (its episodes' turn): the bar's at once, else a line.

        A log line only once :data:`QUIET_S` seconds have passed without one, so that a run
        of quick updates prints nothing more, and an update that plays for minutes (an
        environment that never ends, a large ``--max-turns``) still shows that it moves.
        """
        if self._bar is not None:
            self._bar.update(self._task, info=text)
            return
        now = time.perf_counter()
        if now - self._quiet_since >= QUIET_S:
            self._quiet_since = now
            print(text, file=sys.stderr, flush=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the bar."""
        if self._bar is not None:
            self._bar.stop()
