"""Write docs/cli.md's reference of every subcommand from the parsers themselves.

    python tools/cli_doc.py            # print the generated part
    python tools/cli_doc.py --update   # rewrite it in docs/cli.md

Every subcommand registered in ``eligibility.cli.COMMANDS`` gets a section: its description, its
usage line and a table of its options, each with its help and default as ``--help`` prints them.
The part between ``<!-- cli:start -->`` and ``<!-- cli:end -->`` is generated; the convention
above it is written by hand. ``tests/test_docs.py`` fails when docs/cli.md differs from what
this prints.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"
START, END = "<!-- cli:start -->", "<!-- cli:end -->"
WIDTH = "100"
"""The terminal width the usage lines are wrapped at, whatever the terminal."""


def _cell(text: str) -> str:
    """``text`` as one cell of a Markdown table."""
    return " ".join(text.split()).replace("|", "\\|")


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """The table of ``parser``'s arguments: positionals first, then options, as declared."""
    formatter = parser._get_formatter()  # the one that expands %(default)s as --help does
    rows = ["| argument | what it is |", "|---|---|"]
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        if action.option_strings:
            metavar = (
                formatter._format_args(action, action.dest.upper()) if action.nargs != 0 else ""
            )
            name = ", ".join(
                f"`{s}{' ' + metavar if metavar else ''}`" for s in action.option_strings
            )
        else:
            name = f"`{formatter._metavar_formatter(action, action.dest)(1)[0]}`"
        rows.append(f"| {name} | {_cell(formatter._expand_help(action) if action.help else '')} |")
    return rows


def render() -> str:
    """The generated part of docs/cli.md: one section per subcommand, in ``COMMANDS``'s order."""
    from eligibility.cli import COMMANDS, build_parser

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH  # argparse wraps at the terminal's width: not the page's
    try:
        parser = build_parser()
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        out = [START, "", "## Every subcommand", ""]
        out += [f"- [`eligibility {n}`](#eligibility-{n}): {c.help}" for n, c in COMMANDS.items()]
        for name in COMMANDS:
            sub = subparsers.choices[name]
            out += ["", f"### `eligibility {name}`", ""]
            if sub.description:
                out += [" ".join(sub.description.split()), ""]
            out += ["```text", sub.format_usage().strip(), "```", "", *_options(sub)]
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return "\n".join([*out, "", END])


def splice(page: str, generated: str) -> str:
    """``page`` with the text from START to END replaced by ``generated``."""
    head, start, rest = page.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise ValueError(f"docs/cli.md lacks the markers {START} … {END}")
    return head + generated + tail


def main(argv: list[str] | None = None) -> int:
    """Print the generated part, or with ``--update`` write it into docs/cli.md."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--update", action="store_true", help="rewrite docs/cli.md in place")
    args = p.parse_args(argv)
    generated = render()
    if args.update:
        PAGE.write_text(splice(PAGE.read_text("utf-8"), generated), encoding="utf-8")
    else:
        sys.stdout.write(generated + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
