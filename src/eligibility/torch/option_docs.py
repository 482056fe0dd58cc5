r"""The docs' tables of the sequence option table, printed from its rows.

``python tools/option_tables.py --markdown`` prints them; ``--update DOC…`` regenerates every
``<!-- table:NAME -->`` … ``<!-- /table:NAME -->`` block of the docs (tests/test_torch_options.py
fails when a doc and the rows differ). A view of :mod:`eligibility.torch.options`, nothing more.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from eligibility.torch.options import (
    DEFAULTS,
    OFF_POLICY_DEFAULTS,
    OFF_POLICY_PROBLEMS,
    OFF_POLICY_ROWS,
    PROBLEMS,
    ROWS,
    VERSIONS,
    Option,
    Verdict,
)


def _verdict_cell(v: Verdict) -> str:
    return v[0] if v[1] is None else f"{v[0]} ({v[1]})"


def _formula(o: Option) -> str:
    """The first line of the row's docstring: its formula."""
    if o.fn is None or not o.fn.__doc__:
        return "—"
    return o.fn.__doc__.strip().splitlines()[0].rstrip(".").replace("|", "\\|")


def _options_table() -> list[str]:
    head = "| kind | option | formula | " + " | ".join(f"`{p}`" for p in PROBLEMS) + " |"
    lines = [head, "|---|---|---|" + "---|" * len(PROBLEMS)]
    for o in ROWS:
        default = " (default)" if DEFAULTS[o.kind] == o.name else ""
        cells = [o.kind, f"`{o.name}`{default}", _formula(o)]
        cells += [_verdict_cell(o.verdicts[p]) for p in PROBLEMS]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _found(o: Option) -> str:
    """The verdicts of a row, the problems named where they differ."""
    by: dict[str, list[str]] = {}
    for p in PROBLEMS:
        by.setdefault(_verdict_cell(o.verdicts[p]), []).append(f"`{p}`")
    if len(by) == 1:
        return next(iter(by))
    return "; ".join(f"{cell} on {', '.join(ps)}" for cell, ps in by.items())


def _frameworks_table() -> list[str]:
    frameworks = list(VERSIONS)
    head = "| kind | option | " + " | ".join(VERSIONS[f] for f in frameworks)
    lines = [head + " | what the check finds |", "|---|---|" + "---|" * (len(frameworks) + 1)]
    for o in ROWS:
        names = [f"`{o.frameworks[f].text}`" if f in o.frameworks else "–" for f in frameworks]
        lines.append("| " + " | ".join([o.kind, f"`{o.name}`", *names, _found(o)]) + " |")
    return lines


def _off_policy_table() -> list[str]:
    frameworks = list(VERSIONS)
    head = "| kind | option | formula | settings | " + " | ".join(VERSIONS[f] for f in frameworks)
    head += " | " + " | ".join(f"`{p}`" for p in OFF_POLICY_PROBLEMS) + " |"
    lines = [head, "|---|---|---|---|" + "---|" * (len(frameworks) + len(OFF_POLICY_PROBLEMS))]
    for o in OFF_POLICY_ROWS:
        default = " (default)" if OFF_POLICY_DEFAULTS[o.kind] == o.name else ""
        settings = ", ".join(f"{k} = {v}" for k, v in o.params.items()) or "–"
        names = [f"`{o.frameworks[f].text}`" if f in o.frameworks else "–" for f in frameworks]
        cells = [o.kind, f"`{o.name}`{default}", _formula(o), settings, *names]
        cells += [_verdict_cell(o.verdicts[p]) for p in OFF_POLICY_PROBLEMS]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


TABLES: dict[str, Callable[[], list[str]]] = {
    "options": _options_table,
    "frameworks": _frameworks_table,
    "offpolicy": _off_policy_table,
}
"""The generated tables, by the name of their marker in the docs."""

_BLOCK = re.compile(r"(<!-- table:(\w+) -->\n)(.*?)(<!-- /table:\2 -->)", re.S)


def markdown(name: str) -> str:
    """The table ``name`` of :data:`TABLES` in Markdown."""
    return "\n".join(TABLES[name]()) + "\n"


def sync(text: str) -> str:
    """``text`` with every ``<!-- table:NAME -->`` … ``<!-- /table:NAME -->`` block regenerated."""
    return _BLOCK.sub(lambda m: m.group(1) + markdown(m.group(2)) + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    """Print the tables (``--markdown``) or rewrite the marked blocks of docs (``--update``)."""
    parser = argparse.ArgumentParser(prog="python tools/option_tables.py")
    parser.add_argument("--markdown", action="store_true", help="print every table")
    parser.add_argument("--update", nargs="+", metavar="DOC", help="regenerate these docs' tables")
    args = parser.parse_args(argv)
    if args.update:
        from eligibility._io import atomic_write_text

        for doc in args.update:
            path = Path(doc)
            atomic_write_text(path, sync(path.read_text(encoding="utf-8")))
    if args.markdown or not args.update:
        for name in TABLES:
            sys.stdout.write(f"<!-- table:{name} -->\n{markdown(name)}<!-- /table:{name} -->\n\n")
    return 0


__all__ = ["TABLES", "main", "markdown", "sync"]
