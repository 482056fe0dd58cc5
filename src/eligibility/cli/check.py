"""``eligibility check FILE.py:FUNCTION``: your REINFORCE against the exact policy gradient.

Exit status: 0 when every problem's verdict is ``unbiased`` (or ``scaled``, with
``--allow-scale``), 1 when any is not (so it runs in CI like a test), 2 for bad input and for
a function that could not be checked (verdict ``error``).
"""

from __future__ import annotations

import argparse
import json
import sys

from eligibility._dataclass_args import add_dataclass_arguments, dataclass_from_args


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``check`` and its options (one per field of ``CheckConfig``)."""
    from eligibility.check.run import CheckConfig

    p = subparsers.add_parser(
        "check",
        help="hold your own REINFORCE code against the exact policy gradient",
        description=(
            "Call your function many times on small problems whose policy gradient is known "
            "exactly, compare the mean of its gradients with the truth (z-test, false-alarm "
            "rate alpha per problem), and name the mistake: sign, scale, a dropped γᵗ, or "
            "another bias. Contract and verdicts: docs/check.md."
        ),
    )
    p.add_argument("function", metavar="FILE.py:FUNCTION", help="your loss (or update) function")
    add_dataclass_arguments(p, CheckConfig)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the check; print the table or JSON."""
    from eligibility.check import check, render_text
    from eligibility.check.run import CheckConfig

    config = dataclass_from_args(CheckConfig, args)
    report = check(args.function, config, progress=True)
    if config.format == "json":
        json.dump(report.to_json(), sys.stdout, indent=1, ensure_ascii=False, allow_nan=False)
        sys.stdout.write("\n")
    else:
        render_text(report)
    return report.exit_status
