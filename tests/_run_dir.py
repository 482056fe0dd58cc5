"""The least a run directory needs, shared by the tests of the run layer and of its painter.

Apart from ``test_runs`` so that a fresh interpreter that writes a run
(``test_painter``'s probe) imports neither torch nor the lm trainer (1.5 s), nor pytest.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from eligibility import runs


@dataclasses.dataclass
class _Config:
    """The least a RunDir needs of a config: ``out`` and ``to_dict``."""

    out: str
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _row(schema: runs.Schema, i: int) -> dict[str, Any]:
    row = {c: float(i) for c in schema.columns}
    row.update({"update": i, schema.steps: 10 * i, schema.evaluation: 0.5 if i % 2 else None})
    return row


KEEP = object()
"""The painter the run started for itself (none where matplotlib is imported)."""


def write_six_rows(
    path: Path, schema: runs.Schema, painter: Any = KEEP, before_finish: Any = None
) -> None:
    """A run of six rows in ``path``, finished; ``painter`` (unless :data:`KEEP`) replaces the
    one the run started, which is stopped; ``before_finish(run, history)`` runs before it ends."""
    with runs.RunDir.open(_Config(str(path)), schema, frozenset({"seed"})) as run:
        if painter is not KEEP:
            if run._painter is not None:
                run._painter.stop()
            run._painter = painter
        history = [_row(schema, i) for i in range(1, 7)]
        for row in history:
            run.log(row)
        if before_finish is not None:
            before_finish(run, history)
        run.finish(history)
