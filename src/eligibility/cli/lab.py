"""``eligibility lab``: the trainer's gradient estimator held against exact gradients.

Exit status (docs/cli.md): 0 when every estimator that is unbiased by construction passes its
z-test, 1 when one is rejected (which a true H₀ does with probability ≤ α per case), 2 for bad
input.
"""

from __future__ import annotations

import argparse
from typing import Any

from eligibility._io import figure_file
from eligibility.cli import COMMANDS
from eligibility.cli.convention import Exit, add_command, config_from_args, report


def add_parser(subparsers: Any) -> None:
    """Register ``lab`` and its options (one per field of ``LabConfig``)."""
    from eligibility.lab.run import LabConfig

    add_command(
        subparsers,
        "lab",
        LabConfig,
        run,
        help=COMMANDS["lab"].help,
        description=(
            "On problems small enough to solve exactly (bandits, finite MDPs), run the "
            "trainer's own estimator N times per baseline and compare its mean with the exact "
            "policy gradient (z-scores) and its variance across baselines."
        ),
    )


def run(args: argparse.Namespace) -> int:
    """Run the lab; print the table or JSON; write the plot if asked."""
    from eligibility.lab.report import plot, render_text
    from eligibility.lab.run import LabConfig, run_lab

    config = config_from_args(LabConfig, args)
    if config.plot:  # before the work, not after it
        figure_file(config.plot, option="--plot")
    result = run_lab(config)
    written = None if not config.plot else str(plot(result, config.plot))

    def text(result: object) -> str | None:
        render_text(result)
        return None if written is None else f"plot written to {written}"

    report(args, result, text=text, json_value=lambda r: {**r.to_json(), "plot": written})
    return Exit.OK if result.all_unbiased_passed else Exit.FINDING
