"""Loading a fine-tuning run: its config, its task, its model with the last checkpoint.

:func:`evaluate_run` samples its policy on its task's prompts (``eligibility evaluate``);
:func:`export` writes it as a Hugging Face directory (``eligibility export``).
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from eligibility._dataclass_args import flag_of
from eligibility.lm.config import IDENTITY, FinetuneConfig
from eligibility.lm.reserved import RECORD
from eligibility.lm.rewards import TrainerState
from eligibility.lm.tasks import Task
from eligibility.lm.usertask import GIVEN, kept_records
from eligibility.runs import load_config, read_checkpoint


def load(run_dir: str | Path) -> tuple[FinetuneConfig, Any, Task]:
    """The run's config, its model with the last checkpoint's weights, and its task.

    Raises:
        ValueError: no run or no checkpoint there, or one that does not fit the config.
    """
    from eligibility.lm.build import task_and_model
    from eligibility.lm.checkpointer import Checkpointer
    from eligibility.lm.learner import Learner
    from eligibility.lm.policy import Policy

    config = load_config(run_dir, FinetuneConfig)
    given = None  # the rows given in memory, kept with the run (lm.usertask.keep_records)
    try:
        if config.prompts is None and GIVEN in (config.data_sha256 or {}):
            given = kept_records(run_dir, config)
        task, model, _ = task_and_model(config, records=given)
    except ValueError as err:
        raise ValueError(as_saved(str(err))) from None
    # a sharded run's shards read whole
    state = Checkpointer(Learner(Policy(model), config.lr), run_dir)
    expected = state.expected()
    tensors, _ = read_checkpoint(
        Path(run_dir), expected, config.to_dict(), IDENTITY, framework="pt"
    )
    state.load(state.read(tensors), optimizer=False)  # the weights in their file beside
    return config, model, task


SAVED = {flag_of(f): f.name for f in fields(FinetuneConfig)}
"""``finetune``'s options → the run's settings they became (config.json's names)."""


def as_saved(message: str) -> str:
    """A message of rebuilding a saved run, each ``finetune`` option it names as the run's own.

    ``evaluate`` and ``export`` rebuild the run from its config.json and have no ``--prompts``,
    ``--model`` or ``--env`` of their own: an error naming one is about the run's setting, so
    it says so (``--model X`` → ``the run's model X``, as config.json names it).

    >>> as_saved("--model 'm': no such directory; give --model DIR")
    "the run's model 'm': no such directory; give the run's model DIR"
    """
    return re.sub(
        r"--[a-z][a-z0-9-]*",
        lambda m: f"the run's {SAVED[m.group()]}" if m.group() in SAVED else m.group(),
        message,
    )


def evaluate_run(
    run_dir: str | Path,
    *,
    episodes: int = 1,
    greedy: bool = True,
    seed: int = 0,
    video: str | None = None,
    show_system: bool = False,
) -> dict[str, Any]:
    """Accuracy and mean reward of a run's policy on its task's prompts.

    On a task of turns the first episodes come whole, as messages (``episodes``,
    ``lm.episodes.shown``), each naming its system prompt (the chat template's text before
    the first user message, the tools' schemas in it) by index: the texts themselves
    (``system``) only with ``show_system``.

    Args:
        run_dir: a directory written by ``eligibility finetune``.
        episodes: sampled completions per prompt (``greedy=False`` only; the command line's
            ``--episodes``); on a task of turns, the episodes played: the evaluation prompts
            in order, each once greedily (at most as many as there are prompts), cycled when
            sampled.
        greedy: the mode at every step (one completion per prompt), or samples from π_τ.
        seed: seed of the samples.
        video: refused: a fine-tuning run has no frames (the argument is ``train``'s).
        show_system: also give the episodes' system prompts (``--show-system``).

    Raises:
        ValueError: not a run, no checkpoint, a ``video``, a bad ``episodes``.
    """
    from eligibility.lm.build import rollout_for  # episodes played on a task of turns

    if video is not None:
        raise ValueError("--video is for Gymnasium runs; a finetune run has no frames")
    if episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {episodes}")
    from eligibility.lm.edge.checkpoint import saved_counters
    from eligibility.runs import CHECKPOINT

    config, model, task = load(run_dir)
    ev, rollout = task.evaluation, rollout_for(task)
    # the run's progress at its checkpoint, as its reward functions read it in training
    counters = saved_counters(Path(run_dir) / CHECKPOINT)
    state = TrainerState.of(counters, config.max_updates, config.group_size, len(task.prompts))
    try:
        t_max = config.max_completion_length or task.max_completion_length
        result = rollout.evaluate(  # the evaluation training runs, its batches
            model,
            t_max,
            config.prompts_per_batch * config.group_size,
            temperature=config.temperature,
            rng=None if greedy else np.random.default_rng(seed),
            keep=5,
            state=state,
            **rollout.played(episodes, greedy),
        )
    finally:
        task.close()
    return _summary(config.task, greedy, result, ev, show_system)


def _summary(task: str, greedy: bool, result: Any, ev: Task, show_system: bool) -> dict[str, Any]:
    """What :func:`evaluate_run` returns of an evaluation: its figures and its examples.

    Whole episodes come as their messages, the system prompts once where asked.
    """
    shown: dict[str, Any] = {}
    turns = ev.rollout == "episodes"
    if result.episodes and turns:
        shown = {"episodes": result.episodes, **({"system": result.systems} if show_system else {})}
    return {
        "task": task,
        "policy": "greedy" if greedy else "sample",
        "completions": result.completions,
        "accuracy": result.accuracy,
        "mean_reward": result.mean_reward,
        "mean_length": result.mean_length,
        "examples": _said(result.episodes) if turns else _examples(result, ev),
        **shown,
    }


def _examples(result: Any, ev: Task) -> list[dict[str, Any]]:
    """The first completions: each prompt as its user wrote it, the completion, its reward.

    Then the cells the reward functions gave it with ``log_extra`` (``lm.reserved.CELLS``
    keeps them from these three).
    """
    cells = [{k: v for k, v in e.items() if k not in RECORD} for e in result.episodes]
    cells += [{}] * (len(result.examples) - len(cells))
    return [
        {"prompt": ev.prompt_text(p), "completion": ev.text(completion), "reward": reward, **extra}
        for (p, completion, reward), extra in zip(result.examples, cells, strict=False)
    ]


def _said(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first episodes as examples: their messages as text (no system prompt), the return."""
    from eligibility.lm.episodes.shown import conversation

    return [
        {"prompt": conversation(e["prompt"]), "completion": conversation(e["completion"]),
         "reward": e["return"]}
        for e in episodes
    ]  # fmt: skip


def export(run_dir: str | Path, out: str | Path, *, merge: bool = False) -> Path:
    """Write a run's policy, with its tokenizer, as a Hugging Face directory (``save_pretrained``).

    ``AutoModelForCausalLM.from_pretrained(out)`` loads it back; a LoRA run writes its adapter
    directory (``PeftModel.from_pretrained(base, out)``), or with ``merge`` the merged model.

    Args:
        run_dir: a directory written by ``eligibility finetune`` with ``--model DIR`` (or a
            factory returning a ``PreTrainedModel``).
        out: a new directory.
        merge: a LoRA run: write the merged model W + (α/r) B A.

    Returns:
        The directory written.

    Raises:
        ValueError: not a run, no checkpoint, or a run of the built-in tiny transformer (it has
            no Hugging Face format).
    """
    from eligibility.lm.edge import hf, lora

    refused = export_refusal(load_config(run_dir, FinetuneConfig), run_dir, merge=merge)
    if refused is not None:  # said before the model, the task and its rewards are loaded
        raise ValueError(refused)
    config, model, task = load(run_dir)
    try:
        if not lora.exportable(model):  # a module:factory run: known once its model is built
            raise ValueError(
                f"{str(run_dir)!r} trained the model --model {config.model} returned, which has "
                "no Hugging Face format (no save_pretrained): only such a model can be exported"
            )
        if merge:
            model = lora.merged(model)
        elif lora.is_lora(model) and hf.is_gguf(config.model):
            adapter_of_gguf(model, config.model)
        with warnings.catch_warnings():
            # peft looks for a config.json at the base's name to learn whether the vocabulary
            # was resized (a run never resizes it); a GGUF base has none, and peft says so
            warnings.filterwarnings("ignore", message="Could not find a config file")
            return hf.save_pretrained(model, task.tokenizer, out)
    finally:
        task.close()


def adapter_of_gguf(model: Any, gguf: str) -> None:
    """Name the GGUF file as the base of ``model``'s adapters, and say how to load it.

    peft writes the base's ``name_or_path`` as ``base_model_name_or_path``: for a GGUF file,
    its folder, which ``from_pretrained`` cannot load (nor the file itself: it takes the file
    as ``gguf_file=``). The file is named, so the adapter says what it was trained on, and a
    warning gives the two calls that load it.
    """
    for peft_config in model.peft_config.values():
        peft_config.base_model_name_or_path = gguf
    folder, name = os.path.split(gguf)
    warnings.warn(
        f"the adapter's base_model_name_or_path is the GGUF file {gguf}, which "
        "AutoPeftModelForCausalLM.from_pretrained cannot load by name; load it with "
        f"PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained({folder!r}, "
        f"gguf_file={name!r}), DIR), or export --merge for a model that loads alone",
        UserWarning,
        stacklevel=2,
    )


def export_refusal(config: FinetuneConfig, run_dir: str | Path, *, merge: bool) -> str | None:
    """Why ``export`` cannot write this run, read from its config alone (None: it may).

    The built-in tiny transformer has no Hugging Face format, and ``--merge`` needs adapters
    (``--lora-r``) to merge; a module:factory run is known only once its model is built.
    """
    if config.model == "tiny":
        return (
            f"{str(run_dir)!r} trained the built-in tiny transformer, which has no Hugging "
            "Face format: only a run of a Hugging Face model directory can be exported"
        )
    if merge and config.lora_r is None:
        return (
            f"export --merge: {str(run_dir)!r} trained every weight (the run's lora_r is none), "
            "so there is "
            "no adapter to merge; export it without --merge"
        )
    return None
