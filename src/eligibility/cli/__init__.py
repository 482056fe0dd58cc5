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
import gc
import importlib
import sys
from collections.abc import Iterable, Sequence
from typing import NamedTuple


class Command(NamedTuple):
    """A subcommand: the module that defines it, and its one line in ``eligibility --help``."""

    module: str
    help: str


COMMANDS = {
    "explain": Command(
        "eligibility.cli.explain",
        "derive and show the eligibility (backpropagation rule) for given numbers",
    ),
    "train": Command("eligibility.cli.train", "train a policy with REINFORCE on a Gymnasium env"),
    "finetune": Command(
        "eligibility.cli.finetune",
        "fine-tune a causal language model with REINFORCE on a verifiable task",
    ),
    "export": Command(
        "eligibility.cli.export", "write a fine-tuned policy as a Hugging Face model directory"
    ),
    "evaluate": Command("eligibility.cli.evaluate", "evaluate the policy of a training run"),
    "plot": Command("eligibility.cli.plot", "plot the learning curves of training runs"),
    "lab": Command(
        "eligibility.cli.lab",
        "hold the REINFORCE estimator against exact gradients (bias, variance, baselines)",
    ),
    "check": Command(
        "eligibility.cli.check", "hold your own REINFORCE code against the exact policy gradient"
    ),
    "sweep": Command(
        "eligibility.cli.sweep",
        "train a grid of settings on many seeds, in parallel (local or Ray), with statistics",
    ),
}
"""Every subcommand. Only the one being run is imported (with what it imports: torch for
``finetune``, gymnasium for ``train``): the others are one line in ``eligibility --help``."""


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
        """Print ``PROG: error: MESSAGE (see PROG --help)`` and exit with status 2.

        The message is cut to one line's bound (``_output.LINE``): argparse quotes what was
        given, which may be megabytes.
        """
        from eligibility._output import LINE, cut, escaped

        said = escaped(cut(" ".join(message.splitlines()), LINE))
        sys.stderr.write(f"{self.prog}: error: {said} (see {self.prog} --help)\n")
        raise SystemExit(2)


def build_parser(commands: Iterable[str] | None = None) -> Parser:
    """The top-level parser; ``commands`` (None: all) are built whole, the others by name only.

    A subcommand built by name only is its line in ``eligibility --help``: its module (and
    what that imports) is not loaded.
    """
    from eligibility import __version__

    parser = Parser(
        prog="eligibility",
        description="REINFORCE with every gradient readable (Williams, 1992).",
    )
    parser.add_argument("--version", action="version", version=f"eligibility {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    whole = set(COMMANDS) if commands is None else set(commands)
    for name, command in COMMANDS.items():
        if name in whole:
            importlib.import_module(command.module).add_parser(sub)
        else:
            sub.add_parser(name, help=command.help, add_help=False)
    parser.set_defaults(subcommands=sub.choices)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (its first word that is not an option), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (see :class:`~.convention.Exit`)."""
    from eligibility._output import escaped, forward_warnings, note
    from eligibility._signals import Terminated, terminate_as_interrupt
    from eligibility.cli.convention import Exit

    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser([c] if (c := _command_of(argv)) in COMMANDS else [])
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # reported by the subcommand, whose --help lists what it takes
        args.subcommands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    with forward_warnings(args.command), terminate_as_interrupt():
        try:
            return int(args.run(args) or 0)
        except ValueError as err:
            # escaped first: a carriage return of the user's would end the line there
            msg = escaped(str(err)).splitlines()[0] if str(err) else type(err).__name__
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
        except Terminated:
            note(args.command, "interrupted (SIGTERM)", kind="")
            return Exit.SIGTERM
        except KeyboardInterrupt:
            note(args.command, "interrupted", kind="")
            return Exit.SIGINT


def program() -> int:
    """The ``eligibility`` program: :func:`main` on ``sys.argv``, then a quick exit.

    The objects a run leaves (torch's, transformers' modules, a model's graph) are frozen out of
    the collector before the interpreter ends: its last collection walked them all for about a
    second after a finetune run (docs/measurements/lm.md, the end of a run). No
    file of the run is left open to it: every one is written whole and closed before ``main``
    returns, and the user's code runs in processes of its own.
    """
    code = main()
    gc.freeze()
    return code


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
