"""The progress of a run on stderr: a rich bar on a terminal, plain log lines elsewhere."""

from __future__ import annotations

import sys
import time
from typing import Any

from eligibility.runs.schema import Schema


class Progress:
    """A rich progress bar when stderr is a terminal, plain log lines when not; always stderr.

    ``name`` labels the bar (the env id, the task); ``total`` is the step budget it fills
    (None: no known end); ``done`` the steps already taken (a resumed run's).
    """

    def __init__(self, name: str, total: int | None, done: int, schema: Schema) -> None:
        self._last = 0.0
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
            self._last = now
            print(
                f"update {row['update']}  {self.schema.unit} {steps}  {info}",
                file=sys.stderr,
                flush=True,
            )

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the bar."""
        if self._bar is not None:
            self._bar.stop()
