"""What ``train`` and ``finetune`` share on the command line: the config of a new or resumed run.

A resume (``--resume DIR``) runs the saved config with the changeable options given now applied
(:func:`eligibility.runs.resumed`: an identity option given with another value is refused by
name); a new run builds its config from the options and, without ``--out``, gets a fresh
directory, ``runs/NAME-DATE-TIME-sSEED-RANDOM``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eligibility.cli.convention import fresh_run_dir


@dataclass(frozen=True)
class RunCommand:
    """How one training command makes its config.

    Attributes:
        cls: the config dataclass (``from_dict``, ``seed``, ``out``).
        subject: the field the positional argument fills (``env_id``, ``task``).
        build: ``build(subject, **given)``: a new run's config.
        name: the name of a new run's directory, from its config.
        identity: the fields of a run's identity.
        infinite: the float fields that may be +inf.
        missing: the message when neither the positional argument nor ``--resume`` is given.
    """

    cls: type
    subject: str
    build: Callable[..., Any]
    name: Callable[[Any], str]
    identity: frozenset[str]
    missing: str
    infinite: frozenset[str] = frozenset()


def run_config(
    command: RunCommand, args: argparse.Namespace, given: dict[str, Any]
) -> tuple[Any, str | None]:
    """The config the command runs with, and the directory it resumes (None: a new run).

    Args:
        command: the command's :class:`RunCommand`.
        args: the parsed command line (``resume``, the positional ``subject``, ``overwrite``).
        given: the config options given on the command line (field → value).

    Raises:
        UsageError: ``--out`` or ``--overwrite`` with ``--resume``, or no subject and no
            ``--resume``.
        ValueError: an identity option that differs from the resumed run's, a bad value.
    """
    from eligibility.cli import UsageError
    from eligibility.runs import load_config, resumed
    from eligibility.sweep.trainers import command_of

    subject = getattr(args, command.subject, None)
    if args.resume is not None:
        if "out" in given or getattr(args, "overwrite", False):
            refused = "--out/--overwrite" if hasattr(args, "overwrite") else "--out"
            raise UsageError(f"{refused} and --resume: a resumed run stays in its directory")
        if subject:
            given = {**given, command.subject: subject}
        made = command_of(args.resume)
        if made is not None and made != args.command:  # the run says what it is
            raise ValueError(
                f"{args.resume} is a run of eligibility {made}, not of eligibility "
                f"{args.command}: resume it with eligibility {made} --resume {args.resume}"
            )
        saved = load_config(args.resume, command.cls)
        return resumed(saved, given, command.identity, command.infinite), args.resume
    if not subject:
        raise UsageError(command.missing)
    config = command.build(subject, **given)
    if config.out is None:
        config = dataclasses.replace(config, out=fresh_run_dir(command.name(config), config.seed))
    return config, None
