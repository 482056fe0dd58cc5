"""The progress of a run on stderr: a rich bar on a terminal, plain log lines elsewhere."""

from __future__ import annotations

import sys
import time
from typing import Any

from eligibility.runs.schema import Schema

QUIET_S = 10.0
"""Seconds without a progress line after which a word from inside an update is printed."""


class Progress:
    """A rich progress bar when stderr is a terminal, plain log lines when not; always stderr.

    ``name`` labels the bar (the env id, the task); ``total`` is the step budget it fills
    (None: no known end); ``done`` the steps already taken (a resumed run's).
    """

    def __init__(self, name: str, total: int | None, done: int, schema: Schema) -> None:
        self._last = 0.0
        self._quiet_since = time.perf_counter()  # the last line written (for :meth:`during`)
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
        info = self.schema.info(row, recent_mean)
        steps = row[self.schema.steps]
        if self._bar is not None:
            self._bar.update(self._task, completed=steps, info=info)
            return
        now = time.perf_counter()
        if row[self.schema.evaluation] is not None or now - self._last >= 1.0:
            self._last = self._quiet_since = now
            print(
                f"update {row['update']}  {self.schema.unit} {steps}  {info}",
                file=sys.stderr,
                flush=True,
            )

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
