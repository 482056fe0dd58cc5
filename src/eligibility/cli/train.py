"""``eligibility train ENV_ID``: REINFORCE on a Gymnasium env, from the Config dataclass."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import math
from typing import Any

from eligibility._output import note, quoted
from eligibility.cli import COMMANDS
from eligibility.cli.convention import (
    Exit,
    add_command,
    deprecated,
    interrupted,
    report,
)
from eligibility.cli.runs import changeable, run_config
from eligibility.reinforce.config import TUNED, Config
from eligibility.trainers import lookup

_FIELDS = [f.name for f in dataclasses.fields(Config)]


def add_parser(subparsers: Any) -> None:
    """Register ``train``: one option per Config field (defaults: ``Config.for_env``)."""
    p = add_command(
        subparsers,
        "train",
        Config,
        run,
        help=COMMANDS["train"].help,
        description=(
            "Williams' episodic REINFORCE on a Gymnasium env. Options not given take the "
            "tuned defaults for the env (Config.for_env). Writes config.json, metrics.csv, "
            "TensorBoard events, learning_curve.png and checkpoints to --out, a new directory "
            "(default: runs/ENV-TIME-sSEED-RANDOM); progress goes to stderr, the result to "
            "stdout. --target-return inf: no target; --hidden none: a linear policy. "
            f"Tuned defaults exist for {', '.join(TUNED)} (with any --env-kwargs); other envs "
            "take the defaults shown below. Exit status 1: --target-return was given and not "
            "reached."
        ),
        skip=("env_id", "env_kwargs"),
        extras=("resume", "overwrite"),
        given_only=True,  # unset options fall back to Config.for_env, not the class default
    )
    p.add_argument("env_id", nargs="?", help="Gymnasium environment id, e.g. CartPole-v1")
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
    p.add_argument(
        "--resume",
        metavar="DIR",
        default=None,
        help=(
            "continue the run in DIR from its last checkpoint; options that define the run "
            "(env, backend, network, baseline, optimiser, seed, …) must match it, while "
            f"{', '.join(changeable(lookup('train')))} may change; a run that stopped before "
            "its first update starts from scratch (one with rows but no checkpoint is refused: "
            "its history is kept)"
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
            f"expected KEY=VALUE, e.g. is_slippery=False; got {quoted(text)}"
        )
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value  # map_name=8x8: a bare word is text


TOLERANCE = 0.05
"""Greedy and sampled evaluations are both printed when they differ by more than this × |target|
(× 1 when the env has no target)."""


def run(args: argparse.Namespace) -> int:
    """Build the Config, train, print where the run went."""
    from eligibility.reinforce import NonFiniteError, train
    from eligibility.runs import Interrupted

    given = {k: v for k, v in vars(args).items() if k in _FIELDS and k != "env_id"}
    if "env_kwargs" in given:
        given["env_kwargs"] = dict(given["env_kwargs"])
    if "target_return" in given and given["target_return"] is None:
        # the old spelling of "no target"; the word none will mean what None means in Python
        # and in `sweep --set target_return=none`: the env's registered threshold
        deprecated("train", "--target-return none (no target)", "--target-return inf")
        given["target_return"] = math.inf
    config, resume = run_config(lookup("train"), args, given)
    try:
        result = train(config, resume=resume, overwrite=args.overwrite)
    except NonFiniteError as err:
        note("train", err, kind="error")
        return Exit.USAGE
    except Interrupted as stop:
        return interrupted("train", stop)
    report(args, result, text=lambda r: _text(r, config), json_value=lambda r: _json(r, config))
    asked = given.get("target_return") not in (None, math.inf)
    return Exit.FINDING if asked and not result.solved else Exit.OK


def _json(result: Any, config: Config) -> dict[str, Any]:
    """The result for scripts: the TrainResult's numbers and the config that ran."""
    target = result.target_return
    return {
        "env_id": config.env_id,
        "solved": bool(result.solved),
        "already_solved": bool(result.already_solved),
        "target_return": None if target is None or not math.isfinite(target) else target,
        "env_steps": result.env_steps,
        "episodes": result.episodes,
        "updates": result.updates,
        "wall_s": result.wall_s,
        "eval_wall_s": result.eval_wall_s,
        "final_eval_return": result.final_eval_return,
        "sampled_eval_return": result.sampled_eval_return,
        "out_dir": None if result.out_dir is None else str(result.out_dir),
        "config": config.to_dict(),
    }


def _text(result: Any, config: Config) -> str:
    """The one line a person reads: solved or not, the budget used, the return, the run."""
    if result.already_solved:
        return (
            f"{result.out_dir} already met its target (eval return {result.final_eval_return:.1f}"
            f" ≥ {result.target_return:g}); nothing to train. Raise --target-return, or pass "
            "--target-return inf, to train on"
        )
    if result.target_return is None:
        status = "no target"
    else:
        status = "solved" if result.solved else "not solved"
    ev = "" if result.final_eval_return is None else f", eval return {result.final_eval_return:.1f}"
    greedy, sampled = result.final_eval_return, result.sampled_eval_return
    scale = 1.0 if result.target_return is None else max(abs(result.target_return), 1.0)
    if greedy is not None and sampled is not None and abs(greedy - sampled) > TOLERANCE * scale:
        ev = f", eval return {greedy:.1f} greedy, {sampled:.1f} sampled"
    return (
        f"{config.env_id}: {status} after {result.env_steps} steps, {result.episodes} episodes, "
        f"{result.updates} updates in {result.wall_s:.1f} s{ev}; run in {result.out_dir}"
    )
