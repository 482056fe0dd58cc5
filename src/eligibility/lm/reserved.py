"""The names a run keeps for itself where a user's names meet its own: one table.

A reward function is called as TRL's ``GRPOTrainer`` calls one (``lm.rewards``): its arguments
``prompts``, ``completions`` and ``completion_ids``, each other column of the data by its name,
and TRL's keywords ``trainer_state``, ``log_metric``, ``log_extra`` (every kind of task) and
``environments`` (episodes with environments). A data column of one of those names would be
passed twice or overwritten (TRL overwrites it without a word), and one named ``completion``
TRL drops from the call; so each is refused when the data is read (:func:`refuse_columns`).

What ``log_extra(column, values)`` logs is a column of the table of an evaluation's episodes
(``episodes.jsonl``'s records, ``lm.episodes.shown.transcript``; the trackers' ``completions``
table, ``lm.evaluation.table``), beside the run's own columns there; a cell of one of those
names would be dropped or overwrite the run's, so ``log_extra`` refuses it at the call
(``lm.usermetrics``). ``log_metric``'s names need no list: each is the column ``user/NAME``,
a namespace no column of the run's is in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

CALL = ("prompts", "completions", "completion_ids")
"""The arguments of the reward call that carry the batch (TRL's names)."""

KEYWORDS = ("trainer_state", "log_metric", "log_extra", "environments")
"""TRL's other keywords of the reward call (``environments`` only where there are some)."""

DROPPED = ("completion",)
"""A data column TRL leaves out of the reward call (with ``prompt``, the call's prompts)."""

COLUMNS = (*CALL, *KEYWORDS, *DROPPED)
"""The data columns refused: each would collide with the reward call's own arguments."""

RECORD = ("prompt", "completion", "rewards", "return", "tool_calls", "tool_failures", "system")
"""The keys of an episode's record (``episodes.jsonl``; ``lm.episodes.shown.transcript``)."""

TABLE = ("step", "prompt", "completion", "reward", "tool_calls", "tool_failures")
"""The trackers' ``completions`` table's own columns (TRL's ``log_completions``' first ones)."""

CELLS = tuple(dict.fromkeys((*RECORD, *TABLE)))
"""The columns ``log_extra`` refuses: the run's own in an episode's record or the table."""


def refuse_columns(records: Iterable[Mapping[str, Any]], where: str) -> None:
    """Refuse records with a column the reward call keeps for itself (:data:`COLUMNS`).

    Every record's columns are read (a column only the last record has is passed too).

    Raises:
        ValueError: the first such column (sorted), naming ``where`` and the call's names.
    """
    clash = sorted({k for r in records for k in r} & set(COLUMNS))
    if clash:
        raise ValueError(
            f"{where}: a column named {clash[0]!r} collides with the reward call's own "
            f"arguments ({', '.join(COLUMNS)}); rename it"
        )


__all__ = ["CALL", "CELLS", "COLUMNS", "DROPPED", "KEYWORDS", "RECORD", "TABLE", "refuse_columns"]
