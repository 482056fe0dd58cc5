"""``eligibility check FILE.py:FUNCTION``: your REINFORCE against the exact policy gradient.

Exit status (docs/cli.md): 0 when every problem's verdict is ``unbiased``, 1 when any is not (so
it runs in CI like a test), 2 for bad input.
"""

from __future__ import annotations

import argparse

from eligibility.cli.convention import Exit, add_command, config_from_args, report


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``check`` and its options (one per field of ``CheckConfig``)."""
    from eligibility.check.run import CheckConfig

    p = add_command(
        subparsers,
        "check",
        CheckConfig,
        run,
        help="hold your own REINFORCE code against the exact policy gradient",
        description=(
            "Call your function many times on small problems whose policy gradient is known "
            "exactly, compare the mean of its gradients with the truth (z-test, false-alarm "
            "rate alpha per problem), and name the mistake: sign, scale, a dropped γᵗ, or "
            "another bias. Contract and verdicts: docs/check.md."
        ),
        extras=("function",),
    )
    p.add_argument("function", metavar="FILE.py:FUNCTION", help="your loss (or update) function")


def run(args: argparse.Namespace) -> int:
    """Run the check; print the table or JSON."""
    from eligibility.check import check, render_text
    from eligibility.check.run import CheckConfig

    config = config_from_args(CheckConfig, args)
    result = check(args.function, config)
    report(args, result, text=render_text, json_value=lambda r: r.to_json())
    return Exit.OK if result.unbiased else Exit.FINDING
