"""``eligibility check``: hold your own REINFORCE against the exact policy gradient.

Exit status: 0 when every problem's verdict is ``unbiased``, 1 when any is not, 2 for bad
input (a file that does not import, a missing function, a wrong signature, a return value that
is not a finite scalar tensor).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Literal

from eligibility.cli._dataclass_args import add_dataclass_arguments, dataclass_from_args


@dataclass(frozen=True)
class CheckConfig:
    """What ``eligibility check`` runs (the keywords of ``eligibility.check``)."""

    target: str = field(
        default="", metadata={"help": "path/to/file.py:function, your loss (or update)"}
    )
    problem: str = field(
        default="all",
        metadata={"help": "bandit, chain, gridworld, short-corridor, or all"},
    )
    samples: int | None = field(
        default=None,
        metadata={
            "help": "N, calls per problem; none: chosen per problem so a sign or ×2 scale error "
            "is caught with ≥ 99%% power"
        },
    )
    episodes: int = field(
        default=16,
        metadata={
            "help": "E, episodes per call (loss form); in the update form, the number your "
            "update plays (it sizes N)"
        },
    )
    seed: int = field(default=0, metadata={"help": "seeds the episodes, env and torch"})
    policy: Literal["logits", "probs"] = field(
        default="logits", metadata={"help": "policy(obs) gives logits, or probabilities"}
    )
    form: Literal["loss", "update"] = field(
        default="loss",
        metadata={"help": "fn(policy, episodes, gamma), or fn(policy, env, gamma)"},
    )
    objective: bool = field(
        default=False, metadata={"help": "fn returns an objective to maximise, not a loss"}
    )
    alpha: float = field(
        default=1e-3, metadata={"help": "false-alarm rate of 'unbiased' per problem"}
    )
    format: Literal["text", "json"] = field(
        default="text", metadata={"help": "a report for a person, or JSON for scripts"}
    )


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``check`` and its options (one per field of ``CheckConfig``)."""
    p = subparsers.add_parser(
        "check",
        help="hold your own REINFORCE loss against the exact policy gradient",
        description=(
            "Call your loss (or update) function many times on episodes of exactly solvable "
            "problems, compare the mean of its gradients with the exact ∇J, and name what is "
            "wrong: a sign error, a dropped γᵗ, a rescaling, or another bias."
        ),
    )
    add_dataclass_arguments(p, CheckConfig, positional=("target",))
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Load the function, check it, print the report; 0 passed, 1 not, 2 bad input."""
    from eligibility.checker import check
    from eligibility.checker.load import load_function

    config = dataclass_from_args(CheckConfig, args)
    fn = load_function(config.target)
    report = check(
        fn,
        problem=config.problem,
        samples=config.samples,
        episodes=config.episodes,
        seed=config.seed,
        policy=config.policy,
        form=config.form,
        objective=config.objective,
        alpha=config.alpha,
    )
    report.function = config.target
    if config.format == "json":
        json.dump(report.to_json(), sys.stdout, indent=1, ensure_ascii=False, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print(report)
    return report.exit_code
