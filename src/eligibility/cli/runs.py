"""What ``train`` and ``finetune`` share on the command line: the config of a new or resumed run.

Each reads its row of the one table of trainers (:mod:`eligibility.trainers`): its config
class, subject, identity and the name of a new run's directory. A resume (``--resume DIR``)
runs the saved config with the changeable options given now applied
(:func:`eligibility.runs.resumed`: an identity option given with another value is refused by
name); a new run builds its config from the options and, without ``--out``, gets a fresh
directory, ``runs/NAME-DATE-TIME-sSEED-RANDOM``.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from eligibility.cli.convention import fresh_run_dir
from eligibility.trainers import Trainer


def run_config(
    trainer: Trainer, args: argparse.Namespace, given: dict[str, Any]
) -> tuple[Any, str | None]:
    """The config the command runs with, and the directory it resumes (None: a new run).

    Args:
        trainer: the command's row of :data:`eligibility.trainers.TRAINERS`.
        args: the parsed command line (``resume``, the positional ``subject``, ``overwrite``).
        given: the config options given on the command line (field → value).

    Raises:
        UsageError: ``--out`` or ``--overwrite`` with ``--resume``, or no subject and no
            ``--resume``.
        ValueError: a run of another command (naming it), an identity option that differs
            from the resumed run's, a bad value.
    """
    from eligibility.cli import UsageError
    from eligibility.runs import load_config, resumed
    from eligibility.trainers import made_by

    subject = getattr(args, trainer.subject, None)
    if args.resume is not None:
        if any(f in given for f in STAYS) or getattr(args, "overwrite", False):
            refused = "--out/--overwrite" if hasattr(args, "overwrite") else "--out"
            raise UsageError(f"{refused} and --resume: a resumed run stays in its directory")
        if subject:
            given = {**given, trainer.subject: subject}
        made = made_by(args.resume)
        if made is not None and made != trainer:  # the run says what it is
            raise ValueError(
                f"{args.resume} is a run of eligibility {made.command}, not of eligibility "
                f"{trainer.command}: resume it with eligibility {made.command} --resume "
                f"{args.resume}"
            )
        saved = load_config(args.resume, trainer.load("config"))
        identity, infinite = trainer.load("identity"), trainer.load("infinite")
        return resumed(saved, given, identity, infinite), args.resume
    if not subject:
        raise UsageError(trainer.missing)
    config = trainer.make(subject, **given)
    if config.out is None:
        name = trainer.new_dir.format(getattr(config, trainer.subject))
        config = dataclasses.replace(config, out=fresh_run_dir(name, config.seed))
    return config, None


STAYS = ("out",)
"""Fields outside a run's identity that a resume still does not take: it stays in its directory."""


def changeable(trainer: Trainer) -> tuple[str, ...]:
    """The options a resume may change, as ``--resume``'s help names them, in field order.

    The config's fields outside the trainer's identity (``IDENTITY``, read by the resume rule
    itself), but :data:`STAYS`.
    """
    identity = trainer.load("identity")
    fields = dataclasses.fields(trainer.load("config"))
    return tuple(
        "--" + f.name.replace("_", "-")
        for f in fields
        if f.name not in identity and f.name not in STAYS
    )
