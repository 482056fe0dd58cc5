r"""What a user's reward functions log: ``log_metric``'s values and ``log_extra``'s cells.

TRL hands its reward functions two loggers: ``log_metric(name, value)``, a scalar of the batch
(its mean over the calls is the update's), and ``log_extra(column, values)``, one cell per
episode of a column of the completions table. Both are checked at the call, in the user's own
code, so a bad one is a ``ValueError`` naming the function that made it (one line, the run's
last checkpoint whole), never a broken file:

- a metric's column is ``user/NAME``: no column of the run's begins with ``user/``
  (:data:`USER`), so a metric named ``update``, ``loss`` or ``mean_reward`` is a column of its
  own beside the run's, never in its place. A control character of NAME (a newline, a tab) is
  written as its escape (``user/a\nb``) and said once on stderr; metrics.csv quotes a header
  cell that holds a comma or a quote (``csv``), so any text is a whole cell. A name that is not
  text, empty, or longer than :data:`MAX_NAME_CHARS` is refused, and so is a value that is not
  a finite real number (rewards' rule: ``lm.rewards.as_reward``).
- an extra column holds one value per episode of the batch (a list of another length is
  refused, not padded), its name text that is not one of the table's own columns
  (:data:`RESERVED`), its cells at most :data:`MAX_EXTRA_CHARS` characters for an episode (the
  cells are kept with the episodes shown at each evaluation: ``episodes.jsonl``, the trackers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eligibility._output import note, speaker
from eligibility.lm.rewards import as_reward

USER = "user/"
"""The prefix of a user's metrics in metrics.csv and the trackers (``user/NAME``)."""

MAX_NAME_CHARS = 200
"""The longest name ``log_metric`` or ``log_extra`` takes: a column's name, not its data."""

MAX_EXTRA_CHARS = 100_000
"""The most characters of ``log_extra`` cells one episode may hold (each kept at every
evaluation that shows the episode, in ``episodes.jsonl`` and the trackers' table)."""

RESERVED = frozenset(
    {"step", "prompt", "completion", "reward", "turns", "return", "tool_calls", "tool_failures"}
)
"""The columns of an evaluation's episodes that are the run's own (``lm.episodes.shown.TABLE`` and
``lm.episodes.shown.transcript``'s keys): ``log_extra`` cannot name them."""


def _name(logger: str, name: object) -> str:
    """``name`` once it is text of 1 to :data:`MAX_NAME_CHARS` characters, else a ValueError."""
    if not isinstance(name, str):
        why = f"a {type(name).__name__} ({repr(name)[:40]})"
    elif not name:
        why = "empty"
    elif len(name) > MAX_NAME_CHARS:
        why = f"{len(name):,} characters long (at most {MAX_NAME_CHARS} are taken)"
    else:
        return name
    raise ValueError(f"{logger}'s name is {why}: name the column with a short text")


class UserLogs:
    """One batch's ``log_metric`` and ``log_extra``, as the reward functions are handed them.

    Args:
        episodes: the episodes of the batch (``log_extra`` takes one value for each).

    Attributes:
        logged: what ``log_metric`` took, ``{name: [values]}`` (the names as given).
        cells: what ``log_extra`` took, ``{column: [one cell per episode]}``.
    """

    def __init__(self, episodes: int) -> None:
        self.episodes = episodes
        self.logged: dict[str, list[float]] = {}
        self.cells: dict[str, list[Any]] = {}
        self.chars = [0] * episodes

    def log_metric(self, name: str, value: float) -> None:
        """TRL's ``log_metric``: ``value`` one more sample of the batch's metric ``name``.

        Raises:
            ValueError: a name that is not short text, a value that is not a finite number.
        """
        name = _name("log_metric", name)
        try:
            x = as_reward(value)
            if x is None:
                raise ValueError("None, not a number")
        except Exception as err:  # a number type whose own conversion raises too
            raise ValueError(
                f"log_metric({name!r}, …) was given {str(err).split(' (return None')[0]}: give "
                "a finite real number"
            ) from None
        self.logged.setdefault(name, []).append(x)

    def log_extra(self, column: str, values: Any) -> None:
        """TRL's ``log_extra``: ``values[i]`` episode i's cell of ``column``.

        A cell that is not a number, text or None is its text (as TRL's table shows it).

        Raises:
            ValueError: a name that is not short text or is the table's own; values that are
                not a list of one per episode; an episode's cells past :data:`MAX_EXTRA_CHARS`.
        """
        column = _name("log_extra", column)
        if column in RESERVED:
            raise ValueError(
                f"log_extra({column!r}, …): {column!r} is a column of the episodes' table already "
                f"({', '.join(sorted(RESERVED))}): name yours otherwise"
            )
        if isinstance(values, str | bytes | Mapping) or not hasattr(values, "__len__"):
            raise ValueError(
                f"log_extra({column!r}, …) was given a {type(values).__name__}: give a list of "
                f"{self.episodes} values, one per episode of the batch"
            )
        if len(values) != self.episodes:
            raise ValueError(
                f"log_extra({column!r}, …) was given {len(values)} values for the batch's "
                f"{self.episodes} episodes: give one per episode"
            )
        cells = [_cell(v) for v in values]
        for i, cell in enumerate(cells):
            self.chars[i] += len(cell) if isinstance(cell, str) else 0
            if self.chars[i] > MAX_EXTRA_CHARS:
                raise ValueError(
                    f"log_extra({column!r}, …) gives episode {i} more than {MAX_EXTRA_CHARS:,} "
                    f"characters of cells ({self.chars[i]:,} with this column): log a summary; "
                    "the cells are kept with every evaluation's episodes"
                )
        self.cells[column] = cells  # a column logged again: its last values

    def extra(self, i: int) -> dict[str, Any]:
        """Episode ``i``'s cells, by column."""
        return {c: v[i] for c, v in self.cells.items()}


def _cell(value: Any) -> Any:
    """A ``log_extra`` value as a table's cell: a number, text or None as it is, else its text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def user_column(name: str) -> str:
    """``user/NAME``, NAME's control characters (a newline, a tab, …) written as escapes."""
    return USER + "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in name
    )


def user_columns(logged: Mapping[str, list[float]], said: set[str]) -> dict[str, float]:
    """The update's row of what ``log_metric`` logged: each name's mean, under ``user/NAME``.

    A name written otherwise than given (a control character escaped) is said on stderr once:
    ``said`` holds the names said so far (the run's).
    """
    out = {}
    for name, values in logged.items():
        column = user_column(name)
        if column != USER + name and name not in said:
            said.add(name)
            note(
                speaker("finetune"),
                f"log_metric({name!r}, …) is the column {column!r} of metrics.csv (a control "
                "character of the name written as its escape)",
            )
        if values:
            out[column] = sum(values) / len(values)
    return out


__all__ = [
    "MAX_EXTRA_CHARS",
    "MAX_NAME_CHARS",
    "RESERVED",
    "USER",
    "UserLogs",
    "user_column",
    "user_columns",
]
