"""``finetune --config recipe.yaml``: a TRL recipe's keys, each mapped onto an option or refused.

TRL users keep a run's settings in a YAML file that ``TrlParser`` reads into ``GRPOConfig``
(with ``ModelConfig`` and the script's arguments in the same file). ``finetune --config FILE``
reads that file (YAML, or JSON, as ``check --framework trl --config`` does): each key of
:data:`KEYS` sets the option its row names and says so in one line on stderr (once every value
is known good: an error is never preceded by notes); any other key, or a key given twice, is
refused by name (exit 2), so a recipe never runs with one of its settings dropped. Options given
on the command line override the file's; the keys a recipe leaves out take finetune's defaults,
not TRL's (``loss_type``: ours is ``sequence-sum``, TRL's ``dapo``).

:data:`KEYS` is the one table: the command reads it, and the docs' table is printed from it
(:func:`markdown`). The rows of TRL's option names that ``finetune`` also takes as flags
(``--learning_rate``, ``--loss_type``, …) are :data:`eligibility.lm.trl_names.TRL_ALIASES`'s.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eligibility._keyfile import read_mapping
from eligibility._output import cut, quoted
from eligibility.lm.config import INFINITE, FinetuneConfig
from eligibility.lm.trl_names import NEEDS_STEPS, TRL_ALIASES
from eligibility.runs.resume import checked, flag

TRL_VERSION = "1.16.0"
"""The TRL whose dataclasses the keys were read from (``GRPOConfig``, ``ModelConfig``)."""


@dataclass(frozen=True)
class Key:
    """One key of a TRL recipe and the ``finetune`` option it sets.

    Attributes:
        source: the TRL dataclass that declares it (``GRPOConfig``, ``ModelConfig``, or
            ``script``: TRL's ``grpo.py`` script's arguments).
        field: the :class:`~eligibility.lm.config.FinetuneConfig` field it sets; None: none (the
            note says why none is needed).
        values: TRL's value → ours where they differ (None: the value itself).
        note: what differs from TRL, where something does.
    """

    source: str
    field: str | None
    values: dict[str, str] | None = None
    note: str = ""


_LOGGED = "every update is logged (metrics.csv and the trackers): nothing to set"
_PEFT = "LoRA adapters; with use_peft: true (TRL trains none without it)"

KEYS: dict[str, Key] = {
    **{name: Key("GRPOConfig", *row) for name, row in TRL_ALIASES.items()},
    "beta": Key("GRPOConfig", "beta"),
    "temperature": Key("GRPOConfig", "temperature"),
    "max_completion_length": Key("GRPOConfig", "max_completion_length"),
    "max_grad_norm": Key("GRPOConfig", "max_grad_norm"),
    "seed": Key("GRPOConfig", "seed"),
    "epsilon": Key(
        "GRPOConfig",
        "clip",
        note="PPO's clip of the ratio, which acts from the second optimiser step on a batch: "
        "set beside a num_iterations (or --epochs-per-batch) over 1; without one, TRL's ratio "
        "is 1 and nothing is set",
    ),
    "eval_steps": Key("GRPOConfig", "eval_every"),
    "eval_on_start": Key("GRPOConfig", "eval_on_start"),
    "output_dir": Key(
        "GRPOConfig", "out", note="a new directory: one that holds a run is refused, as --out's"
    ),
    "logging_steps": Key("GRPOConfig", None, note=_LOGGED),
    "report_to": Key(
        "GRPOConfig", "report_to", note="tensorboard, wandb, trackio or none, one or a list"
    ),
    "model_name_or_path": Key(
        "ModelConfig", "model", note="a local directory or GGUF file: nothing is downloaded"
    ),
    "use_peft": Key(
        "ModelConfig",
        None,
        note="true: LoRA, with ModelConfig's lora_r 16, lora_alpha 32, lora_dropout 0.05 for "
        "those the recipe leaves out; false: every weight, as without --lora-r",
    ),
    "lora_r": Key("ModelConfig", "lora_r", note=_PEFT),
    "lora_alpha": Key("ModelConfig", "lora_alpha", note=_PEFT),
    "lora_dropout": Key("ModelConfig", "lora_dropout", note=_PEFT),
    "lora_target_modules": Key("ModelConfig", "lora_target_modules", note=_PEFT),
    "dataset_name": Key(
        "script", "prompts", note="a local file or directory (datasets' formats): no download"
    ),
    "reward_funcs": Key(
        "script",
        "task",
        note="module.function or FILE.py:function each (TRL's own rewards as "
        "trl.rewards.NAME), joined",
    ),
}
"""Every key ``finetune --config`` takes, by its name in the recipe."""

MODEL_CONFIG_LORA = {"lora_r": 16, "lora_alpha": 32.0, "lora_dropout": 0.05}
"""TRL's ``ModelConfig`` defaults for the adapters of ``use_peft: true`` (TRL 1.16)."""


def apply(path: str, args: argparse.Namespace, given: dict[str, Any], said: list[str]) -> None:
    """Set ``given`` (field → value) and ``args`` from the recipe at ``path``, flags first.

    A field already in ``given`` (an option given on the command line) keeps its value, and
    the key that would set it says so. ``max_steps`` and ``gradient_accumulation_steps`` are
    left on ``args`` as their flags leave them (``trl_max_steps``, ``trl_accumulation``), for
    the command to resolve with K, M and G as it resolves the flags; so is
    ``num_train_epochs`` (``trl_epochs``). What each key became is appended to ``said``, for
    the command to say once every value is known good.

    Raises:
        ValueError: a file that does not read, a key given twice or not in :data:`KEYS` (all
            of them named), a value its option refuses (naming the key).
    """
    recipe = read(path)
    name = Path(path).name
    unknown = [k for k in recipe if k not in KEYS]
    if unknown:
        listed = cut(", ".join(map(str, unknown)), 400)
        raise ValueError(
            f"{name}: finetune does not take TRL's {listed}: remove "
            f"{'it' if len(unknown) == 1 else 'them'} to run the rest (the keys it takes: "
            "docs/recipes-and-trackers.md)"
        )
    if not recipe:  # empty, or comments only: most likely not the file meant
        said.append(
            f"{name} holds no key: it sets nothing, and the run takes finetune's defaults "
            "(with the options given here)"
        )
    k = given.get("epochs_per_batch", recipe.get("num_iterations", 1))
    keys, defaulted = _with_peft(recipe, name)
    for key, value in keys.items():
        shown = f"{name}: {key} {_shown(value)}"
        if key in defaulted:
            shown = f"{name}: use_peft's {key} {value} (ModelConfig's default)"
        row = KEYS[key]
        if row.field is None or (key == "epsilon" and k == 1):
            _nothing_to_set(key, value, name, args)
            said.append(f"{shown}: {row.note}")
            continue
        given_by_flag = _flag_value(row.field, key, args, given)
        if given_by_flag is not None:
            said.append(f"{shown} is overridden by {given_by_flag}")
            continue
        ours = _translated(key, value, name)
        if key == "max_steps":  # optimiser steps: the command divides them by K, and says so
            args.trl_max_steps = (f"{name}: max_steps", ours, row.note)
        elif key == "gradient_accumulation_steps":  # M · K / G: the command resolves it
            args.trl_accumulation = ours
        elif ours == "":  # a value that sets nothing here (the note says why)
            said.append(f"{shown}: {row.note}")
        else:
            if row.field == "task":
                args.task = ours
            else:
                given[row.field] = ours
            set_by(args)[row.field] = f"{name}: {key} {_shown(value)}"
            why = f" ({row.note})" if row.note and key != "epsilon" else ""
            said.append(f"{shown} is {flag(row.field)} {_shown(ours)}{why}")


def set_by(args: argparse.Namespace) -> dict[str, str]:
    """The fields the recipe set: field → its file, key and value, as an error names them."""
    if getattr(args, "recipe_set", None) is None:
        args.recipe_set = {}
    return args.recipe_set


def named(args: argparse.Namespace, err: ValueError) -> ValueError:
    """``err`` about a field the recipe set, led by the file and key that set it.

    A value is range-checked where the config is built, after the recipe is read: the error
    names the option (``epochs_per_batch (--epochs-per-batch) must be >= 1``); the user wrote
    ``num_iterations: 0`` in a file, and is told so.
    """
    text = str(err)
    for field_name, where in set_by(args).items():
        if text.startswith((f"{field_name} (", f"{flag(field_name)} ")):
            return ValueError(f"{where}: {text}")
    return err


def _nothing_to_set(key: str, value: Any, name: str, args: argparse.Namespace) -> None:
    """A key that sets no option: its value checked against the only ones it takes."""
    values = KEYS[key].values
    if values is not None:
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if text not in values:
            raise ValueError(
                f"{name}: {key} {_shown(value)}: finetune takes {', '.join(values)} only "
                f"({KEYS[key].note})"
            )
    elif key == NEEDS_STEPS:
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"{name}: {key} {quoted(value)}: give a number > 0")
        args.trl_epochs = float(value)


def read(path: str) -> dict[str, Any]:
    """The recipe at ``path``: a YAML (``.yaml``, ``.yml``) or JSON mapping, each key once.

    Read as ``eligibility._keyfile.read_mapping`` reads a file of keys: YAML 1.2's numbers
    (``1e-5`` is a number, as TRL's parser takes it), a key given twice refused by name, no
    alias, at most :data:`MAX_BYTES`.

    Raises:
        ValueError: naming the file (``read_mapping``'s reasons).
    """
    return read_mapping(
        path,
        f"the recipe {path}",
        MAX_BYTES,
        "a recipe is a few lines of TRL's keys (docs/recipes-and-trackers.md); give the one "
        "that sets this run",
        "TRL's keys",
    )


MAX_BYTES = 256_000
"""The largest recipe read (256 kB; TRL's own are a few hundred bytes): parsed in seconds."""


def _with_peft(recipe: dict[str, Any], name: str) -> tuple[dict[str, Any], set[str]]:
    """The recipe with ``use_peft: true``'s adapter settings it leaves out, and their keys."""
    lora = [k for k in recipe if k.startswith("lora_")]
    use = recipe.get("use_peft", False)
    if not isinstance(use, bool):
        raise ValueError(f"{name}: use_peft {quoted(use)}: give true or false")
    if lora and not use:
        raise ValueError(
            f"{name}: {', '.join(lora)} without use_peft: true, with which TRL trains no "
            "adapters: add use_peft: true, or remove them"
        )
    added = {k: v for k, v in MODEL_CONFIG_LORA.items() if use and k not in recipe}
    return {**recipe, **added}, set(added)


def _flag_value(
    field: str, key: str, args: argparse.Namespace, given: dict[str, Any]
) -> str | None:
    """The option on the command line that sets ``field`` already, as said (or None)."""
    if field == "task":
        return None if args.task is None else f"TASK {args.task}"
    if key == "max_steps" and getattr(args, "trl_max_steps", None) is not None:
        return f"{args.trl_max_steps[0]} {args.trl_max_steps[1]}"
    if key == "gradient_accumulation_steps" and (
        getattr(args, "trl_accumulation", None) is not None or "prompts_per_batch" in given
    ):
        return "the batch given on the command line"
    if field in given:
        return f"{flag(field)} {_shown(given[field])}"
    return None


def _translated(key: str, value: Any, name: str) -> Any:
    """The recipe's ``value`` of ``key`` as the value of its field, or a ValueError naming it."""
    row = KEYS[key]
    if row.values is not None:
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if text not in row.values:
            raise ValueError(
                f"{name}: {key} {quoted(value)}: TRL's values here are {', '.join(row.values)}"
            )
        value = row.values[text]
        if value == "":  # taken, sets nothing here
            return value
    if key in ("reward_funcs", "lora_target_modules", "report_to"):
        if not isinstance(value, str | list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{name}: {key} {quoted(value)}: give names, a list or one string")
    if key == "reward_funcs":
        return ",".join(_reward_spec(s, name) for s in _listed(value))
    if key in ("lora_target_modules", "report_to"):
        return tuple(_listed(value))
    if key in ("max_steps", "gradient_accumulation_steps"):
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise ValueError(f"{name}: {key} {quoted(value)}: give a whole number ≥ 1")
        return value
    try:
        return checked(row.field, value, FinetuneConfig, INFINITE)  # type: ignore[arg-type]
    except ValueError as err:
        raise ValueError(f"{name}: {key}: {err}") from None


def _listed(value: str | list[str]) -> list[str]:
    """A list of names from a YAML list or one string (commas or spaces between names)."""
    if isinstance(value, str):
        return value.replace(",", " ").split()
    return list(value)


def _reward_spec(spec: str, name: str) -> str:
    """A reward as TRL's script names it (``pkg.module.fn``) as ours (``pkg.module:fn``)."""
    if ":" in spec:
        return spec
    module, dot, fn = spec.rpartition(".")
    if not dot:
        raise ValueError(
            f"{name}: reward_funcs {quoted(spec)} is one of TRL's own rewards by name: give it as "
            f"trl.rewards.{cut(spec)}, or your own as FILE.py:function"
        )
    return f"{module}:{fn}"


def _shown(value: Any) -> str:
    """A value as the recipe's YAML spells it (``false``, a list's items), cut to be quoted."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple | list):
        return cut(" ".join(map(str, value))) or "(none)"
    return cut(str(value))


def markdown() -> str:
    """:data:`KEYS` as the docs' Markdown table (docs/recipes-and-trackers.md)."""
    lines = ["| recipe key | TRL's class | finetune option | what differs |", "|---|---|---|---|"]
    for key, row in KEYS.items():
        option = "—" if row.field is None else f"`{flag(row.field)}`"
        if row.field == "task":
            option = "`TASK`"
        values = ", ".join(
            f"{k} → {v}" if v else f"{k}: nothing to set" for k, v in (row.values or {}).items()
        )
        what = "; ".join(x for x in (values, row.note) if x).replace("|", "\\|")
        lines.append(f"| `{key}` | {row.source} | {option} | {what} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # the docs' table: python -m eligibility.cli.recipe
    print(markdown(), end="")
