"""``eligibility plot DIR [DIR …]``: learning curves of one or more runs, overlaid."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    """Register ``plot``."""
    p = subparsers.add_parser(
        "plot",
        help="plot the learning curves of training runs",
        description="Return vs environment steps of each run (smoothed line, evaluation dots).",
    )
    p.add_argument("run_dirs", metavar="DIR", nargs="+", help="run directories")
    p.add_argument(
        "--out",
        default=None,
        help=(
            "picture to write, .png, .svg or .pdf (default: DIR/learning_curve.png for one "
            "run, else learning_curves.png)"
        ),
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Draw the curves, print the file written."""
    from eligibility._io import figure_file
    from eligibility.reinforce.logs import plot_curves

    dirs = [Path(d) for d in args.run_dirs]
    for d in dirs:
        if not (d / "metrics.csv").is_file():
            raise ValueError(f"{str(d)!r} is not a run directory (no metrics.csv)")
    if args.out is not None:
        out = Path(args.out)
    else:
        out = dirs[0] / "learning_curve.png" if len(dirs) == 1 else Path("learning_curves.png")
    figure_file(out, option="--out")  # before drawing: a bad path leaves nothing behind
    plot_curves(dirs, out)
    print(out)
    return 0
