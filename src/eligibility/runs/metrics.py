"""metrics.csv: one row per update, read back whole (a row cut short by a kill is dropped)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def fmt(v: Any) -> str:
    """A metrics.csv cell: empty for None, ``repr`` for a float (exact), else ``str``."""
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def csv_line(cells: Iterable[str]) -> str:
    """One line of metrics.csv: a cell that holds a comma, a quote or a line break is quoted.

    (``csv``'s minimal quoting: a user's column named ``a,b`` is one cell of the header.)
    """
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    return buf.getvalue()


def parse(v: str) -> float | None:
    """A metrics.csv cell read back: None for an empty one, else the float."""
    return None if v == "" else float(v)


def read_metrics(run_dir: str | Path) -> list[dict[str, str]]:
    """The complete rows of ``metrics.csv`` (a row cut short by a kill is dropped).

    Raises:
        ValueError: naming the file, where it is not UTF-8 CSV text (binary bytes, a field
            past ``csv``'s limit).
    """
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        return []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            last = (reader.fieldnames or [""])[-1]  # a timing column: every complete row has it
    except (UnicodeDecodeError, csv.Error) as err:
        why = f"not UTF-8 text at byte {err.start}" if isinstance(err, UnicodeDecodeError) else err
        raise ValueError(
            f"{path} is not the run's metrics.csv ({why}): restore it from a copy, or start a new "
            "run"
        ) from None
    return [r for r in rows if None not in r.values() and r.get(last) not in (None, "")]
