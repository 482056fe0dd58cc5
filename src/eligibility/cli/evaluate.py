"""``eligibility evaluate DIR``: the mean return of a trained run's policy (and a video of it)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Literal

from eligibility._dataclass_args import path_option
from eligibility.cli import COMMANDS
from eligibility.cli.convention import Exit, add_command, config_from_args, note, report


@dataclass(frozen=True)
class EvaluateConfig:
    """What ``eligibility evaluate`` plays, and what it writes."""

    run_dir: str = field(
        metadata={
            "help": "a run directory written by eligibility train or finetune",
            "metavar": "DIR",
        }
    )
    episodes: int = field(
        default=100,
        metadata={
            "help": "episodes to play (a finetune run: sampled completions per prompt; on a "
            "task of turns, the episodes played, each prompt once greedily)"
        },
    )
    policy: Literal["greedy", "sample"] = field(
        default="greedy",
        metadata={
            "help": "greedy: the distribution's mode; sample: actions sampled from the policy",
            "shorthand": {"--greedy": "greedy", "--sample": "sample"},
        },
    )
    seed: int = field(default=0, metadata={"help": "seed of the envs and samples"})
    video: str | None = path_option(
        "also write one episode to this file as an animated GIF (render_mode='rgb_array')",
    )
    show_system: bool = field(
        default=False,
        metadata={
            "help": "a finetune run of episodes: also print their system prompt, once (the "
            "chat template's text before the first user message, the tools' schemas in it)"
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
    """Load the run, play the episodes (or sample the completions), print the summary.

    The run says what it is (:func:`eligibility.trainers.made_by`); its trainer's row names
    the function that evaluates it, and the summary is printed in that trainer's words.
    """
    from eligibility._signals import Interrupted
    from eligibility.trainers import DEFAULT, TRAINERS, made_by

    cfg = config_from_args(EvaluateConfig, args)
    trainer = made_by(cfg.run_dir) or TRAINERS[DEFAULT]  # not a run: its loader says why
    try:
        summary = trainer.load("evaluate")(
            cfg.run_dir,
            episodes=cfg.episodes,
            greedy=cfg.policy == "greedy",
            seed=cfg.seed,
            video=cfg.video,
            show_system=cfg.show_system,
        )
    except Interrupted as stopped:
        note("evaluate", f"{stopped}; nothing written", kind="")
        return stopped.exit_status
    report(args, summary, text=_TEXTS[trainer.command])
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


def _finetune_text(s: dict[str, Any]) -> str:
    lines = [
        f"{s['task']}: accuracy {s['accuracy']:.3f}, mean reward {s['mean_reward']:.3f}, "
        f"mean length {s['mean_length']:.2f} over {s['completions']} {s['policy']} completions"
    ]
    if "episodes" in s:  # a task of turns: each episode's messages, the system prompt once
        from eligibility.lm.episodes.shown import LEFT_OUT, as_text, system_lines

        if s.get("system"):  # --show-system
            lines.append(system_lines(s["system"]))
        elif "system" not in s and any("system" in e for e in s["episodes"]):
            lines.append(LEFT_OUT)
        return "\n".join(lines + [as_text(e) for e in s["episodes"]])
    lines += [
        f"  {e['prompt']} → {e['completion']}  (reward {e['reward']:.2f})" for e in s["examples"]
    ]
    return "\n".join(lines)


_TEXTS = {"train": _text, "finetune": _finetune_text}
"""The summary's line for a person, by the command that made the run."""
