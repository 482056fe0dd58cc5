"""Which training function runs a setting of a sweep: one table, one line per kind of run.

A sweep's job names its trainer (``"reinforce"`` unless said otherwise); the worker looks the
entry up here and calls ``train(config, resume=DIR or None, callback=...)``. A trainer to be
swept needs: a config dataclass with ``from_dict``/``to_dict``, ``seed`` and ``out`` fields; a
``train`` that writes a resumable run directory and takes ``callback`` (called after each
update; returning False stops the run cleanly, checkpointed); and a ``summarise(result,
config)`` giving the sweep's summary of a finished run (see
:func:`eligibility.sweep.launch.summarise` for the keys the statistics read).

Paths are strings (``module:attribute``) imported on use: a spawned worker imports only the
trainer it runs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Trainer:
    """One kind of run a sweep can train (``module:attribute`` paths)."""

    config: str
    train: str
    summarise: str = "eligibility.sweep.launch:summarise"
    interrupted: str = "eligibility.reinforce.trainer:Interrupted"
    complete: str = "eligibility.sweep.launch:complete"

    def load(self, what: str) -> Any:
        """The object named by the field ``what`` (``config``, ``train``, …), imported."""
        module, _, attr = getattr(self, what).partition(":")
        return getattr(importlib.import_module(module), attr)


TRAINERS: dict[str, Trainer] = {
    "reinforce": Trainer(
        config="eligibility.reinforce.config:Config",
        train="eligibility.reinforce.trainer:train",
    ),
    "finetune": Trainer(
        config="eligibility.lm.config:FinetuneConfig",
        train="eligibility.lm.trainer:finetune",
        summarise="eligibility.lm.trainer:summarise",
        interrupted="eligibility._signals:Interrupted",
        complete="eligibility.lm.trainer:complete",
    ),
}
"""The trainers by name; a job's ``"trainer"`` key picks one (default ``"reinforce"``)."""

DEFAULT = "reinforce"

__all__ = ["DEFAULT", "TRAINERS", "Trainer"]
