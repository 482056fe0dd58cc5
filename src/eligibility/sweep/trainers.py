"""Which training function runs a setting of a sweep: one table, one line per kind of run.

A sweep's job names its trainer (``"reinforce"`` unless said otherwise); the worker looks the
entry up here and calls ``train(config, resume=DIR or None, callback=...)``. A trainer to be
swept needs: a config dataclass with ``from_dict``/``to_dict``, ``seed``, ``out`` and
``progress`` fields; a ``train`` that writes a resumable run directory and takes ``callback``
(called after each update; returning False stops the run cleanly, checkpointed) and returns a
result with :class:`eligibility.runs.RunResult`'s fields, which
:func:`eligibility.sweep.launch.summarise` reads; ``budget(result, config)`` says where an
unsolved run is censored, in the unit of its ``env_steps``.

The driver's side of an entry: ``command`` is the subcommand that trains one run (``eligibility
sweep --trainer COMMAND``), ``subject`` the config field the sweep's positional argument fills
(the env id, the task), ``build`` how a run's config is made from it (default: the config class
by keyword) and ``check`` what is checked of the whole grid's configs before anything starts.

Paths are strings (``module:attribute``) imported on use: a spawned worker imports only the
trainer it runs.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Trainer:
    """One kind of run a sweep can train (``module:attribute`` paths)."""

    config: str
    train: str
    command: str
    subject: str
    check: str
    build: str | None = None
    budget: str = "eligibility.sweep.launch:step_budget"
    interrupted: str = "eligibility.reinforce.trainer:Interrupted"
    complete: str = "eligibility.sweep.launch:complete"
    schema: str = "eligibility.reinforce.logs:SCHEMA"  # the words of its metrics and pictures

    def load(self, what: str) -> Any:
        """The object named by the field ``what`` (``config``, ``train``, …), imported."""
        module, _, attr = getattr(self, what).partition(":")
        return functools.reduce(getattr, attr.split("."), importlib.import_module(module))

    def make(self, subject: str, **fields: Any) -> Any:
        """The config of one run: ``subject`` (the env id, the task) and the other fields."""
        if self.build is not None:
            return self.load("build")(subject, **fields)
        return self.load("config")(**{self.subject: subject}, **fields)


TRAINERS: dict[str, Trainer] = {
    "reinforce": Trainer(
        config="eligibility.reinforce.config:Config",
        train="eligibility.reinforce.trainer:train",
        command="train",
        subject="env_id",
        check="eligibility.sweep.run:check_envs",
        build="eligibility.reinforce.config:Config.for_env",
    ),
    "finetune": Trainer(
        config="eligibility.lm.config:FinetuneConfig",
        train="eligibility.lm.trainer:finetune",
        command="finetune",
        subject="task",
        check="eligibility.sweep.run:check_tasks",
        budget="eligibility.sweep.launch:steps_spent",
        interrupted="eligibility._signals:Interrupted",
        complete="eligibility.lm.trainer:complete",
        schema="eligibility.lm.metrics:SCHEMA",
    ),
}
"""The trainers by name; a job's ``"trainer"`` key picks one (default ``"reinforce"``)."""

DEFAULT = "reinforce"


def named(name: str) -> str:
    """The table's key of a trainer given by its key or its command (``train`` → ``reinforce``).

    Raises:
        ValueError: naming the choices.
    """
    for key, trainer in TRAINERS.items():
        if name in (key, trainer.command):
            return key
    choices = ", ".join(t.command for t in TRAINERS.values())
    raise ValueError(f"--trainer must be one of {choices}, got {name!r}")


def command_of(run_dir: str) -> str | None:
    """The command that made the run in ``run_dir`` (``train``, ``finetune``), None: no run.

    A run says what it is by its config: the field its trainer's subject fills (``env_id``,
    ``task``) is in its ``config.json``, and the other trainers' are not.
    """
    from pathlib import Path

    from eligibility._io import read_json

    try:
        saved = read_json(Path(run_dir) / "config.json")
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict):
        return None
    made = [t.command for t in TRAINERS.values() if t.subject in saved]
    return made[0] if len(made) == 1 else None


__all__ = ["DEFAULT", "TRAINERS", "Trainer", "command_of", "named"]
