"""``eligibility finetune TASK``: REINFORCE fine-tuning of a causal LM, from FinetuneConfig."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import Any

from eligibility._output import quoted
from eligibility.cli import COMMANDS
from eligibility.cli.convention import Exit, configure_command, interrupted, report
from eligibility.cli.runs import changeable, run_config
from eligibility.lm.config import FinetuneConfig
from eligibility.lm.defaults import defaults
from eligibility.lm.tasks import BUILTIN
from eligibility.lm.trl_names import NEEDS_STEPS, TRL_ALIASES, from_trl, trl_batch
from eligibility.runs.resume import flag
from eligibility.trainers import lookup

_FIELDS = {f.name for f in dataclasses.fields(FinetuneConfig)}
_SETS_NOTHING = tuple(f"trl_{name}" for name, row in TRL_ALIASES.items() if row[0] is None)
"""The destinations of TRL's names that set no option here (their notes say why)."""


def add_parser(subparsers: Any) -> None:
    """Register ``finetune``: one option per FinetuneConfig field."""
    p = subparsers.add_parser(
        "finetune",
        help=COMMANDS["finetune"].help,
        description=(
            "Sample G completions of each prompt from a causal LM (the built-in tiny "
            "transformer, a Hugging Face model directory, a GGUF file or module:factory), score "
            "them with the task's exact reward and take K = --epochs-per-batch REINFORCE steps "
            "on them (eligibility.torch's sequence loss; the defaults are its unbiased set, "
            "K = 2 for a pretrained model, 1 from scratch or under LoRA). Under torchrun, one "
            "run across the ranks. Built-in tasks: "
            f"{', '.join(BUILTIN)}; "
            "your own: --prompts FILE with a module:function reward. Writes config.json, "
            "metrics.csv, TensorBoard events, learning_curve.png and checkpoints to --out, a "
            "new directory (default: runs/finetune-TASK-TIME-sSEED-RANDOM); progress goes to "
            "stderr, the result to stdout. Exit status 1: a --target-accuracy you gave was not "
            "reached."
        ),
    )
    fields = configure_command(  # only the options given override a resumed run's saved config
        p,
        FinetuneConfig,
        run,
        positional=("task",),
        skip=("data_sha256", "model_entropy", "defaulted"),
        extras=("resume", "config", *_SETS_NOTHING),
        given_only=True,
    )
    for name in ("data_sha256", "model_entropy", "defaulted"):  # the run's own records (JSON)
        p.add_argument(  # in config.json, not for people to give
            "--" + name.replace("_", "-"),
            dest=name,
            type=json.loads,
            default=argparse.SUPPRESS,
            help=argparse.SUPPRESS,
        )
    for name, (target, _values, _note) in TRL_ALIASES.items():
        switch = {"nargs": "?", "const": "true"} if name == "bf16" else {}  # TRL's --bf16 alone
        ours = None if target is None else fields[target]
        taken = () if ours is None else ours.option_strings  # --top-p is ours already
        spelled = dict.fromkeys((f"--{name}", f"--{name.replace('_', '-')}"))
        p.add_argument(
            *[s for s in spelled if s not in taken],
            dest=target or f"trl_{name}",
            action=_TRLAlias,
            ours=ours,
            default=argparse.SUPPRESS,
            metavar=name.upper(),
            help=f"TRL's name for --{target.replace('_', '-')}" if target else _note,
            **switch,
        )
    p.add_argument(
        "--resume",
        metavar="DIR",
        default=None,
        help=(
            "continue the run in DIR from its last checkpoint; only "
            + ", ".join(changeable(lookup("finetune")))
            + " may change"
        ),
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help=(
            "a TRL recipe (the YAML or JSON TrlParser reads into GRPOConfig): each key it maps "
            "sets its option, said on stderr, any other is refused by name; the options given "
            "here override the file's (docs/recipes-and-trackers.md)"
        ),
    )


class _TRLAlias(argparse.Action):
    """A TRL option name: its value translated (``lm.trl_names.TRL_ALIASES``) onto our flag.

    ``ours`` is our option's action (None: the name sets nothing here): its converter and
    choices read the translated value. What it became is said once the config is built
    (:func:`pending`), so that an error is never preceded by notes.
    """

    def __init__(self, *args: Any, ours: argparse.Action | None, **kwargs: Any) -> None:
        self.ours = ours
        super().__init__(*args, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        try:
            field_name, value, why = from_trl(str(option), str(values))
        except ValueError as err:
            parser.error(str(err))
        if field_name is None or value == "":  # taken, nothing to set: the note says why
            number = _NUMBERS.get(str(option).lstrip("-").replace("-", "_"))
            if number is not None:  # a count: checked, and the epochs kept for run()
                kind, bad = number
                try:
                    given = kind(values)
                    if bad(given):
                        raise ValueError
                except ValueError:
                    parser.error(
                        f"{option} {quoted(values)}: give a number > 0 (whole for a length)"
                    )
                if kind is float:
                    namespace.trl_epochs = given
            pending(namespace).append(f"{option} {values}: {why}")
            return
        if field_name == "prompts_per_batch":  # TRL's K: resolved with M and G in run()
            try:
                namespace.trl_accumulation = int(values)
            except ValueError:
                parser.error(f"{option}: invalid value {quoted(values)}")
            return
        target = self.ours
        assert target is not None  # a row with a field has its option
        try:
            typed = target.type(value) if target.type is not None else value
        except argparse.ArgumentTypeError as err:  # our converter's reason (a number, its bound)
            parser.error(f"{option}: {err}")
        except ValueError:
            parser.error(f"{option}: invalid value {quoted(values)}")
        if target.choices is not None and typed not in target.choices:
            parser.error(f"{option}: invalid value {quoted(values)}")
        ours = target.option_strings[0]
        shown = f"{option} {values}" + ("" if value == values else f" ({ours} {typed})")
        if (other := _other_spelling(namespace, field_name, typed, str(option), ours)) is not None:
            parser.error(f"{other} and {shown} both set {ours}: give it once")
        setattr(namespace, field_name, typed)
        _by_trl_name(namespace)[field_name] = (str(option), shown, typed)
        if field_name == "max_updates":  # optimiser steps: divided by K once K is known (run)
            namespace.trl_max_steps = (str(option), typed, why)
            return
        said = f"{option} {values} is {ours} {typed}" + (f" ({why})" if why else "")
        pending(namespace).append(said)


_UNSET = object()


def _by_trl_name(namespace: Any) -> dict[str, tuple[str, str, Any]]:
    """The options a TRL name set: field → (the name, it and its value as said, the value set)."""
    if getattr(namespace, "trl_set", None) is None:
        namespace.trl_set = {}
    return namespace.trl_set


def _other_spelling(
    namespace: Any, field_name: str, typed: Any, option: str, ours: str
) -> str | None:
    """Another spelling that gave ``field_name`` another value already, as given (or None).

    The same option given twice in one spelling keeps argparse's rule (the last wins); two
    spellings of one option with two values (``--top_p 0.9 --top-p 0.5``, ``--loss_type grpo
    --aggregation constant``) are a contradiction.
    """
    prior = vars(namespace).get(field_name, _UNSET)
    if prior is _UNSET:
        return None
    by = _by_trl_name(namespace).get(field_name)
    if by is not None and by[2] == prior:  # a TRL name set it: this one, or another
        return None if by[0] == option or prior == typed else by[1]
    return None if prior == typed else f"{ours} {prior}"


def spelled_twice(args: argparse.Namespace) -> None:
    """After parsing: an option of ours given after its TRL name with another value, refused.

    (Before it, :class:`_TRLAlias` refuses it as it reads the TRL name.) TRL's
    ``gradient_accumulation_steps`` beside ``--prompts-per-batch`` is the same contradiction:
    both set the batch.

    Raises:
        UsageError: naming both spellings and their values.
    """
    from eligibility.cli import UsageError

    for field_name, (_, shown, typed) in _by_trl_name(args).items():
        ours, now = flag(field_name), getattr(args, field_name)
        if now != typed:
            raise UsageError(f"{shown} and {ours} {now} both set {ours}: give it once")
    steps = getattr(args, "trl_accumulation", None)
    if steps is not None and hasattr(args, "prompts_per_batch"):
        raise UsageError(
            f"--gradient_accumulation_steps {steps} and --prompts-per-batch "
            f"{args.prompts_per_batch} both set the batch: give one"
        )


def pending(namespace: Any) -> list[str]:
    """The notes a TRL name or a recipe's key will say once the config is built, in order."""
    if getattr(namespace, "trl_notes", None) is None:
        namespace.trl_notes = []
    return namespace.trl_notes


_NUMBERS: dict[str, tuple[type, Any]] = {
    NEEDS_STEPS: (float, lambda x: not x > 0),
}
"""TRL's names that set nothing here but take a number: its type, and what refuses it."""


def _trl_steps(args: argparse.Namespace, config: FinetuneConfig) -> FinetuneConfig:
    """The config with TRL's ``--max_steps N`` (optimiser steps) as N/K updates of K steps.

    TRL's ``GRPOTrainer`` counts ``max_steps`` in optimiser steps and draws a generation batch
    every ``num_iterations`` of them (its default ``steps_per_generation`` makes one pass over
    the batch one optimiser step); an update here is one batch and its K steps.
    """
    from eligibility.cli import UsageError

    if getattr(args, "trl_max_steps", None) is None:
        return config
    option, steps, why = args.trl_max_steps
    k = config.epochs_per_batch
    if steps % k:
        raise UsageError(
            f"{option} {steps}: TRL's optimiser steps, K = {k} per generation batch here "
            f"(--epochs-per-batch): give a multiple of {k}, or --max-updates (batches)"
        )
    pending(args).append(f"{option} {steps} is --max-updates {steps // k} ({why})")
    return dataclasses.replace(config, max_updates=steps // k)


def run(args: argparse.Namespace) -> int:
    """Build the config, fine-tune, print the outcome (stdout) and where the run went."""
    from eligibility.runs.painter import start_early

    if os.environ.get("RANK", "0") == "0":  # the rank that writes the run's directory
        start_early()  # the curve's painter imports beside the imports below, not the updates
    from eligibility.cli import recipe
    from eligibility.lm.edge.loaders import model_kind
    from eligibility.lm.edge.ranks import launch
    from eligibility.lm.trainer import finetune
    from eligibility.runs import Interrupted
    from eligibility.runs.directory import check_ready

    spelled_twice(args)
    given = {k: v for k, v in vars(args).items() if k in _FIELDS - {"task"}}
    if args.config is not None:  # a TRL recipe: its keys where no option given here sets them
        _recipe(args, given)
    for name in ("defaults", "dtype", "importance_sampling"):
        if args.resume is not None and given.get(name) == "auto":
            del given[name]  # the run's measured or resolved choice stands
    if (steps := getattr(args, "trl_accumulation", None)) is not None:
        _accumulation(steps, given, pending(args))
    _needs_steps(args, given)
    try:
        config, resume = run_config(lookup("finetune"), args, given)
        model_kind(config.model)  # a model that cannot be one: refused before any note
    except ValueError as err:  # a value a recipe set: its file and key named
        raise recipe.named(args, err) from None
    config = _trl_steps(args, config)
    check_ready(config, resume=resume is not None)  # the run's directory, the trackers
    _say(args, given, config)  # every error is said before any note
    try:
        result = finetune(config, resume=resume)
    except Interrupted as stop:
        return interrupted("finetune", stop)
    if launch().rank == 0:  # one run, however many ranks: rank 0 reports it
        report(args, result, text=lambda r: _text(r, config), json_value=lambda r: _json(r, config))
    asked = given.get("target_accuracy") is not None
    return Exit.FINDING if asked and not result.solved else Exit.OK


def _recipe(args: argparse.Namespace, given: dict[str, Any]) -> None:
    """``--config FILE``'s keys into ``given`` and ``args`` (:mod:`eligibility.cli.recipe`)."""
    from eligibility.cli import UsageError, recipe

    if args.resume is not None:
        raise UsageError("--config and --resume: a resumed run keeps its saved config")
    recipe.apply(args.config, args, given, pending(args))


def _needs_steps(args: argparse.Namespace, given: dict[str, Any]) -> None:
    """TRL's ``num_train_epochs`` is taken beside ``max_steps`` (or ``--max-updates``) only.

    TRL's ``max_steps`` overrides the epochs; without it, the run's length would be the
    epochs', which finetune does not count (its run is ``--max-updates`` updates).
    """
    from eligibility.cli import UsageError

    if getattr(args, "trl_epochs", None) is None:
        return
    if getattr(args, "trl_max_steps", None) is None and "max_updates" not in given:
        raise UsageError(
            f"num_train_epochs {args.trl_epochs:g}: finetune counts the run in updates, not "
            "passes over the prompts: give max_steps (TRL's, which overrides the epochs) or "
            "--max-updates, or remove it"
        )


def _say(args: argparse.Namespace, given: dict[str, Any], config: FinetuneConfig) -> None:
    """The notes of TRL's names and the recipe's keys, then what an option given does not do."""
    from eligibility._output import note
    from eligibility.lm.importance import resolved
    from eligibility.lm.truncation import Sampling

    for line in pending(args):
        note("finetune", line)
    uncut = Sampling.of(config) is None  # dtype auto: the device decides whether the cap acts
    mode = resolved(config.importance_sampling, config.dtype, uncut, bool(config.max_staleness))
    if "importance_sampling_cap" in given and mode == "none" and config.dtype != "auto":
        note(
            "finetune",
            f"--importance-sampling-cap {config.importance_sampling_cap:g} does nothing "
            "without --importance-sampling MODE (the distribution sampled is the one trained)",
        )


def _accumulation(steps: int, given: dict[str, Any], said: list[str]) -> None:
    """TRL's ``gradient_accumulation_steps`` K as ``--prompts-per-batch`` M · K / G, noted."""
    g = given.get("group_size")
    if g is None:  # left to the table: the column of this run's model (BY_MODEL)
        model = given.get("model") or FinetuneConfig.__dataclass_fields__["model"].default
        choice = given.get("defaults", "auto")
        g = defaults(model, given.get("lora_r"), choice)["group_size"]
        if choice == "auto" and model != "tiny":  # measured at load: G held to the batch's
            given["group_size"] = g
            said.append(
                f"--gradient_accumulation_steps: G {g}, the pretrained column's (TRL's batch is "
                "split into groups before the model is measured; --num_generations for another)"
            )
    given["prompts_per_batch"] = trl_batch(steps, given.get("micro_batch_size"), g)
    said.append(
        f"--gradient_accumulation_steps {steps} is --prompts-per-batch "
        f"{given['prompts_per_batch']} ({TRL_ALIASES['gradient_accumulation_steps'][2]})"
    )


def _json(result: Any, config: FinetuneConfig) -> dict[str, Any]:
    """The result for scripts: the run's numbers and the config that ran."""
    return {
        "task": config.task,
        "solved": bool(result.solved),
        "already_solved": bool(result.already_solved),
        "target_accuracy": result.target_accuracy,
        "greedy_accuracy": result.greedy_accuracy,
        "start_accuracy": result.start_accuracy,
        "updates": result.updates,
        "completions": result.completions,
        "tokens": result.tokens,
        "wall_s": result.wall_s,
        "eval_wall_s": result.eval_wall_s,
        "out_dir": None if result.out_dir is None else str(result.out_dir),
        "config": config.to_dict(),
    }


def _text(result: Any, config: FinetuneConfig) -> str:
    """The one line a person reads: solved or not, the accuracy, the budget used, the run."""
    acc = result.greedy_accuracy
    if result.target_accuracy is None:
        status = "no target"
    else:
        status = "solved" if result.solved else "not solved"
    if result.already_solved:
        status += " (already; nothing trained: raise --target-accuracy to train on)"
    shown = "n/a" if acc is None else f"{acc:.3f}"
    start = result.start_accuracy  # --eval-on-start: where it began
    shown += "" if start is None else f" (from {start:.3f} before the first update)"
    return (
        f"{config.task}: {status}, greedy accuracy {shown} after {result.updates} updates "
        f"({result.completions} completions) in {result.wall_s:.1f} s; run in {result.out_dir}"
    )
