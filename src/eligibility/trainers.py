"""The trainers, one table: every kind of run, and everything that reads one.

One row per kind of run (``train``: REINFORCE on a Gymnasium env; ``finetune``: a causal LM on
a verifiable task). The command line reads it to make a new or resumed run's config
(``eligibility train``/``finetune`` and their ``--resume``), ``evaluate`` and ``export`` to
act on a run directory, and the sweep to train, check and summarise its runs. Another kind of
run joins all of them as one more row.

A run says what it is: its ``config.json`` holds its trainer's subject field (``env_id``,
``task``) and no other trainer's (:func:`made_by`), so a command given another kind of run
answers with one line naming the command that made it.

Paths are strings (``module:attribute``), imported on use: this module imports nothing of a
trainer, so ``eligibility --help`` and ``train`` on the NumPy backend never import torch, and a
sweep's worker imports only the trainer it runs. It sits above both trainers' packages and
below the command line and the sweep, which import it.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Trainer:
    """One kind of run: the command that makes it, and its pieces as ``module:attribute`` paths.

    Attributes:
        command: the subcommand that trains one run (``train``, ``finetune``): the kind a run
            directory says it is, and ``eligibility sweep --trainer COMMAND``.
        subject: the config field the command's positional argument fills (``env_id``,
            ``task``); a run's config.json holds it, and no other trainer's.
        config: the config dataclass (``from_dict``/``to_dict``, ``seed``, ``out``,
            ``progress``).
        identity: the fields of a run's identity (a resume refuses other values by name).
        infinite: the float fields that may be +inf.
        train: the loop, ``train(config, resume=DIR or None, callback=...)``, whose result has
            :class:`eligibility.runs.RunResult`'s fields; it takes ``callback`` (called after
            each update; returning False stops the run cleanly, checkpointed).
        schema: its metrics' columns and words (:class:`eligibility.runs.Schema`).
        evaluate: ``evaluate(run_dir, episodes=, greedy=, seed=, video=, show_system=)``: a
            run's policy
            played or sampled, as a summary dict (``eligibility evaluate``).
        check: ``check(config)``: what is checked of a config before any run of a sweep starts
            (the env made, the task and model built); a ValueError names what is wrong.
        check_fields: the config fields ``check`` depends on (it runs once per combination).
        bound: the result's count and the config field that bounds it: a run that returns has
            ended on its own when solved or when the count reached the bound.
        build: how a run's config is made from the subject and the options given (None: the
            config class, by keyword).
        export: ``export(run_dir, out, merge=)``: the run's policy as a Hugging Face directory
            (None: this kind of run has no such format).
        new_dir: a new run's directory name before its date, time and seed (``{}``: the
            subject).
        missing: the command line's message when neither the subject nor ``--resume`` is given.
    """

    command: str
    subject: str
    config: str
    identity: str
    infinite: str
    train: str
    schema: str
    evaluate: str
    check: str
    check_fields: tuple[str, ...]
    bound: tuple[str, str]
    missing: str
    build: str | None = None
    export: str | None = None
    new_dir: str = "{}"

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
        command="train",
        subject="env_id",
        config="eligibility.reinforce.config:Config",
        identity="eligibility.reinforce.config:IDENTITY",
        infinite="eligibility.reinforce.config:INFINITE",
        train="eligibility.reinforce.trainer:train",
        schema="eligibility.reinforce.logs:SCHEMA",
        evaluate="eligibility.reinforce.runs:evaluate_run",
        check="eligibility.reinforce.envs:check_env",
        check_fields=("env_id", "env_kwargs", "continuous_head"),
        bound=("steps", "total_steps"),
        missing="give an ENV_ID (e.g. CartPole-v1) or --resume DIR",
        build="eligibility.reinforce.config:Config.for_env",  # the env's tuned defaults
    ),
    "finetune": Trainer(
        command="finetune",
        subject="task",
        config="eligibility.lm.config:FinetuneConfig",
        identity="eligibility.lm.config:IDENTITY",
        infinite="eligibility.lm.config:INFINITE",
        train="eligibility.lm.trainer:finetune",
        schema="eligibility.lm.metrics:SCHEMA",
        evaluate="eligibility.lm.runs:evaluate_run",
        check="eligibility.lm.build:check_task",
        check_fields=(
            "task",
            "prompts",
            "eval_prompts",
            "tokenizer",
            "completion_chars",
            "model",
            "d_model",
            "n_layer",
            "n_head",
            "max_completion_length",
        ),
        bound=("updates", "max_updates"),
        missing="give a TASK (repeat, reverse, sum, or module:function) or --resume",
        export="eligibility.lm.runs:export",
        new_dir="finetune-{}",
    ),
}
"""The trainers by key; a sweep's job names its key (``"trainer"``, default ``"reinforce"``)."""

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


def lookup(name: str) -> Trainer:
    """The row of a trainer given by its key or its command (see :func:`named`)."""
    return TRAINERS[named(name)]


def made_by(run_dir: str | Path) -> Trainer | None:
    """The row of the trainer that made the run in ``run_dir`` (None: no run there).

    A run says what it is by its config: the field its trainer's subject fills (``env_id``,
    ``task``) is in its ``config.json``, and the other trainers' are not.
    """
    from eligibility._io import read_json

    try:
        saved = read_json(Path(run_dir) / "config.json")
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict):
        return None
    made = [t for t in TRAINERS.values() if t.subject in saved]
    return made[0] if len(made) == 1 else None


__all__ = ["DEFAULT", "TRAINERS", "Trainer", "lookup", "made_by", "named"]
