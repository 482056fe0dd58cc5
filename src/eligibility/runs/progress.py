"""The progress of a run on stderr: a rich bar on a terminal, plain log lines elsewhere.

A line says what matters first, and a terminal too narrow for all of it keeps that and drops
the rest (:func:`fitted`): where the run stands in its budget (``update 12/400``, a known total
said as a total), the time left, then the trainer's numbers in its own order (the accuracy or
return before the speed). The time left is a forecast (``~4 min left``) where the run ends at
its budget, and a bound (``≤ 4 min left``) where it may stop sooner, at a target.
"""

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


SEP = "  "
"""Between the parts of a progress line (the trainers' own lines join their parts so too)."""

BAR_WIDTH = 10
"""The bar's columns on a terminal (the line's text takes the rest)."""

FIRST = 3
"""The parts a narrow terminal keeps before the run's name: the budget, the time left, and
the trainer's first (the accuracy, the return)."""

MIN_NAME = 12
"""The fewest columns the run's name is cut to on a narrow terminal."""


def fitted(parts: list[str], width: int | None) -> str:
    """``parts`` joined by :data:`SEP`, the last ones dropped whole until the line fits.

    The first part is cut (``…``) only where it alone is wider than ``width`` (None: no limit).

    >>> fitted(["update 3/9", "~40 s left", "accuracy 0.500", "12 tokens/s"], 28)
    'update 3/9  ~40 s left'
    """
    parts = [p for p in parts if p]
    line = ""
    for part in parts:
        longer = f"{line}{SEP}{part}" if line else part
        if width is not None and len(longer) > width:
            break
        line = longer
    if not line and parts and width is not None:
        line = parts[0][: max(width - 1, 0)] + "…"
    return line


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

    ``name`` labels the bar (the env id, the task); ``total`` is the step budget (None: no
    known end); ``done`` the steps already taken (a resumed run's). ``budget``: what the run's
    end is counted in (the bar fills it, the line says it as ``update n/N``), from which each
    line estimates the time left at the pace of the updates since the display started (None:
    ``total`` in steps, if any). ``bounded``: the run may stop before its budget (at a
    target), so the time left is an upper bound, said ``≤``.
    """

    def __init__(
        self,
        name: str,
        total: int | None,
        done: int,
        schema: Schema,
        *,
        budget: Budget | None = None,
        bounded: bool = False,
    ) -> None:
        self._last = 0.0
        self._t0 = self._quiet_since = time.perf_counter()  # the last line (:meth:`during`)
        self.budget = budget if budget is not None or total is None else (schema.steps, done, total)
        self.bounded = bounded
        self._bar: Any = None
        self.schema = schema
        self.name = name
        if sys.stderr.isatty():
            from rich.progress import BarColumn, TextColumn
            from rich.progress import Progress as RichProgress

            from eligibility._output import stderr_console

            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(bar_width=BAR_WIDTH),
                TextColumn("{task.fields[info]}"),
                transient=False,
                console=stderr_console(),
            )
            _, at, end = self.budget or ("", done, None)
            self._task = self._bar.add_task(name, total=end, completed=at, info="")
            self._bar.start()

    def parts(self, row: dict[str, Any], recent_mean: float, now: float) -> list[str]:
        """The line's parts, what matters first: the budget, the time left, the trainer's."""
        column, _, end = self.budget or ("", 0, 0)
        where = f"update {row['update']}"
        if row.get(column) is not None:  # the budget's total, said as one
            where += (
                f"/{end}" if column == "update" else f"{SEP}{self.schema.unit} {row[column]}/{end}"
            )
        return [where, self._left(row, now), *self.schema.info(row, recent_mean).split(SEP)]

    def update(self, row: dict[str, Any], recent_mean: float) -> None:
        """Show one update's numbers (a log line at most once a second, and at evaluations).

        On a terminal the line is cut to its width (:func:`fitted`); a log line is whole, with
        the steps counted (``tokens 1234``) at its end.
        """
        now = time.perf_counter()
        parts = self.parts(row, recent_mean, now)
        steps = row[self.schema.steps]
        if self._bar is not None:
            column = (self.budget or (self.schema.steps,))[0]
            name, room = self._room(fitted(parts[:FIRST], None))
            self._bar.update(
                self._task,
                completed=row.get(column, steps),
                description=name,
                info=fitted(parts, room),
            )
            return
        if row[self.schema.evaluation] is not None or now - self._last >= 1.0:
            self._last = self._quiet_since = now
            counted = (self.budget or ("",))[0] == self.schema.steps  # said with its total
            line = fitted([*parts, "" if counted else f"{self.schema.unit} {steps}"], None)
            print(line, file=sys.stderr, flush=True)

    def _room(self, first: str) -> tuple[str, int]:
        """(the bar's label, the columns its text has), the label cut so that ``first`` fits.

        The label (the run's name) matters less than the line's first parts: on a narrow
        terminal it is cut (``…``) before they are, to no less than :data:`MIN_NAME` columns.
        """
        width = self._bar.console.width - BAR_WIDTH - 2 * len(SEP)
        name = self.name
        if len(name) + len(first) > width and len(name) > MIN_NAME:
            name = name[: max(width - len(first), MIN_NAME) - 1] + "…"
        return name, max(width - len(name), 1)

    def _left(self, row: dict[str, Any], now: float) -> str:
        """``~40 s left`` (``≤ 40 s left`` where bounded): :func:`left` on the budget.

        Empty: no pace yet, or none left.
        """
        column, start, end = self.budget or ("", 0, 0)
        if row.get(column) is None or row[column] >= end:
            return ""
        seconds = left(row[column] - start, end - row[column], now - self._t0)
        if seconds is None:
            return ""
        return f"{'≤ ' if self.bounded else '~'}{duration(seconds)} left"

    def during(self, text: str) -> None:
        """A word from inside an update (its episodes' turn): the bar's at once, else a line.

        A log line only once :data:`QUIET_S` seconds have passed without one, so that a run
        of quick updates prints nothing more, and an update that plays for minutes (an
        environment that never ends, a large ``--max-turns``) still shows that it moves.
        """
        if self._bar is not None:
            name, room = self._room(text)
            self._bar.update(self._task, description=name, info=fitted([text], room))
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
