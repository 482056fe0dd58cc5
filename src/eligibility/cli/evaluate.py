"""``eligibility evaluate DIR``: the mean return of a trained run's policy."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(subparsers: Any) -> None:
    """Register ``evaluate``."""
    p = subparsers.add_parser(
        "evaluate",
        help="evaluate the policy of a training run",
        description="Play episodes with the last checkpoint's policy and report the returns.",
    )
    p.add_argument("run_dir", metavar="DIR", help="a run directory written by eligibility train")
    p.add_argument("--episodes", type=int, default=100, help="episodes to play (default: 100)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--greedy",
        dest="greedy",
        action="store_true",
        default=True,
        help="take the distribution's mode (default)",
    )
    mode.add_argument(
        "--sample", dest="greedy", action="store_false", help="sample actions from the policy"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the envs and samples (default: 0)")
    p.add_argument("--format", choices=["text", "json"], default="text", help="output format")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Load the run, play the episodes, print the summary."""
    import numpy as np

    from eligibility.reinforce.evaluate import MAX_EVAL_ENVS, evaluate_returns, make_vec_env
    from eligibility.reinforce.logs import load_agent

    if args.episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {args.episodes}")
    config, agent, head = load_agent(args.run_dir)
    rng = np.random.default_rng(args.seed)
    envs = make_vec_env(config.env_id, min(args.episodes, MAX_EVAL_ENVS), config.vectorization_mode)
    try:
        returns = evaluate_returns(
            envs,
            lambda s: agent.act(s, rng, greedy=args.greedy),
            args.episodes,
            seed=args.seed,
            to_env=head.to_env,
        )
    finally:
        envs.close()
    summary = {
        "env_id": config.env_id,
        "episodes": int(args.episodes),
        "policy": "greedy" if args.greedy else "sample",
        "mean_return": float(returns.mean()),
        "std_return": float(returns.std()),
        "min_return": float(returns.min()),
        "max_return": float(returns.max()),
    }
    if args.format == "json":
        print(json.dumps(summary))
    else:
        print(
            f"{config.env_id}: mean return {summary['mean_return']:.2f} ± "
            f"{summary['std_return']:.2f} over {args.episodes} {summary['policy']} episodes "
            f"(min {summary['min_return']:.1f}, max {summary['max_return']:.1f})"
        )
    return 0
