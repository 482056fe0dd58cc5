"""``eligibility evaluate DIR``: the mean return of a trained run's policy (and a video of it)."""

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
    p.add_argument(
        "--video",
        metavar="FILE",
        default=None,
        help="also write one episode as an animated GIF (render_mode='rgb_array')",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Load the run, play the episodes, print the summary."""
    from eligibility.lm.runs import is_finetune_run

    if is_finetune_run(args.run_dir):
        return _finetune_run(args)
    import numpy as np

    from eligibility.reinforce.envs import make_vec_env
    from eligibility.reinforce.evaluate import MAX_EVAL_ENVS, evaluate_returns
    from eligibility.reinforce.runs import load

    if args.episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {args.episodes}")
    policy = load(args.run_dir, seed=args.seed)
    config, agent, spaces = policy.config, policy.agent, policy.spaces
    rng = np.random.default_rng(args.seed)
    envs = make_vec_env(
        config.env_id,
        min(args.episodes, MAX_EVAL_ENVS),
        config.vectorization_mode,
        config.env_kwargs,
    )
    try:
        returns = evaluate_returns(
            envs,
            lambda s, m: agent.act(s, rng, greedy=args.greedy, mask=m),
            args.episodes,
            seed=args.seed,
            to_env=spaces.head.to_env,
            obs_map=spaces.obs,
        )
    finally:
        envs.close()
    summary: dict[str, Any] = {
        "env_id": config.env_id,
        "episodes": int(args.episodes),
        "policy": "greedy" if args.greedy else "sample",
        "mean_return": float(returns.mean()),
        "std_return": float(returns.std()),
        "min_return": float(returns.min()),
        "max_return": float(returns.max()),
    }
    if args.video is not None:
        from eligibility.reinforce.video import episode_frames, write_video

        frames = episode_frames(policy, deterministic=args.greedy, seed=args.seed)
        summary["video"] = str(write_video(frames, args.video))
        summary["video_frames"] = len(frames)
    if args.format == "json":
        print(json.dumps(summary))
    else:
        print(
            f"{config.env_id}: mean return {summary['mean_return']:.2f} ± "
            f"{summary['std_return']:.2f} over {args.episodes} {summary['policy']} episodes "
            f"(min {summary['min_return']:.1f}, max {summary['max_return']:.1f})"
        )
        if args.video is not None:
            print(f"video: {summary['video']} ({len(frames)} frames)")
    return 0


def _finetune_run(args: argparse.Namespace) -> int:
    """A finetune run: accuracy on its task's prompts (``--sample``: --episodes per prompt)."""
    from eligibility.lm.runs import evaluate_run

    if args.video is not None:
        raise ValueError("--video is for Gymnasium runs; a finetune run has no frames")
    if args.episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {args.episodes}")
    s = evaluate_run(args.run_dir, greedy=args.greedy, samples=args.episodes, seed=args.seed)
    if args.format == "json":
        print(json.dumps(s, ensure_ascii=False))
    else:
        print(
            f"{s['task']}: accuracy {s['accuracy']:.3f}, mean reward {s['mean_reward']:.3f}, "
            f"mean length {s['mean_length']:.2f} over {s['completions']} {s['policy']} completions"
        )
        for e in s["examples"]:
            print(f"  {e['prompt']} → {e['completion']}  (reward {e['reward']:.2f})")
    return 0
