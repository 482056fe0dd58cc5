"""``eligibility lab``: the trainer's gradient estimator held against exact gradients.

Exit status: 0 when every estimator that is unbiased by construction passes its z-test, 1 when
one is rejected (which a true H₀ does with probability ≤ α per case), 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys

from eligibility._dataclass_args import add_dataclass_arguments, dataclass_from_args
from eligibility._io import figure_file


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``lab`` and its options (one per field of ``LabConfig``)."""
    from eligibility.lab.run import LabConfig

    p = subparsers.add_parser(
        "lab",
        help="hold the REINFORCE estimator against exact gradients (bias, variance, baselines)",
        description=(
            "On problems small enough to solve exactly (bandits, finite MDPs), run the "
            "trainer's own estimator N times per baseline and compare its mean with the exact "
            "policy gradient (z-scores) and its variance across baselines."
        ),
    )
    add_dataclass_arguments(p, LabConfig)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the lab; print the table or JSON; write the plot if asked."""
    from eligibility.lab.report import plot, render_text
    from eligibility.lab.run import LabConfig, run_lab

    config = dataclass_from_args(LabConfig, args)
    if config.plot:  # before the work, not after it
        figure_file(config.plot, option="--plot")
    result = run_lab(config)
    if config.format == "json":
        json.dump(result.to_json(), sys.stdout, indent=1, ensure_ascii=False, allow_nan=False)
        sys.stdout.write("\n")
    else:
        render_text(result)
    if config.plot:
        path = plot(result, config.plot)
        if config.format == "text":
            print(f"plot written to {path}")
    return 0 if result.all_unbiased_passed else 1
