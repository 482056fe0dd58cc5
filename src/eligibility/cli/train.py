"""``eligibility train ENV_ID``: REINFORCE on a Gymnasium env, from the Config dataclass."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

from eligibility.cli._dataclass_args import add_dataclass_arguments
from eligibility.reinforce.config import Config

_FIELDS = [f.name for f in dataclasses.fields(Config)]


def add_parser(subparsers: Any) -> None:
    """Register ``train``: one option per Config field (defaults: ``Config.for_env``)."""
    p = subparsers.add_parser(
        "train",
        help="train a policy with REINFORCE on a Gymnasium env",
        description=(
            "Williams' episodic REINFORCE on a Gymnasium env. Options not given take the "
            "tuned defaults for the env (Config.for_env). Writes config.json, metrics.csv, "
            "TensorBoard events, learning_curve.png and checkpoints to --out."
        ),
    )
    p.add_argument("env_id", nargs="?", help="Gymnasium environment id, e.g. CartPole-v1")
    add_dataclass_arguments(p, Config, skip=("env_id",))
    for action in p._actions:  # unset options fall back to Config.for_env, not the class default
        if action.dest in _FIELDS and action.dest != "env_id":
            action.default = argparse.SUPPRESS
    p.add_argument(
        "--resume",
        metavar="DIR",
        default=None,
        help="continue the run in DIR from its last checkpoint (--total-steps may extend it)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Build the Config, train, print where the run went."""
    from eligibility.cli import UsageError
    from eligibility.reinforce import NonFiniteError, train

    given = {k: v for k, v in vars(args).items() if k in _FIELDS and k != "env_id"}
    if args.resume is not None:
        from eligibility.reinforce.logs import load_config

        config = load_config(args.resume)  # train() keeps only these two from it
        keep = {k: given[k] for k in ("total_steps", "progress") if k in given}
        config = dataclasses.replace(config, **keep)
        resume = args.resume
    else:
        if not args.env_id:
            raise UsageError("give an ENV_ID (e.g. CartPole-v1) or --resume DIR")
        if "out" not in given:
            given["out"] = f"runs/{args.env_id}-{time.strftime('%Y%m%d-%H%M%S')}"
        config = Config.for_env(args.env_id, **given)  # Config turns --hidden's list into a tuple
        resume = None
    try:
        result = train(config, resume=resume)
    except NonFiniteError as err:
        sys.stderr.write(f"eligibility train: {err}\n")
        return 1
    status = "solved" if result.solved else "not solved"
    ev = "" if result.final_eval_return is None else f", eval return {result.final_eval_return:.1f}"
    print(
        f"{config.env_id}: {status} after {result.env_steps} steps, {result.episodes} episodes, "
        f"{result.updates} updates in {result.wall_s:.1f} s{ev}; run in {result.out_dir}"
    )
    return 0
