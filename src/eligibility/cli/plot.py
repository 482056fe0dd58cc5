"""``eligibility plot DIR [DIR …]``: learning curves of one or more runs, overlaid."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eligibility._dataclass_args import path_option
from eligibility.cli import COMMANDS
from eligibility.cli.convention import Exit, add_command, config_from_args, deprecated, report

ONE_RUN, MANY_RUNS = "learning_curve.png", "learning_curves.png"
"""The picture's name in ``--out`` (or the default place) for one run, and for several."""


@dataclass(frozen=True)
class PlotConfig:
    """What ``eligibility plot`` draws, and where."""

    run_dirs: tuple[str, ...] = field(metadata={"help": "run directories", "metavar": "DIR"})
    out: str | None = path_option(
        f"directory to write {ONE_RUN} (one run) or {MANY_RUNS} (several) in "
        f"(default: the run's own directory for one run, else the current directory)",
        "DIR",
    )
    plot: str | None = path_option("the picture file itself, .png, .svg or .pdf")


def add_parser(subparsers: Any) -> None:
    """Register ``plot``."""
    add_command(
        subparsers,
        "plot",
        PlotConfig,
        run,
        help=COMMANDS["plot"].help,
        description=(
            "Each run's batch mean score vs its steps (smoothed line, evaluation dots): "
            "return vs environment steps for train, reward vs completion tokens for finetune."
        ),
        positional=("run_dirs",),
    )


def picture(config: PlotConfig) -> Path:
    """Where the picture goes: ``--plot``, else its name in ``--out`` (or the default place).

    ``--out FILE.png`` (the old spelling, when ``--out`` named the file) still works, with a
    deprecation note.
    """
    from eligibility._io import FIGURE_FORMATS

    dirs = [Path(d) for d in config.run_dirs]
    name = ONE_RUN if len(dirs) == 1 else MANY_RUNS
    if config.plot is not None:
        if config.out is not None:
            return Path(config.out) / config.plot
        return Path(config.plot)
    if config.out is not None:
        out = Path(config.out)
        if out.suffix.lower().lstrip(".") in FIGURE_FORMATS and not out.is_dir():
            deprecated("plot", f"--out {out} (a file)", f"--plot {out}")
            return out
        return out / name
    return dirs[0] / name if len(dirs) == 1 else Path(name)


def schema_of(dirs: list[Path]) -> Any:
    """The metrics' schema of the runs: ``train``'s or ``finetune``'s, read from metrics.csv.

    Raises:
        ValueError: a directory without metrics.csv, of an unknown kind, or runs of both kinds.
    """
    from eligibility.lm.metrics import SCHEMA as FINETUNE
    from eligibility.reinforce.logs import SCHEMA as TRAIN

    kinds = {"train": TRAIN, "finetune": FINETUNE}
    found: dict[str, list[Path]] = {}
    for d in dirs:
        if not (d / "metrics.csv").is_file():
            raise ValueError(f"{str(d)!r} is not a run directory (no metrics.csv)")
        header = _header(d / "metrics.csv")
        # a run's own columns, and those it widened by (rewards/NAME/*, a user's user/NAME)
        kind = next((k for k, s in kinds.items() if set(s.columns) <= header), None)
        if kind is None:
            raise ValueError(f"{str(d)!r}: metrics.csv has columns of no known kind of run")
        found.setdefault(kind, []).append(d)
    if len(found) > 1:
        raise ValueError(
            "give runs of one kind: "
            + "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in found.items())
        )
    return kinds[next(iter(found))]


def _header(path: Path) -> set[str]:
    """The columns of a metrics.csv (read as CSV: a quoted cell may hold a comma); none if empty."""
    import csv

    try:
        with open(path, newline="", encoding="utf-8") as f:
            return set(next(csv.reader(f), []))
    except (UnicodeDecodeError, csv.Error):
        return set()


def run(args: argparse.Namespace) -> int:
    """Draw the curves, print the file written."""
    from eligibility._io import figure_file
    from eligibility.runs import plot_curves

    config = config_from_args(PlotConfig, args)
    dirs = [Path(d) for d in config.run_dirs]
    schema = schema_of(dirs)
    out = picture(config)
    option = "--plot" if config.plot is not None else "--out"
    figure_file(out, option=option)  # before drawing: a bad path leaves nothing behind
    plot_curves(dirs, out, schema)
    result = {"plot": str(out), "runs": [str(d) for d in dirs]}
    report(args, result, text=lambda r: r["plot"])
    return Exit.OK
