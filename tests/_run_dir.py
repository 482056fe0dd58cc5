"""The least a run directory needs, shared by the tests of the run layer and of its painter.

Apart from ``test_runs`` so that a fresh interpreter that writes a run
(``test_painter``'s probe) imports neither torch nor the lm trainer (1.5 s).
"""

from __future__ import annotations

import dataclasses
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
