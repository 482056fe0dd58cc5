"""``eligibility evaluate DIR``: the mean return of a trained run's policy (and a video of it)."""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import dataclass, field
from typing import Any, Literal

from eligibility.cli import COMMANDS
from eligibility.cli.convention import Exit, add_command, config_from_args, note, report


@dataclass(frozen=True)
class EvaluateConfig:
    """What ``eligibility evaluate`` plays, and what it writes."""

    run_dir: str = field(
        metadata={"help": "a run directory written by eligibility train", "metavar": "DIR"}
    )
    episodes: int = field(default=100, metadata={"help": "episodes to play"})
    policy: Literal["greedy", "sample"] = field(
        default="greedy",
        metadata={
            "help": "greedy: the distribution's mode; sample: actions sampled from the policy",
            "shorthand": {"--greedy": "greedy", "--sample": "sample"},
        },
    )
    seed: int = field(default=0, metadata={"help": "seed of the envs and samples"})
    video: str | None = field(
        default=None,
        metadata={
            "help": "also write one episode to this file as an animated GIF "
            "(render_mode='rgb_array')",
            "metavar": "FILE",
        },
    )


def add_parser(subparsers: Any) -> None:
    """Register ``evaluate``."""
    add_command(
        subparsers,
        "evaluate",
        EvaluateConfig,
        run,
        help=COMMANDS["evaluate"].help,
        description="Play episodes with the last checkpoint's policy and report the returns.",
        positional=("run_dir",),
    )


def run(args: argparse.Namespace) -> int:
    """Load the run, play the episodes, print the summary."""
    from eligibility.sweep.trainers import command_of

    cfg = config_from_args(EvaluateConfig, args)
    if command_of(cfg.run_dir) == "finetune":  # the run says what it is
        return _finetune_run(args, cfg)
    import numpy as np

    from eligibility._signals import Interrupted, stop_on_signals
    from eligibility.reinforce.config import MAX_EPISODES
    from eligibility.reinforce.envs import episode_limit, make_vec_env
    from eligibility.reinforce.rollout import MAX_EVAL_ENVS, evaluate_returns
    from eligibility.reinforce.runs import load

    greedy = cfg.policy == "greedy"
    if not 1 <= cfg.episodes <= MAX_EPISODES:
        raise ValueError(f"--episodes must be in [1, {MAX_EPISODES}], got {cfg.episodes}")
    policy = load(cfg.run_dir, seed=cfg.seed)
    config, agent, spaces = policy.config, policy.agent, policy.spaces
    rng = np.random.default_rng(cfg.seed)
    if cfg.video is not None:  # first: an env that cannot render fails before the episodes
        from eligibility.reinforce.video import episode_frames, write_video

        frames = episode_frames(policy, deterministic=greedy, seed=cfg.seed)
        video = str(write_video(frames, cfg.video))
    limit, _ = episode_limit(config.env_id, config.max_episode_steps)
    try:
        with (
            stop_on_signals() as stop,
            contextlib.closing(
                make_vec_env(
                    config.env_id,
                    min(cfg.episodes, MAX_EVAL_ENVS),
                    config.vectorization_mode,
                    config.env_kwargs,
                    config.max_episode_steps,
                )
            ) as envs,
        ):
            returns = evaluate_returns(
                envs,
                lambda s, m: agent.act(s, rng, greedy=greedy, mask=m),
                cfg.episodes,
                seed=cfg.seed,
                to_env=spaces.head.to_env,
                obs_map=spaces.obs,
                name=config.env_id,
                stop=stop,
                max_episode_steps=limit,
            )
    except Interrupted as stopped:
        note("evaluate", f"{stopped}; nothing written", kind="")
        return stopped.exit_status
    summary: dict[str, Any] = {
        "env_id": config.env_id,
        "episodes": int(cfg.episodes),
        "policy": cfg.policy,
        "mean_return": float(returns.mean()),
        "std_return": float(returns.std()),
        "min_return": float(returns.min()),
        "max_return": float(returns.max()),
    }
    if cfg.video is not None:
        summary.update(video=video, video_frames=len(frames))
    report(args, summary, text=_text)
    return Exit.OK


def _text(s: dict[str, Any]) -> str:
    line = (
        f"{s['env_id']}: mean return {s['mean_return']:.2f} ± {s['std_return']:.2f} over "
        f"{s['episodes']} {s['policy']} episodes (min {s['min_return']:.1f}, "
        f"max {s['max_return']:.1f})"
    )
    if "video" in s:
        line += f"\nvideo: {s['video']} ({s['video_frames']} frames)"
    return line


def _finetune_run(args: argparse.Namespace, cfg: EvaluateConfig) -> int:
    """A finetune run: accuracy on its task's prompts (``--sample``: --episodes per prompt)."""
    from eligibility.lm.runs import evaluate_run

    if cfg.video is not None:
        raise ValueError("--video is for Gymnasium runs; a finetune run has no frames")
    if cfg.episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {cfg.episodes}")
    summary = evaluate_run(
        cfg.run_dir, greedy=cfg.policy == "greedy", samples=cfg.episodes, seed=cfg.seed
    )
    report(args, summary, text=_finetune_text)
    return Exit.OK


def _finetune_text(s: dict[str, Any]) -> str:
    lines = [
        f"{s['task']}: accuracy {s['accuracy']:.3f}, mean reward {s['mean_reward']:.3f}, "
        f"mean length {s['mean_length']:.2f} over {s['completions']} {s['policy']} completions"
    ]
    lines += [
        f"  {e['prompt']} → {e['completion']}  (reward {e['reward']:.2f})" for e in s["examples"]
    ]
    return "\n".join(lines)
