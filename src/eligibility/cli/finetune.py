"""``eligibility finetune TASK``: REINFORCE fine-tuning of a causal LM, from FinetuneConfig."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import secrets
import sys
import time
from typing import Any

from eligibility._dataclass_args import add_dataclass_arguments

_CHANGEABLE = ("max_updates", "target_accuracy", "eval_every", "checkpoint_every", "progress")


def add_parser(subparsers: Any) -> None:
    """Register ``finetune``: one option per FinetuneConfig field."""
    from eligibility.lm.config import FinetuneConfig

    p = subparsers.add_parser(
        "finetune",
        help="fine-tune a causal language model with REINFORCE on a verifiable task",
        description=(
            "Sample G completions of each prompt from a causal LM (the built-in tiny "
            "transformer, a Hugging Face model directory, or module:factory), score them with "
            "the task's exact reward and take a REINFORCE step (eligibility.torch's sequence "
            "loss; the defaults are its unbiased set). Built-in tasks: repeat, reverse, sum; "
            "your own: --prompts FILE with a module:function reward. Writes config.json, "
            "metrics.csv, TensorBoard events, learning_curve.png and checkpoints to --out, a "
            "new directory (default: runs/finetune-TASK-TIME-sSEED-RANDOM)."
        ),
    )
    p.add_argument("task", nargs="?", help="repeat, reverse, sum, or module:function")
    add_dataclass_arguments(p, FinetuneConfig, skip=("task",))
    for action in p._actions:  # only what is given overrides a resumed run's saved config
        if action.dest in {f.name for f in dataclasses.fields(FinetuneConfig)} - {"task"}:
            action.default = argparse.SUPPRESS
    p.add_argument(
        "--resume",
        metavar="DIR",
        default=None,
        help=(
            "continue the run in DIR from its last checkpoint; only "
            + ", ".join("--" + c.replace("_", "-") for c in _CHANGEABLE)
            + " may change"
        ),
    )
    p.add_argument("--format", choices=["text", "json"], default="text", help="output format")
    p.set_defaults(run=run)


def default_out(task: str, seed: int) -> str:
    """A fresh run directory name: unique for runs started in the same second, too."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", task)
    return f"runs/finetune-{safe}-{time.strftime('%Y%m%d-%H%M%S')}-s{seed}-{secrets.token_hex(3)}"


def run(args: argparse.Namespace) -> int:
    """Build the config, fine-tune, print the outcome (stdout) and where the run went."""
    from eligibility._signals import Interrupted
    from eligibility.cli import UsageError
    from eligibility.lm.config import IDENTITY, FinetuneConfig
    from eligibility.lm.trainer import finetune
    from eligibility.reinforce.config import resumed
    from eligibility.reinforce.runs import load_config

    names = {f.name for f in dataclasses.fields(FinetuneConfig)}
    given = {k: v for k, v in vars(args).items() if k in names and k != "task"}
    if args.resume is not None:
        if "out" in given:
            raise UsageError("--out and --resume: a resumed run stays in its directory")
        if args.task:
            given["task"] = args.task
        config = resumed(load_config(args.resume, FinetuneConfig), given, IDENTITY)
    else:
        if not args.task:
            raise UsageError("give a TASK (repeat, reverse, sum, or module:function) or --resume")
        config = FinetuneConfig(task=args.task, **given)
        if config.out is None:
            config = dataclasses.replace(config, out=default_out(config.task, config.seed))
    try:
        result = finetune(config, resume=args.resume)
    except Interrupted as stop:
        sys.stderr.write(
            f"eligibility finetune: interrupted ({stop}); checkpoint written; resume with: "
            f"eligibility finetune --resume {stop.out_dir}\n"
        )
        return stop.exit_status
    summary = {
        "task": config.task,
        "model": config.model,
        "solved": result.solved,
        "target_accuracy": result.target_return,
        "greedy_accuracy": result.final_eval_return,
        "updates": result.updates,
        "completions": result.episodes,
        "tokens": result.env_steps,
        "wall_s": result.wall_s,
        "already_solved": result.already_solved,
        "out": str(result.out_dir),
    }
    if args.format == "json":
        print(json.dumps(summary, ensure_ascii=False))
    else:
        acc = result.final_eval_return
        status = (
            "no target"
            if result.target_return is None
            else ("solved" if result.solved else "not solved")
        )
        note = " (already met its target; nothing trained)" if result.already_solved else ""
        print(
            f"{config.task}: {status}{note}, greedy accuracy "
            f"{'n/a' if acc is None else f'{acc:.3f}'} after {result.updates} updates "
            f"({result.episodes} completions) in {result.wall_s:.1f} s; run in {result.out_dir}"
        )
    return 1 if result.target_return is not None and not result.solved else 0
