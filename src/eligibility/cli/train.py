"""``eligibility train ENV_ID``: REINFORCE on a Gymnasium env, from the Config dataclass."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import math
import re
import secrets
import signal
import sys
import time
from typing import Any

from eligibility._dataclass_args import add_dataclass_arguments
from eligibility.reinforce.config import TUNED, Config

_FIELDS = [f.name for f in dataclasses.fields(Config)]


def add_parser(subparsers: Any) -> None:
    """Register ``train``: one option per Config field (defaults: ``Config.for_env``)."""
    p = subparsers.add_parser(
        "train",
        help="train a policy with REINFORCE on a Gymnasium env",
        description=(
            "Williams' episodic REINFORCE on a Gymnasium env. Options not given take the "
            "tuned defaults for the env (Config.for_env). Writes config.json, metrics.csv, "
            "TensorBoard events, learning_curve.png and checkpoints to --out, a new directory "
            "(default: runs/ENV-TIME-sSEED-RANDOM). --target-return none: no target. "
            f"Tuned defaults exist for {', '.join(TUNED)} (with any --env-kwargs); other envs "
            "take the defaults shown below."
        ),
    )
    p.add_argument("env_id", nargs="?", help="Gymnasium environment id, e.g. CartPole-v1")
    add_dataclass_arguments(p, Config, skip=("env_id", "env_kwargs"))
    p.add_argument(
        "--env-kwargs",
        nargs="+",
        metavar="KEY=VALUE",
        dest="env_kwargs",
        type=_env_kwarg,
        default=argparse.SUPPRESS,
        help=(
            "keyword arguments of gymnasium.make, values read as Python literals, e.g. "
            "is_slippery=False map_name='8x8' (recorded in the run's config)"
        ),
    )
    for action in p._actions:  # unset options fall back to Config.for_env, not the class default
        if action.dest in _FIELDS and action.dest != "env_id":
            action.default = argparse.SUPPRESS
    p.add_argument(
        "--resume",
        metavar="DIR",
        default=None,
        help=(
            "continue the run in DIR from its last checkpoint; options that define the run "
            "(env, backend, network, baseline, optimiser, seed, …) must match it, while "
            "--total-steps, --target-return, --eval-every, --eval-episodes, --checkpoint-every "
            "and --progress may change"
        ),
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run already in --out (its config, metrics and checkpoint)",
    )
    p.set_defaults(run=run)


def _env_kwarg(text: str) -> tuple[str, Any]:
    """``key=value`` → (key, value), the value a Python literal (else the text itself)."""
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(
            f"expected KEY=VALUE, e.g. is_slippery=False; got {text!r}"
        )
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value  # map_name=8x8: a bare word is text


TOLERANCE = 0.05
"""Greedy and sampled evaluations are both printed when they differ by more than this × |target|
(× 1 when the env has no target)."""


def default_out(env_id: str, seed: int) -> str:
    """A fresh run directory name: unique for runs started in the same second, too."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", env_id)
    return f"runs/{safe}-{time.strftime('%Y%m%d-%H%M%S')}-s{seed}-{secrets.token_hex(3)}"


def run(args: argparse.Namespace) -> int:
    """Build the Config, train, print where the run went."""
    from eligibility._signals import Interrupted
    from eligibility.cli import UsageError
    from eligibility.reinforce import NonFiniteError, train
    from eligibility.reinforce.config import resumed

    given = {k: v for k, v in vars(args).items() if k in _FIELDS and k != "env_id"}
    if "env_kwargs" in given:
        given["env_kwargs"] = dict(given["env_kwargs"])
    if "target_return" in given and given["target_return"] is None:
        given["target_return"] = math.inf  # --target-return none: no target
    if args.resume is not None:
        from eligibility.reinforce.runs import load_config

        if "out" in given or args.overwrite:
            raise UsageError("--out/--overwrite and --resume: a resumed run stays in its directory")
        if args.env_id:
            given["env_id"] = args.env_id
        config = resumed(load_config(args.resume), given)
        resume = args.resume
    else:
        if not args.env_id:
            raise UsageError("give an ENV_ID (e.g. CartPole-v1) or --resume DIR")
        config = Config.for_env(args.env_id, **given)  # Config turns --hidden's list into a tuple
        if "out" not in given:
            config = dataclasses.replace(config, out=default_out(config.env_id, config.seed))
        resume = None
    try:
        result = train(config, resume=resume, overwrite=args.overwrite)
    except NonFiniteError as err:
        sys.stderr.write(f"eligibility train: {err}\n")
        return 1
    except Interrupted as stop:
        name = signal.Signals(stop.signum).name
        sys.stderr.write(
            f"eligibility train: interrupted ({name}); checkpoint written; resume with: "
            f"eligibility train --resume {stop.out_dir}\n"
        )
        return stop.exit_status
    if result.already_solved:
        print(
            f"{result.out_dir} already met its target (eval return {result.final_eval_return:.1f}"
            f" ≥ {result.target_return:g}); nothing to train. Raise --target-return, or pass "
            "--target-return none, to train on"
        )
        return 0
    if result.target_return is None:
        status = "no target"
    else:
        status = "solved" if result.solved else "not solved"
    ev = "" if result.final_eval_return is None else f", eval return {result.final_eval_return:.1f}"
    greedy, sampled = result.final_eval_return, result.sampled_eval_return
    scale = 1.0 if result.target_return is None else max(abs(result.target_return), 1.0)
    if greedy is not None and sampled is not None and abs(greedy - sampled) > TOLERANCE * scale:
        ev = f", eval return {greedy:.1f} greedy, {sampled:.1f} sampled"
    print(
        f"{config.env_id}: {status} after {result.env_steps} steps, {result.episodes} episodes, "
        f"{result.updates} updates in {result.wall_s:.1f} s{ev}; run in {result.out_dir}"
    )
    return 0
