"""The command-line convention every subcommand follows (docs/cli.md), as code.

A subcommand module defines a config dataclass (one field per option, ``metadata={"help": …}``)
and registers itself with :func:`add_command`; its ``run(args)`` builds the config with
:func:`config_from_args`, does the work, prints the result with :func:`report` (stdout: the
result only) and returns an :class:`Exit` status. ``tests/test_cli_convention.py`` walks
``COMMANDS`` and holds every subcommand to this.

    @dataclass(frozen=True)
    class HelloConfig:
        name: str = field(metadata={"help": "who to greet"})
        times: int = field(default=1, metadata={"help": "how often"})


    def add_parser(subparsers):
        add_command(subparsers, "hello", HelloConfig, run, help="greet", positional=("name",))


    def run(args):
        config = config_from_args(HelloConfig, args)
        result = {"greeting": f"hello {config.name}"}
        report(args, result, text=lambda r: r["greeting"])
        return Exit.OK
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import re
import secrets
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from eligibility._dataclass_args import Alias, add_dataclass_arguments, dataclass_from_args
from eligibility._output import emit_json, note

T = TypeVar("T")


class Exit(enum.IntEnum):
    """The exit statuses of every subcommand (``int(Exit.USAGE) == 2``)."""

    OK = 0
    """Success."""
    FINDING = 1
    """The command's own negative finding: a biased estimator (``check``, ``lab``), a target
    that was asked for and not reached (``train``), a failed run in a sweep (``sweep``)."""
    USAGE = 2
    """Bad input or usage: one line on stderr, never a traceback."""
    SIGINT = 128 + signal.SIGINT
    """Interrupted by Ctrl-C (130), after checkpointing what can be."""
    SIGTERM = 128 + signal.SIGTERM
    """Terminated (143), after checkpointing what can be."""


def exit_for_signal(signum: int) -> Exit:
    """The exit status of a run stopped by ``signum``: 130 (SIGINT) or 143 (SIGTERM)."""
    return Exit.SIGTERM if signum == signal.SIGTERM else Exit.SIGINT


def interrupted(command: str, stop: Any) -> Exit:
    """Say on stderr that a run was stopped by a signal and how to resume it; its exit status.

    ``stop`` is the :class:`eligibility._signals.Interrupted` the run raised after writing its
    checkpoint (``signum``, ``out_dir``).
    """
    from eligibility.runs import interrupted_line

    note(command, interrupted_line(command, stop), kind="")
    return exit_for_signal(stop.signum)


def fresh_run_dir(name: str, seed: int) -> str:
    """A new run directory's default name, ``runs/NAME-DATE-TIME-sSEED-<6 hex>``.

    Unique for runs started in the same second too; the directory itself is made without
    ``exist_ok``, so two runs never share one.
    """
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name)
    return f"runs/{safe}-{time.strftime('%Y%m%d-%H%M%S')}-s{seed}-{secrets.token_hex(3)}"


FORMATS = ("text", "json")
"""The output formats every reporting subcommand offers (some add more, e.g. ``markdown``)."""


def add_format_option(parser: argparse.ArgumentParser, formats: Iterable[str] = FORMATS) -> None:
    """Add ``--format`` (``text`` by default); ``formats`` must include ``text`` and ``json``."""
    formats = tuple(formats)
    if not {"text", "json"} <= set(formats):
        raise ValueError(f"--format must offer text and json, got {formats}")
    parser.add_argument(
        "--format",
        choices=formats,
        default="text",
        help="text for a person; json (UTF-8, one document on stdout) for scripts (default: text)",
    )


def add_command(
    subparsers: Any,
    name: str,
    config: type,
    run: Callable[[argparse.Namespace], int],
    *,
    help: str,
    description: str | None = None,
    positional: tuple[str, ...] = (),
    skip: tuple[str, ...] = (),
    formats: Iterable[str] | None = FORMATS,
    extras: tuple[str, ...] = (),
    given_only: bool = False,
    alias_actions: Mapping[str, type[Alias]] | None = None,
    **parser_kwargs: Any,
) -> argparse.ArgumentParser:
    """Register the subcommand ``name``, whose options are the fields of ``config``.

    Args:
        subparsers: from ``parser.add_subparsers``.
        name: the subcommand.
        config: its config dataclass (the field metadata understood, ``help``, ``flag``,
            ``metavar``, ``deprecated``, ``shorthand`` and ``repeat``: ``_dataclass_args``).
        run: ``run(args) -> exit status``.
        help: the one line in ``eligibility --help``.
        description: the paragraph of ``eligibility NAME --help``.
        positional: fields taken as positional arguments.
        skip: fields the module adds itself (with a custom parser); they still count as fields.
        formats: the ``--format`` choices (None: the command reports nothing to format); not
            added when the config has a ``format`` field of its own.
        extras: options that are not config fields (e.g. ``train --resume``), declared so the
            convention test knows them.
        given_only: only the options given reach the namespace, and a positional may be left
            out (``_dataclass_args.add_dataclass_arguments``).
        alias_actions: a shorthand spelling → its ``Alias`` subclass (the same).
        **parser_kwargs: passed to ``add_parser`` (``epilog``, ``formatter_class``).

    Returns:
        The subparser, for options in ``skip`` or ``extras``.
    """
    p = subparsers.add_parser(name, help=help, description=description, **parser_kwargs)
    configure_command(
        p,
        config,
        run,
        positional=positional,
        skip=skip,
        formats=formats,
        extras=extras,
        given_only=given_only,
        alias_actions=alias_actions,
    )
    return p


def configure_command(
    parser: argparse.ArgumentParser,
    config: type,
    run: Callable[[argparse.Namespace], int],
    *,
    positional: tuple[str, ...] = (),
    skip: tuple[str, ...] = (),
    formats: Iterable[str] | None = FORMATS,
    extras: Iterable[str] = (),
    given_only: bool = False,
    alias_actions: Mapping[str, type[Alias]] | None = None,
) -> dict[str, argparse.Action]:
    """:func:`add_command` on a subparser made by hand: the config's options, ``--format``, ``run``.

    For a subcommand whose parser is built elsewhere (``explain`` builds its own, with the
    distributions' parameter flags as ``extras``), or that reads its options' actions back
    (``finetune``'s TRL spellings); the arguments are those of ``add_command``.

    Returns:
        Each config field's action, by field name.
    """
    actions = add_dataclass_arguments(
        parser,
        config,
        positional=positional,
        skip=skip,
        given_only=given_only,
        alias_actions=alias_actions,
    )
    fields = {f.name for f in dataclasses.fields(config)}
    if formats is not None and "format" not in fields:
        add_format_option(parser, formats)
    parser.set_defaults(run=run, config_class=config, extras=tuple(extras))
    return actions


def config_from_args(cls: type[T], args: argparse.Namespace, **overrides: Any) -> T:
    """The config dataclass from the parsed command line (see ``dataclass_from_args``)."""
    return dataclass_from_args(cls, args, **overrides)


def report(
    args: argparse.Namespace,
    result: Any,
    *,
    text: Callable[[Any], str | None],
    json_value: Callable[[Any], Any] | None = None,
    formats: dict[str, Callable[[Any], str | None]] | None = None,
) -> None:
    """Print the result on stdout in ``args.format``: JSON, or the text a person reads.

    Args:
        args: the parsed command line (its ``format``; ``text`` when it has none).
        result: what the command found.
        text: renders it as text; returns the string to print, or None when it printed itself
            (a rich table through :func:`eligibility._output.stdout_console`).
        json_value: ``result`` as JSON-ready values (default: ``result`` itself).
        formats: renderers of further formats (``markdown``), by name.
    """
    fmt = getattr(args, "format", "text")
    if fmt == "json":
        emit_json(result if json_value is None else json_value(result))
        return
    render = (formats or {}).get(fmt, text)
    out = render(result)
    if out is not None:
        print(out, flush=True)


def deprecated(command: str, old: str, new: str) -> None:
    """The one-line note on stderr for an old spelling that still works (for one release)."""
    note(command, f"{old} is deprecated and will be removed; use {new}", kind="deprecated")


__all__ = [
    "FORMATS",
    "Exit",
    "add_command",
    "add_format_option",
    "config_from_args",
    "configure_command",
    "deprecated",
    "exit_for_signal",
    "report",
]
