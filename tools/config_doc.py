"""Write docs/reference/configs.md: every field of the config dataclasses, from the classes.

    python tools/config_doc.py            # print the page
    python tools/config_doc.py --update   # rewrite docs/reference/configs.md

The config dataclass of each command is what the library runs, what the command line parses
and what a run saves; a field's ``metadata["help"]`` is its ``--help`` text. This page shows
each class's docstring and a table of its fields (type, default, help). ``tests/test_docs.py``
fails when the page differs from what this prints.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "configs.md"

CONFIGS = (
    ("eligibility.reinforce", "Config", "train"),
    ("eligibility.lm", "FinetuneConfig", "finetune"),
    ("eligibility.check", "CheckConfig", "check"),
    ("eligibility.lab", "LabConfig", "lab"),
    ("eligibility.cli.sweep", "SweepConfig", "sweep"),
    ("eligibility.cli.evaluate", "EvaluateConfig", "evaluate"),
    ("eligibility.cli.export", "ExportConfig", "export"),
    ("eligibility.cli.plot", "PlotConfig", "plot"),
    ("eligibility.cli.explain", "ExplainConfig", "explain"),
)
"""(module, class, the subcommand that parses it), in the order of the page."""

HEAD = """# The config dataclasses

One dataclass per command: its fields are the command's options (`foo_bar` is `--foo-bar`),
the object the library runs, what a run saves in `config.json` and what the logs record.
Generated from the classes by `tools/config_doc.py`; the functions that take them are in the
[API reference](api.md).
"""


def _cell(text: str) -> str:
    """``text`` as one cell of a Markdown table."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(f: dataclasses.Field) -> str:
    """A field's default as Python writes it, or "required"."""
    if f.default is not dataclasses.MISSING:
        return f"`{f.default!r}`"
    if f.default_factory is not dataclasses.MISSING:
        return f"`{f.default_factory()!r}`"
    return "required"


def section(module: str, name: str, command: str) -> list[str]:
    """One class: its docstring's first paragraph and the table of its fields."""
    cls = getattr(importlib.import_module(module), name)
    doc = (cls.__doc__ or "").strip().split("\n\n")[0]
    out = [
        f"## `{module}.{name}`",
        "",
        f"Parsed by `eligibility {command}`. {' '.join(doc.split())}",
    ]
    out += ["", "| field | type | default | help |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        help_ = f.metadata.get("help", "")
        out.append(f"| `{f.name}` | `{_cell(kind)}` | {_cell(_default(f))} | {_cell(help_)} |")
    return out


def render() -> str:
    """The whole page."""
    out = [HEAD.rstrip()]
    for module, name, command in CONFIGS:
        out += ["", *section(module, name, command)]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the page, or with ``--update`` write it."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--update", action="store_true", help="rewrite docs/reference/configs.md")
    args = p.parse_args(argv)
    text = render()
    if args.update:
        PAGE.parent.mkdir(parents=True, exist_ok=True)
        PAGE.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
