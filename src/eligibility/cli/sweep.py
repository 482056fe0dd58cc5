"""``eligibility sweep [--trainer train|finetune] ENV_ID|TASK``: a grid on many seeds."""

from __future__ import annotations

import argparse
import signal
from dataclasses import dataclass, field
from typing import Any, Literal

from eligibility._dataclass_args import path_option
from eligibility.cli import COMMANDS
from eligibility.cli.convention import Exit, add_command, config_from_args, report


@dataclass(frozen=True)
class SweepConfig:
    """What ``eligibility sweep`` trains, where, and how it reports."""

    env_id: str = field(
        metadata={
            "help": "Gymnasium environment id, e.g. CartPole-v1; with --trainer finetune the "
            "task: repeat, reverse, sum, or module:function"
        }
    )
    trainer: Literal["train", "finetune"] = field(
        default="train",
        metadata={
            "help": "what each run is: an `eligibility train` run on the env, or an "
            "`eligibility finetune` run on the task (--set then takes its options)"
        },
    )
    seeds: int | None = field(
        default=None, metadata={"help": "seeds 0 … N−1 (default with no --seed-list: 10)"}
    )
    seed_list: tuple[int, ...] | None = field(
        default=None, metadata={"help": "these seeds (instead of --seeds)", "metavar": "S"}
    )
    sets: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "an option of the trainer (train's, or finetune's) and its values "
            "(repeatable; the grid is their product), e.g. baseline=none,rloo lr=0.01,0.05 "
            "hidden=32,64x64, or for finetune aggregation=sequence-mean,constant; env_kwargs "
            'takes JSON objects separated by ;, e.g. \'env_kwargs={"is_slippery": true}; '
            '{"is_slippery": false}\'',
            "flag": "--set",
            "metavar": "KEY=V1,V2",
            "repeat": True,
        },
    )
    jobs: int | None = field(default=None, metadata={"help": "runs in parallel (none: cores)"})
    launcher: Literal["local", "ray"] = field(default="local", metadata={"help": "where runs run"})
    address: str | None = field(
        default=None, metadata={"help": "Ray head HOST:PORT (none: RAY_ADDRESS, else a local Ray)"}
    )
    out: str | None = path_option("sweep directory (none: sweeps/ENV-TIME-RANDOM)", "DIR")
    pictures: bool = field(
        default=True, metadata={"help": "write curves.png, profile.png and steps_to_solve.png"}
    )

    def __post_init__(self) -> None:
        if self.seeds is not None and self.seed_list is not None:
            raise ValueError("give --seeds N or --seed-list S …, not both")
        if self.seed_list is None and self.seeds is not None and self.seeds < 1:
            raise ValueError(f"the grid is empty: --seeds must be at least 1, got {self.seeds}")
        if self.seed_list == ():
            raise ValueError("the grid is empty: --seed-list needs at least one seed")


def add_parser(subparsers: Any) -> None:
    """Register ``sweep``."""
    add_command(
        subparsers,
        "sweep",
        SweepConfig,
        run,
        help=COMMANDS["sweep"].help,
        description=(
            "Every (setting, seed) is an ordinary run directory under --out; re-running the "
            "same command resumes the sweep. Prints per setting the success rate and IQM, "
            "median and mean with 95% bootstrap intervals (progress on stderr); writes "
            "results.json, curves.png, profile.png and steps_to_solve.png. Exit status 1: a "
            "run failed. With --trainer finetune each run is an `eligibility finetune` run "
            "of the task (returns are rewards, evaluations greedy accuracy)."
        ),
        positional=("env_id",),
        formats=("text", "markdown", "json"),
    )


def run(args: argparse.Namespace) -> int:
    """Run (or resume) the sweep; print the table."""
    from eligibility._output import note
    from eligibility.cli.convention import exit_for_signal
    from eligibility.sweep import sweep
    from eligibility.sweep.report import markdown, render_text
    from eligibility.sweep.run import RESULTS_JSON, to_json
    from eligibility.sweep.signals import SweepInterrupted

    config = config_from_args(SweepConfig, args)
    try:
        result = sweep(
            config.env_id,
            seeds=list(config.seed_list) if config.seed_list is not None else (config.seeds or 10),
            sets=list(config.sets),
            jobs=config.jobs,
            launcher=config.launcher,
            address=config.address,
            out=config.out,
            progress=True,
            pictures=config.pictures,
            trainer=config.trainer,
        )
    except SweepInterrupted as stop:  # every run checkpointed; results.json holds what ended
        note(
            "sweep",
            f"interrupted ({signal.Signals(stop.signum).name}); {stop.finished} of {stop.total} "
            f"runs ended (in {stop.out_dir / RESULTS_JSON}), the others are checkpointed; "
            "re-run the same command to resume",
            kind="",
        )
        return exit_for_signal(stop.signum)
    report(args, result, text=render_text, json_value=to_json, formats={"markdown": markdown})
    return Exit.FINDING if result.failed else Exit.OK
