"""What a REINFORCE run logs, in the words of its field: episode returns vs environment steps.

The run directory itself (config.json, metrics.csv, TensorBoard events, checkpoints, the
learning curve) is the run layer's :class:`eligibility.runs.RunDir`; this module gives it
``train``'s :class:`~eligibility.runs.Schema`.
"""

from __future__ import annotations

from typing import Any

from eligibility.runs import Schema

COLUMNS = (
    "update",
    "env_steps",
    "episodes",
    "mean_return",
    "min_return",
    "max_return",
    "loss",
    "entropy",
    "grad_norm",
    "value_loss",
    "eval_return",
    "eval_env_steps",
    "wall_s",
    "steps_per_s",
)
"""metrics.csv of a ``train`` run (docs/training.md says what each column is)."""
TIMING_COLUMNS = ("wall_s", "steps_per_s")
"""The columns that differ between two runs of one seed (the wall clock's)."""


def _info(row: dict[str, Any], recent_mean: float) -> str:
    """The progress line's numbers: episodes, the recent mean return, speed, the evaluation."""
    ev = "" if row["eval_return"] is None else f"  eval {row['eval_return']:.1f}"
    # what matters first: a narrow terminal keeps the first parts (runs.progress)
    return f"return {recent_mean:.1f}{ev}  ep {row['episodes']}  {row['steps_per_s']:.0f} steps/s"


SCHEMA = Schema(
    columns=COLUMNS,
    tags={
        "charts/mean_return": "mean_return",
        "charts/eval_return": "eval_return",
        "charts/steps_per_s": "steps_per_s",
        "losses/policy_loss": "loss",
        "losses/entropy": "entropy",
        "losses/grad_norm": "grad_norm",
        "losses/value_loss": "value_loss",
    },
    steps="env_steps",
    score="mean_return",
    evaluation="eval_return",
    timing=TIMING_COLUMNS,
    unit="steps",
    x_label="environment steps",
    y_label="episode return\n(batch mean; dots: greedy evaluation)",
    score_name="return",
    evaluation_name="greedy return",
    info=_info,
)
"""``train``'s metrics: what its RunDir writes, its learning curve and its progress show."""
