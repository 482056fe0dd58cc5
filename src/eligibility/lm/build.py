"""A run's config resolved and its task and policy built, checked before anything is written.

:func:`resolve` is the one place a run's config is resolved, reading top to bottom: the user's
words (TRL's objects from Python as specs, a ``peft_config``, a resumed run's saved config);
the data and the task (``lm.usertask``); ``--device`` (``lm.edge.device``: a local rank of
several on CUDA its own, where it loads and measures the model too); the model loaded
with its sizes, its vocabulary and positions held against the task (``lm.edge.loaders``; the
tiny model's sizes checked against the machine before it is built, ``lm.limits``); the model
sampled once (``lm.measure.sampled``): under ``--defaults auto`` measured, and the settings
resolved anew from the column it takes, else probed with two tokens, either way shown to take
the sampler's causal-LM call; what ``auto`` resolves to on that device. Nothing after it
rewrites the config. :func:`task_and_policy` then, at that column's batch and precision, holds
the batch against the launcher's ranks and one update against the machine, and makes the
:class:`~eligibility.lm.policy.Policy` over the ranks, which puts LoRA's adapters on the model,
places it on the device and holds the forward it runs there (``lm.edge.forward``, kept per
model: for a full fine-tune on one rank or data-parallel, the one the sampling held).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from eligibility._output import note
from eligibility.lm import limits
from eligibility.lm.config import IDENTITY, INFINITE, FinetuneConfig
from eligibility.lm.defaults import column_line
from eligibility.lm.edge import decoding, lora
from eligibility.lm.edge import device as devices
from eligibility.lm.edge.loaders import Dims, dims_of, load
from eligibility.lm.edge.ranks import Ranks, launch
from eligibility.lm.episodes.episode_rollout import EpisodeRollout
from eligibility.lm.importance import resolved as resolved_correction
from eligibility.lm.measure import sampled
from eligibility.lm.policy import Policy, lora_fields
from eligibility.lm.rollout import CompletionRollout, Rollout
from eligibility.lm.specs import as_specs
from eligibility.lm.tasks import Task, judged
from eligibility.lm.truncation import Sampling
from eligibility.lm.usertask import make_task, task_for_run
from eligibility.runs import load_config, resumed


def task_and_model(config: FinetuneConfig, **user: Any) -> tuple[Task, torch.nn.Module, int]:
    """The run's task, its freshly initialised model (with LoRA's adapters) and T_max.

    ``user``: ``reward_funcs`` and ``records`` from Python (see ``usertask.make_task``). Sizes
    that cannot fit the machine are refused (``lm.limits``; the tiny model's before it is
    built). The
    config is taken as it is (nothing measured: a saved run's, or a test's), and the model
    built on the CPU, whatever ``--device`` the run trained on (``evaluate``, ``export``).
    ValueErrors for bad input.
    """
    task = judged(make_task(config, **user), config.success_return)
    with _closed_on_error(task):
        shape = _Shape.of(config, task, torch.device("cpu"))
        model, dims = _model(config, task, shape)
        if config.model != "tiny":  # (the tiny model's were checked before it was built)
            _fits(dims, config, shape)
        if (adapters := _adapters(config)) is not None:
            model = lora.wrap(model, **adapters)
        return _on_vocabulary(task, dims.vocab), model, shape.t_max


ROLLOUTS: dict[str, Callable[[Any], Rollout[Any]]] = {
    "prompts": CompletionRollout,
    "episodes": EpisodeRollout,
}
"""A task's ``rollout`` → its rollout, keyed in the one vocabulary of the kinds of task
(``lm.usertask.KINDS``): a kind whose tasks draw their batches in a way of their own adds a row
here under its own name; a built-in task or a Gymnasium id of text is drawn as one of these."""


def rollout_for(task: Task) -> Rollout[Any]:
    """The rollout ``task`` names (``Task.rollout``, a row of :data:`ROLLOUTS`): no kind is asked.

    Episodes played on a task of several turns
    (``lm.episodes.episode_rollout.EpisodeRollout``), else prompts completed once each
    (``lm.rollout.CompletionRollout``).
    """
    return ROLLOUTS[task.rollout](task)


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A run's settings resolved, with what was built to resolve them (:func:`resolve`).

    Attributes:
        config: the run's config, final: what config.json saves and every part reads.
        task: the task, judged (its success rule) and on the model's vocabulary.
        model: the model, not yet placed over the ranks.
        dims: its sizes.
        shape: an update's shape (T_max, the longest prompt, the device).
    """

    config: FinetuneConfig
    task: Task
    model: torch.nn.Module
    dims: Dims
    shape: _Shape


def resolve(
    config: FinetuneConfig,
    *,
    measure: bool = True,
    resume: str | Path | None = None,
    peft_config: Any = None,
    **trl: Any,
) -> Resolved:
    """The run's config resolved once, from every source, before the policy is built.

    In order: the user's words (TRL's objects from Python named as importable specs, a
    ``peft_config``'s ``lora_*``, a resumed run's saved config with only the settings given
    applied); the data fingerprinted and the task made (``lm.usertask``; ``trl``: TRL's objects
    from Python) and its success rule (R = 1, ``--success-return``, the task's own); ``--device``;
    the model, its vocabulary and positions checked against the task (the tiny one's sizes
    against the machine before it is built); the model sampled once (``lm.measure.sampled``:
    under ``--defaults auto`` measured, and the settings resolved anew from the column it
    takes, else probed; not the built-in tiny one); what ``auto`` resolves to here
    (``--dtype``, ``--importance-sampling``). Nothing after this rewrites the config but the
    rank's view of it (``Ranks.for_rank``: another rank writes no directory).
    ``resume``: the run directory a resumed run continues.
    """
    names = ("reward_funcs", "tools", "environment_factory")
    config = dataclasses.replace(config, **as_specs(*(trl.get(k) for k in names)))
    if peft_config is not None:
        config = config.with_changes(**lora_fields(peft_config))
    if resume is not None:  # the saved run is the identity; only the settings given apply
        config = resumed(load_config(resume, FinetuneConfig), config.given(), IDENTITY, INFINITE)
    config, task = task_for_run(config, resume, **trl)
    task = judged(task, config.success_return)  # what a success is: R = 1, or R ≥ this
    with _closed_on_error(task):
        shape = _Shape.of(config, task, devices.resolve(config.device))
        model, dims = _model(config, task, shape)
        task = _on_vocabulary(task, dims.vocab)
        if config.model != "tiny":  # one sampling: the measurement, or the probe alone
            run, auto = shape.dtype(config.dtype), measure and config.defaults == "auto"
            column = sampled(config.model, model, task, shape.where, shape.t_max, run, measure=auto)
            config = config.with_changes(**column) if column else config  # the table, anew
        dtype = shape.dtype(config.dtype)
        stale = bool(config.max_staleness)  # a sampler beside the learner, k ≥ 1
        correction = resolved_correction(
            config.importance_sampling, dtype, Sampling.of(config) is None, stale
        )
    config = dataclasses.replace(  # the task's own success rule (tools: R ≥ 1) saved, said
        config, success_return=task.success_return, dtype=dtype, importance_sampling=correction
    )
    return Resolved(config, task, model, dims, shape)


def task_and_policy(
    config: FinetuneConfig,
    *,
    measure: bool = True,
    resume: str | Path | None = None,
    peft_config: Any = None,
    **trl: Any,
) -> tuple[FinetuneConfig, Task, Policy, int]:
    """The run's config, task, policy on ``--device`` in ``--dtype``, and T_max (ValueErrors).

    The config resolved (:func:`resolve`); then, at its column's batch and precision, the batch
    checked against the launcher's ranks and one update against the machine, and the
    :class:`Policy` (:func:`_placed`), which holds the forward it runs where it is placed (LoRA's
    wrapper with its adapters drawn away from B = 0; a sharded model's own call); the column
    said in one line on stderr (but for the built-in tiny model).
    """
    run = resolve(config, measure=measure, resume=resume, peft_config=peft_config, **trl)
    config, task = run.config, run.task
    with _closed_on_error(task):
        policy = _placed(config, run.model, run.dims, run.shape, resumed=resume is not None)
    if measure and "defaults" not in config.defaulted and policy.ranks.main:  # (tiny: no word)
        note("finetune", column_line(config))
    return config, task, policy, run.shape.t_max


def _placed(
    config: FinetuneConfig, model: torch.nn.Module, dims: Dims, shape: _Shape, *, resumed: bool
) -> Policy:
    """The :class:`Policy` over the launcher's ranks, LoRA's adapters on it, on its device.

    First the batch is checked against the ranks (:func:`_shareable`) and one update against
    the machine at the column's batch and precision (the tiny model's before it was built);
    ``--fsdp`` without a launcher says it does nothing (but on a resume, which keeps the run's
    word). The policy joins the launcher's ranks on the device the set-up resolved (a local
    rank of several on CUDA its own from the start: ``lm.edge.ranks.home``).
    """
    adapters, keep = _adapters(config), config.kl_term != "none"  # keep: the KL's reference
    _shareable(config)
    if config.model != "tiny":
        _fits(dims, config, shape)
    if config.fsdp and launch().world == 1 and not resumed:
        note(
            "finetune",
            "--fsdp shards over the ranks torchrun starts: one process here, it does nothing",
        )
    if config.compile_decode and not decoding.fixed_shapes(shape.where):
        note(
            "finetune",
            "--compile-decode compiles the captured decode step, which is held back (on a GPU "
            "it ended rows early): here it does nothing",
        )
    # the launcher's ranks (or this process alone), joined by the policy once it holds the model
    return Policy(
        model,
        shape.where,
        config.dtype,
        Ranks.from_env,
        config.fsdp,
        keep,
        adapters=adapters,
        compile_decode=config.compile_decode,
    )


@contextlib.contextmanager
def _closed_on_error(task: Task) -> Iterator[None]:
    """The task's reward workers stopped if the set-up fails after they started."""
    try:
        yield
    except BaseException:
        task.close()
        raise


@dataclasses.dataclass(frozen=True)
class _Shape:
    """An update's shape: T_max, the longest prompt and the device (the sizes' inputs).

    ``auto``: what ``--dtype auto`` resolves to on ``where`` (``lm.edge.device``).
    """

    t_max: int
    longest: int
    where: torch.device = dataclasses.field(default_factory=lambda: torch.device("cpu"))
    auto: str = "float32"

    @classmethod
    def of(cls, config: FinetuneConfig, task: Task, where: torch.device) -> _Shape:
        t_max = config.max_completion_length or task.max_completion_length
        longest = max(len(p) for p in (*task.prompts, *task.evaluation.prompts))
        return cls(t_max, longest, where, devices.resolved_dtype("auto", where))

    def dtype(self, given: str) -> str:
        """``--dtype`` on this device: ``auto`` as :attr:`auto` resolved it, else as given."""
        return self.auto if given == "auto" else given

    @property
    def length(self) -> int:
        """The longest sequence: the longest prompt + T_max."""
        return self.longest + self.t_max

    def update(self, config: FinetuneConfig) -> tuple[int, str, dict[str, int]]:
        """The sequences a rank scores at once, their words, the update's footprints.

        A rank scores its share of the batch's N rows, ⌈N / W⌉, M at a time
        (``--micro-batch-size``); under ``--fsdp`` it holds 1/W of the weights (``lm.limits``).
        """
        n, world = config.prompts_per_batch * config.group_size, launch().world
        what = (
            f"a batch of N = {n} sequences of {self.length} tokens (the longest prompt, "
            f"{self.longest}, + T_max {self.t_max})" + (f" over {world} ranks" if world > 1 else "")
        )
        sizes = limits.sizes(
            lora=config.lora_r is not None,
            dtype=self.dtype(config.dtype),
            reference=config.kl_term != "none",
            shards=world if config.fsdp else 1,  # the weights' shards per rank
        )
        share = -(-n // world)
        return min(share, config.micro_batch_size or share), what, sizes


def _model(config: FinetuneConfig, task: Task, shape: _Shape) -> tuple[torch.nn.Module, Dims]:
    """The model ``--model`` names, built, and its sizes (``lm.edge.loaders.load``).

    The tiny model's sizes are checked against the machine before it is built (``lm.limits``);
    another's once it is loaded and its column known (:func:`task_and_policy`).
    """
    sizes = {"d_model": config.d_model, "n_layer": config.n_layer, "n_head": config.n_head}
    if config.model == "tiny":
        _fits(
            Dims.tiny(task.vocab_size, shape.length, **sizes),
            config,
            shape,
            f"--d-model {config.d_model} with ",
        )
    return load(config.model, task.vocab_size, config.seed, **sizes, max_positions=shape.length)


def _adapters(config: FinetuneConfig) -> dict[str, Any] | None:
    """LoRA's settings under ``--lora-r`` (``lm.edge.lora.wrap``'s keywords; None without)."""
    if config.lora_r is None:
        return None
    return {
        "r": config.lora_r,
        "alpha": config.lora_alpha,
        "dropout": config.lora_dropout,
        "targets": config.lora_target_modules,
        "seed": config.seed,
    }


def _on_vocabulary(task: Task, v: int) -> Task:
    """A tokenizer's task over the model's whole vocabulary, ``v`` logits (no first-V slice)."""
    if task.tokenizer is None:
        return task
    held = task.held_out and dataclasses.replace(task.held_out, n_tokens=v)
    return dataclasses.replace(task, n_tokens=v, held_out=held)


def _fits(dims: Dims, config: FinetuneConfig, shape: _Shape, said: str = "") -> None:
    """One update at ``config``'s batch fits the machine (``limits.check``; ``said`` leads)."""
    at_once, what, sizes = shape.update(config)
    limits.check(dims, shape.length, at_once, said + what, **sizes)


def _shareable(config: FinetuneConfig) -> None:
    """The batch checked against the launcher's ranks before joining their group.

    Every rank refuses alike, so none waits for a rank that left.
    """
    world, n = launch().world, config.prompts_per_batch * config.group_size
    if n < world or (config.fsdp and n % world):
        need = "a multiple of" if config.fsdp else "at least"
        raise ValueError(
            f"a batch of {n} sequences (--prompts-per-batch x --group-size) cannot be "
            f"shared by {world} ranks: give {need} {world} sequences"
            + (" (--fsdp: every rank runs the same passes)" if config.fsdp else "")
        )


def evaluation_rows(config: FinetuneConfig, task: Task, policy: Policy, t_max: int) -> int:
    """The rows the held-out evaluation samples at once (``lm.limits.eval_rows``).

    As many as one update's activations allow (an update of the batch's N rows, or M at a
    time under ``--micro-batch-size``, fits), and no more than the held-out prompts.
    """
    n = config.prompts_per_batch * config.group_size
    shape = _Shape.of(config, task, policy.device)
    b = 2 if policy.dtype == "bfloat16" else 4
    rows = limits.eval_rows(config.micro_batch_size or n, shape.length, dims_of(policy.model), b)
    return max(1, min(rows, len(task.evaluation.prompts)))


def check_task(config: FinetuneConfig) -> None:
    """A sweep's check of a ``finetune`` config: its task and model are built once, here.

    An unknown task, a prompt file that does not parse, a reward that cannot score, or a model
    that cannot be built is one error before any run starts, not one per run later.

    Raises:
        ValueError: naming the task or the model.
    """
    task_and_policy(config, measure=False)[1].close()  # a user's task holds reward workers
