"""``eligibility check FILE.py:FUNCTION [--sequence]``: your REINFORCE against the exact gradient.

Exit status (docs/cli.md): 0 when every problem's verdict is ``unbiased`` (or ``scaled``, with
``--allow-scale``), 1 when any is not (so it runs in CI like a test), 2 for bad input and for
a function (or a framework configuration) that could not be checked: one line on stderr naming
its error, and no report.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from eligibility._dataclass_args import Alias
from eligibility.cli import COMMANDS
from eligibility.cli.convention import add_command, config_from_args, report


def add_parser(subparsers: Any) -> None:
    """Register ``check`` and its options (one per field of ``CheckConfig``)."""
    from eligibility.check.run import CheckConfig

    p = add_command(
        subparsers,
        "check",
        CheckConfig,
        run,
        help=COMMANDS["check"].help,
        description=(
            "Call your function many times on small problems whose policy gradient is known "
            "exactly, compare the mean of its gradients with the truth (z-test, false-alarm "
            "rate alpha per problem), and name the mistake. Episodic (the default): "
            "fn(policy, episodes, gamma) on four exact MDPs; names sign, scale, a dropped γᵗ. "
            "Sequence (--sequence): a GRPO/RLOO-style fn(logps, batch), or fn(model, batch) "
            "with --form model, on exact causal-LM problems (length, difficulty, kl); names "
            "length-normalised, std-normalised, batch-dependent-normaliser, the KL placements, "
            "no-shift, prompt-in-loss, padding-in-loss, a self-including group mean (scaled), "
            "and the shipped bugs temperature-mismatch (--temperature), accumulation-scaled "
            "(--micro-batches) and masked-tokens-in-normaliser; --kl none declares an "
            "objective without a KL. Off-policy (--off-policy): the batch carries old_logps "
            "and sampler_logps. Your function runs in a worker process (--timeout, --memory). "
            "Exit 0 unbiased (or scaled, with --allow-scale), 1 a finding, 2 bad input or a "
            "function that raised (one line naming its error). Contract and verdicts: "
            "docs/check.md."
        ),
        epilog=(
            "examples: eligibility check my_reinforce.py:loss | eligibility check "
            "my_grpo.py:loss --sequence --kl none | eligibility check my_grpo.py:loss "
            "--sequence --form model --problem length,kl --format json | eligibility check "
            "--framework trl --config grpo.yaml"
        ),
        extras=("function", "framework", "framework_config"),
        alias_actions={"--sequence": _KeepsOffPolicy},
    )
    p.add_argument(
        "function",
        metavar="FILE.py:FUNCTION",
        nargs="?",
        help="your loss: fn(policy, episodes, gamma), or with --sequence fn(logps, batch)",
    )
    p.add_argument(
        "--framework",
        choices=("trl", "verl", "openrlhf"),
        help="check this framework's own advantage and loss code (instead of FUNCTION), as "
        "--config sets it up; implies --sequence (docs/check.md)",
    )
    p.add_argument(
        "--config",
        dest="framework_config",
        metavar="FILE",
        help="with --framework: its configuration, JSON or YAML, in the framework's own keys",
    )


class _KeepsOffPolicy(Alias):
    """``--sequence``, leaving ``--family off-policy`` as it is.

    Off-policy is a sequence family: ``--off-policy --sequence`` means what ``--sequence
    --off-policy`` does.
    """

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        if getattr(namespace, "family", None) != "off-policy":
            super().__call__(parser, namespace, values, option)


def run(args: argparse.Namespace) -> int:
    """Run the check; print the table or JSON."""
    from eligibility.check import check, render_text
    from eligibility.check.report import error_line
    from eligibility.check.run import CheckConfig

    if (args.function is None) == (args.framework is None):
        raise ValueError("give FILE.py:FUNCTION or --framework NAME --config FILE (one of them)")
    if args.framework is None:
        if args.framework_config is not None:
            raise ValueError("--config needs --framework (FUNCTION is configured by its file)")
        result = check(args.function, config_from_args(CheckConfig, args), progress=True)
    else:
        if args.framework_config is None:
            raise ValueError(f"--framework {args.framework} needs --config FILE (JSON or YAML)")
        from eligibility.check import frameworks

        asked = None if args.family == CheckConfig.family else args.family  # the default: none
        family = frameworks.check_settings(args.framework, {"family": asked})["family"]
        settings = dataclasses.asdict(config_from_args(CheckConfig, args, family=family))
        settings.pop("form")
        result = check(
            None, args.framework_config, framework=args.framework, progress=True, **settings
        )
    failed = next((p for p in result.problems if p.verdict == "error"), None)
    if failed is not None:  # the user's code or configuration raised: its error, not a report
        said = error_line(failed.error)
        if said.startswith("the --advantages function"):  # the error is where it arose
            raise ValueError(f"{said} (problem {failed.problem})")
        what = result.subject or args.function
        raise ValueError(f"{what} could not be checked (problem {failed.problem}): {said}")
    report(args, result, text=render_text, json_value=lambda r: r.to_json())
    return result.exit_status
