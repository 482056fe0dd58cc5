"""``eligibility export RUN DIR``: a fine-tuning run's policy as a Hugging Face directory."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from eligibility.cli import COMMANDS
from eligibility.cli.convention import Exit, add_command, config_from_args, report


@dataclass(frozen=True)
class ExportConfig:
    """What ``eligibility export`` writes, and where."""

    run_dir: str = field(
        metadata={"help": "a run directory of eligibility finetune", "metavar": "RUN"}
    )
    out: str = field(
        metadata={"help": "a new directory for the model and its tokenizer", "metavar": "DIR"}
    )
    merge: bool = field(
        default=False,
        metadata={
            "help": "a LoRA run: write the merged model W + (α/r) B A (not the adapter "
            "directory that PeftModel.from_pretrained loads onto the base model)"
        },
    )


def add_parser(subparsers: Any) -> None:
    """Register ``export``."""
    add_command(
        subparsers,
        "export",
        ExportConfig,
        run,
        help=COMMANDS["export"].help,
        description=(
            "Load RUN's last checkpoint into its model and write it, with its tokenizer, to DIR "
            "with save_pretrained: AutoModelForCausalLM.from_pretrained(DIR) and "
            "AutoTokenizer.from_pretrained(DIR) load it back. Works for runs of a --model DIR "
            "(or a factory returning a PreTrainedModel); the built-in tiny transformer has no "
            "such format. A LoRA run (--lora-r) writes its adapter directory "
            "(PeftModel.from_pretrained(base, DIR) loads it), or with --merge the merged model."
        ),
        positional=("run_dir", "out"),
    )


def run(args: argparse.Namespace) -> int:
    """Load the run's checkpoint, write DIR, print where it went.

    The run says what it is (:func:`eligibility.trainers.made_by`); its trainer's row names
    the function that exports it, and a kind of run without one is refused in one line.
    """
    from eligibility.trainers import TRAINERS, made_by

    config = config_from_args(ExportConfig, args)
    made = made_by(config.run_dir)
    exporters = " or ".join(f"eligibility {t.command}" for t in TRAINERS.values() if t.export)
    if made is None:
        raise ValueError(
            f"{config.run_dir!r} holds no run (no readable config.json): give a directory an "
            f"{exporters} run wrote"
        )
    if made.export is None:
        raise ValueError(
            f"{config.run_dir!r} is a run of eligibility {made.command}, not of {exporters}: "
            "export writes a fine-tuned language model"
        )
    out = made.load("export")(config.run_dir, config.out, merge=config.merge)
    report(args, {"model_dir": str(out)}, text=lambda r: r["model_dir"])
    return Exit.OK
