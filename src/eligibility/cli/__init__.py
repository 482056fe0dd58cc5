"""The ``eligibility`` command: one subcommand per module in this package.

Every subcommand module defines ``add_parser(subparsers)`` (through
:func:`eligibility.cli.convention.add_command`, over its config dataclass) and
``run(args) -> int``, and imports its heavy dependencies (gymnasium, torch, matplotlib) inside
``run``, so that ``eligibility explain`` starts without them. The convention they all follow
(stdout for results, ``--format``, the exit statuses): docs/cli.md. Bad input never shows a
traceback: a ``ValueError`` (or :class:`UsageError`) becomes one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS = {
    "explain": "eligibility.cli.explain",
    "train": "eligibility.cli.train",
    "finetune": "eligibility.cli.finetune",
    "export": "eligibility.cli.export",
    "evaluate": "eligibility.cli.evaluate",
    "plot": "eligibility.cli.plot",
    "lab": "eligibility.cli.lab",
    "check": "eligibility.cli.check",
    "sweep": "eligibility.cli.sweep",
}


EXTRAS = {
    "gymnasium": "train",
    "matplotlib": "train",
    "safetensors": "train",
    "tensorboard": "train",
    "torch": "torch",
    "transformers": "lm",
}
"""Optional dependencies and the extra of ``eligibility`` that installs each."""


class UsageError(ValueError):
    """Bad input from the command line: reported as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (no usage block), exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        """Print ``PROG: error: MESSAGE (see PROG --help)`` and exit with status 2."""
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)


def build_parser() -> Parser:
    """The top-level parser with every available subcommand."""
    from eligibility import __version__

    parser = Parser(
        prog="eligibility",
        description="REINFORCE with every gradient readable (Williams, 1992).",
    )
    parser.add_argument("--version", action="version", version=f"eligibility {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for modname in COMMANDS.values():
        importlib.import_module(modname).add_parser(sub)
    parser.set_defaults(subcommands=sub.choices)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (see :class:`~.convention.Exit`)."""
    from eligibility._output import forward_warnings, note
    from eligibility.cli.convention import Exit

    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # reported by the subcommand, whose --help lists what it takes
        args.subcommands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    with forward_warnings(args.command):
        try:
            return int(args.run(args) or 0)
        except ValueError as err:
            msg = str(err).splitlines()[0] if str(err) else type(err).__name__
            note(args.command, msg, kind="error")
            return Exit.USAGE
        except OSError as err:  # disk full, permissions: what the atomic writes left is intact
            where = f": {err.filename}" if err.filename else ""
            note(
                args.command,
                f"cannot write{where} ({err.strerror or err}); every file written before is intact",
                kind="error",
            )
            return Exit.USAGE
        except ModuleNotFoundError as err:
            return _missing_extra(args.command, err)
        except KeyboardInterrupt:
            note(args.command, "interrupted", kind="")
            return Exit.SIGINT


def _missing_extra(command: str, err: ModuleNotFoundError) -> int:
    top = (err.name or "").split(".")[0]
    if top not in EXTRAS:
        raise err
    from eligibility._output import note

    note(
        command,
        f"this needs {top}, which is not installed; install it with: "
        f"pip install 'eligibility[{EXTRAS[top]}]'",
        kind="error",
    )
    return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
