r"""Fine-tune a causal LM with REINFORCE on a verifiable task: sample G, score, step, repeat.

    θ ← θ + α ĝ,   ĝ = −∇ loss,   loss = aggregate_{i,t}( −Aᵢ ℓᵢ,ₜ + β kᵢ,ₜ )

with G completions oᵢ of each of the batch's prompts drawn from π_θ at temperature τ (KV
cache), Rᵢ the task's exact reward, Aᵢ its group advantage and ℓᵢ,ₜ = ln π_θ(oᵢ,ₜ | q, oᵢ,<ₜ)
recomputed with gradients (one update per batch: on-policy, no ratio). The loss is
``eligibility.torch``'s :func:`~eligibility.torch.sequence_reinforce_loss`; the defaults are its
unbiased set (RLOO, no std, a sum over each sequence's tokens).

One readable function, :func:`finetune`; the run directory, checkpoints, resume rule, progress
and signals are the run layer's (:mod:`eligibility.runs`, as ``train``'s are); the metrics speak
of rewards, accuracies, completions and tokens (:mod:`eligibility.lm.metrics`); the plumbing
around the loop is a small private class beside it, ``_Run``.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from eligibility.lm.config import IDENTITY, FinetuneConfig
from eligibility.lm.metrics import SCHEMA
from eligibility.lm.model import build_model
from eligibility.lm.objective import loss as reinforce_loss
from eligibility.lm.sample import Completions, sample, token_logps
from eligibility.lm.tasks import Task, make_task
from eligibility.runs import (
    Interrupted,
    Progress,
    RunDir,
    RunResult,
    Schema,
    Stop,
    resume_config,
    stop_on_signals,
)


@dataclass
class FinetuneResult(RunResult):
    """What a run did (the fields of ``train``'s ``TrainResult``, for sweeps and tools).

    Attributes:
        solved: the greedy accuracy reached ``target_accuracy``.
        env_steps: completion tokens sampled in training (also :attr:`tokens`).
        episodes: completions sampled in training (also :attr:`completions`).
        updates: gradient steps.
        wall_s: total wall time, evaluation included.
        eval_wall_s: the part spent in greedy evaluation.
        final_eval_return: the last greedy accuracy (None if none ran).
        out_dir: the run directory (None when nothing was written).
        target_return: the target accuracy (None: none).
        history: one dict per update (the rows of metrics.csv, ``lm.metrics.COLUMNS``).
        already_solved: a resumed run that had met its target: nothing was trained.
        model: the trained model; ``task``: the task.
    """

    SCHEMA: ClassVar[Schema] = SCHEMA

    model: Any = field(default=None, repr=False)
    task: Task | None = field(default=None, repr=False)

    @property
    def tokens(self) -> int:
        """Completion tokens sampled in training."""
        return self.env_steps

    @property
    def completions(self) -> int:
        """Completions sampled in training."""
        return self.episodes


class _Learner:
    """The model and its optimiser as one ``state_dict`` of NumPy arrays (the checkpoint's)."""

    def __init__(self, model: torch.nn.Module, lr: float) -> None:
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(self.params, lr=lr)

    def state_dict(self) -> dict[str, np.ndarray]:
        out = {f"policy.{k}": v.detach().numpy().copy() for k, v in self.model.state_dict().items()}
        for i, s in self.optimizer.state_dict()["state"].items():
            out.update({f"optim.{i}.{k}": torch.as_tensor(v).numpy().copy() for k, v in s.items()})
        return out

    def load_state_dict(self, d: dict[str, np.ndarray]) -> None:
        weights = {
            k[len("policy.") :]: torch.from_numpy(np.array(v))
            for k, v in d.items()
            if k.startswith("policy.")
        }
        self.model.load_state_dict(weights)
        state: dict[int, dict[str, torch.Tensor]] = {}
        for k, v in d.items():
            if k.startswith("optim."):
                _, i, name = k.split(".", 2)
                state.setdefault(int(i), {})[name] = torch.from_numpy(np.array(v))
        groups = self.optimizer.state_dict()["param_groups"]
        self.optimizer.load_state_dict({"state": state, "param_groups": groups})


def task_and_model(config: FinetuneConfig) -> tuple[Task, torch.nn.Module, int]:
    """The run's task, its freshly initialised model and T_max (ValueErrors for bad input)."""
    task = make_task(config.task, config.prompts, config.completion_chars)
    t_max = config.max_completion_length or task.max_completion_length
    model = build_model(
        config.model,
        task.vocab_size,
        config.seed,
        d_model=config.d_model,
        n_layer=config.n_layer,
        n_head=config.n_head,
        max_positions=max(len(p) for p in task.prompts) + t_max,
    )
    return task, model, t_max


def _greedy_accuracy(model: torch.nn.Module, task: Task, t_max: int) -> float:
    """Fraction of the task's prompts whose greedy completion is correct (R = 1)."""
    batch = sample(model, task.prompts, vocab_size=task.vocab_size, max_new_tokens=t_max)
    return float(np.mean([_score(task, batch, i, i) == 1.0 for i in range(len(task.prompts))]))


def _score(task: Task, batch: Completions, i: int, prompt: int) -> float:
    return task.score(prompt, batch.completion(i), bool(batch.ended[i]))


def _update(run: _Run, batch: Completions, rewards: torch.Tensor) -> dict[str, Any]:
    """The REINFORCE loss on recomputed log-probs, its gradient clipped, one Adam step.

    Returns:
        The update's numbers: ``loss``, ``entropy``, ``kl`` (None without a KL), ``grad_norm``.

    Raises:
        ValueError: the loss or the gradient is NaN/inf (nothing applied).
    """
    config, learner, v = run.config, run.learner, run.task.vocab_size
    mask = batch.completion_mask.bool()
    logps = token_logps(learner.model, batch, vocab_size=v, temperature=config.temperature)
    ref_logps = None
    if run.ref is not None:
        with torch.no_grad():
            ref_logps = token_logps(run.ref, batch, vocab_size=v, temperature=config.temperature)
    value, _ = reinforce_loss(
        logps,
        rewards,
        mask,
        group_size=config.group_size,
        baseline=config.baseline,
        scale=None if config.scale == "none" else config.scale,
        aggregation=config.aggregation,
        max_completion_length=run.t_max,
        kl=None if config.kl == "none" else config.kl,
        beta=config.beta,
        ref_logps=ref_logps,
    )
    learner.optimizer.zero_grad(set_to_none=True)
    value.backward()
    clip = math.inf if config.max_grad_norm is None else config.max_grad_norm
    grad_norm = float(torch.nn.utils.clip_grad_norm_(learner.params, clip))
    if not (math.isfinite(float(value.detach())) and math.isfinite(grad_norm)):
        raise ValueError(
            f"the loss or gradient became non-finite at update {run.counters['updates'] + 1}: "
            f"--lr {config.lr} is likely too large (or set --max-grad-norm)"
        )
    learner.optimizer.step()
    n_tokens, logps = mask.sum(), logps.detach()
    kl = None if ref_logps is None else float(((logps - ref_logps) * mask).sum() / n_tokens)
    entropy = float(-(logps * mask).sum() / n_tokens)
    return dict(loss=float(value.detach()), entropy=entropy, kl=kl, grad_norm=grad_norm)


@dataclass
class _Run:
    """One call of :func:`finetune`: its resources and the state a checkpoint saves.

    The plumbing around the loop lives here, so that :func:`finetune` shows the algorithm:
    opening (and resuming) the run, evaluating, logging and checkpointing an update, building
    the :class:`FinetuneResult`. Everything opened is entered on ``stack``.
    """

    config: FinetuneConfig
    t_start: float
    stack: contextlib.ExitStack
    task: Task
    learner: _Learner
    ref: torch.nn.Module | None  # the frozen initial policy of the KL (None: no KL)
    t_max: int
    rngs: list[np.random.Generator]  # the prompts' draws, the samples'
    files: RunDir | None  # the run directory (None: nothing is written)
    stop: Stop
    counters: dict[str, int] = field(
        default_factory=lambda: {"updates": 0, "tokens": 0, "completions": 0}
    )
    history: list[dict[str, Any]] = field(default_factory=list)
    recent: list[float] = field(default_factory=list)  # the last 256 rewards
    progress: Progress | None = None
    eval_wall: float = 0.0
    t_loop: float = 0.0
    tokens_at_loop: int = 0

    @classmethod
    def open(
        cls, stack: contextlib.ExitStack, config: FinetuneConfig, resume: Any, t_start: float
    ) -> _Run:
        """Build the task and models (checked before a file is written), open the run, restore."""
        task, model, t_max = task_and_model(config)
        ref = copy.deepcopy(model).requires_grad_(False) if config.kl != "none" else None
        rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(config.seed).spawn(2)]
        files = None
        if config.out:
            open_dir = RunDir.open(config, SCHEMA, IDENTITY, resume=resume is not None)
            files = stack.enter_context(open_dir)
        stop = stack.enter_context(stop_on_signals(install=files is not None))
        learner = _Learner(model, config.lr)
        run = cls(config, t_start, stack, task, learner, ref, t_max, rngs, files, stop)
        if files is not None and resume is not None:
            tensors, run.history = files.restore(learner.state_dict(), run.counters, rngs)
            if tensors is not None:
                learner.load_state_dict(tensors)
        return run

    def already_solved(self) -> float | None:
        """The last greedy accuracy of a resumed run when it met the target (None: go on)."""
        evals = [r["eval_accuracy"] for r in self.history if r["eval_accuracy"] is not None]
        target = self.config.target_accuracy
        return evals[-1] if target is not None and evals and evals[-1] >= target else None

    def start(self) -> None:
        """Start the progress display and the loop's clock."""
        if self.config.progress:
            name, done = f"finetune {self.config.task}", self.counters["tokens"]
            self.progress = self.stack.enter_context(Progress(name, None, done, SCHEMA))
        self.t_loop, self.tokens_at_loop = time.perf_counter(), self.counters["tokens"]

    def evaluate(self) -> float:
        """The greedy accuracy on all of the task's prompts (its time kept apart)."""
        t0 = time.perf_counter()
        try:
            return _greedy_accuracy(self.learner.model, self.task, self.t_max)
        finally:
            self.eval_wall += time.perf_counter() - t0

    def record(
        self,
        batch: Completions,
        rewards: torch.Tensor,
        stats: dict[str, Any],
        eval_accuracy: float | None,
        checkpoint: bool,
    ) -> dict[str, Any]:
        """Log the update just made (metrics.csv, TensorBoard, progress), checkpoint if asked.

        Returns:
            The update's metrics row.
        """
        c, lengths, correct = self.counters, batch.lengths.float(), rewards == 1.0
        self.recent = (self.recent + rewards.tolist())[-256:]
        elapsed = time.perf_counter() - self.t_loop
        row = {
            "update": c["updates"],
            "tokens": c["tokens"],
            "completions": c["completions"],
            "mean_reward": float(rewards.mean()),
            "min_reward": float(rewards.min()),
            "max_reward": float(rewards.max()),
            "accuracy": float(correct.float().mean()),
            "eval_accuracy": eval_accuracy,
            "mean_length": float(lengths.mean()),
            "incorrect_length": float(lengths[~correct].mean()) if (~correct).any() else None,
            **stats,  # loss, entropy, kl, grad_norm
            "wall_s": elapsed,
            "tokens_per_s": (c["tokens"] - self.tokens_at_loop) / max(elapsed, 1e-9),
        }
        self.history.append(row)
        if self.files is not None:
            self.files.log(row)
            if checkpoint:
                self.checkpoint()
        if self.progress is not None:
            self.progress.update(row, float(np.mean(self.recent)))
        return row

    def checkpoint(self) -> None:
        """Write the checkpoint (when the run has a directory)."""
        if self.files is not None:
            self.files.checkpoint(self.learner.state_dict(), self.counters, self.rngs)

    def finish(self, solved: bool, final_eval: float | None) -> FinetuneResult:
        """Checkpoint the last update, draw the curve, close; :class:`Interrupted` for a stop."""
        signum = self.stop.signum
        if self.files is not None:
            h = self.history
            if h and h[-1]["update"] % self.config.checkpoint_every != 0 and not solved:
                self.checkpoint()
            self.files.finish(h)
            if signum is not None:
                raise Interrupted(signum, self.files.path)
        return self.result(solved, final_eval)

    def result(
        self, solved: bool, final_eval: float | None, already_solved: bool = False
    ) -> FinetuneResult:
        """The run's :class:`FinetuneResult` (the one place it is built)."""
        return FinetuneResult(
            solved=solved,
            env_steps=self.counters["tokens"],
            episodes=self.counters["completions"],
            updates=self.counters["updates"],
            wall_s=time.perf_counter() - self.t_start,
            eval_wall_s=self.eval_wall,
            final_eval_return=final_eval,
            out_dir=None if self.files is None else self.files.path,
            target_return=self.config.target_accuracy,
            history=self.history,
            already_solved=already_solved,
            model=self.learner.model,
            task=self.task,
        )


def finetune(
    config: FinetuneConfig,
    *,
    resume: str | Path | None = None,
    callback: Callable[[dict[str, Any]], bool | None] | None = None,
) -> FinetuneResult:
    """Fine-tune ``config.model`` on ``config.task`` until the greedy accuracy reaches the target.

    Args:
        config: the run's settings.
        resume: a run directory to continue from its last checkpoint (its saved config is
            used; only the budget, target, cadences and progress are taken from ``config``).
        callback: ``callback(row)`` after each update; returning ``False`` stops the run cleanly,
            with a checkpoint.

    Raises:
        ValueError: a bad task, model, prompt file or reward (before anything is written), or
            a reward that fails later (the last checkpoint stays whole).
        Interrupted: SIGINT/SIGTERM, after checkpointing the last completed update.
    """
    t_start = time.perf_counter()
    if resume is not None:  # the saved run is the identity; only changeable settings apply
        config = resume_config(resume, config, IDENTITY)
    target, g = config.target_accuracy, config.group_size
    with contextlib.ExitStack() as stack:  # the run directory, the stop flag, the progress
        run = _Run.open(stack, config, resume, t_start)
        task, model, counters = run.task, run.learner.model, run.counters
        prompt_rng, sample_rng = run.rngs
        if (last_eval := run.already_solved()) is not None:  # raise the target to go on
            return run.result(True, last_eval, already_solved=True)
        run.start()
        final_eval, solved, stopped = None, False, False
        while counters["updates"] < config.max_updates and not (solved or stopped or run.stop):
            # -- sample G completions of each prompt of the batch, score them ------------------
            n_prompts, per_batch = len(task.prompts), config.prompts_per_batch
            chosen = prompt_rng.choice(n_prompts, per_batch, replace=per_batch > n_prompts)
            prompts = np.repeat(chosen, g)
            batch = sample(
                model,
                [task.prompts[i] for i in prompts],
                vocab_size=task.vocab_size,
                max_new_tokens=run.t_max,
                temperature=config.temperature,
                rng=sample_rng,
            )
            rewards = torch.tensor(
                [_score(task, batch, i, int(p)) for i, p in enumerate(prompts)],
                dtype=torch.float32,
            )

            # -- the REINFORCE loss on recomputed log-probs, one step --------------------------
            stats = _update(run, batch, rewards)
            counters["updates"] += 1
            counters["tokens"] += int(batch.lengths.sum())
            counters["completions"] += len(prompts)

            # -- the greedy accuracy every eval_every updates ----------------------------------
            eval_accuracy = None
            if config.eval_every and counters["updates"] % config.eval_every == 0:
                eval_accuracy = final_eval = run.evaluate()
                solved = target is not None and eval_accuracy >= target

            # -- log, checkpoint, report -------------------------------------------------------
            due = counters["updates"] % config.checkpoint_every == 0 or solved
            row = run.record(batch, rewards, stats, eval_accuracy, due)
            stopped = callback is not None and callback(dict(row)) is False
        return run.finish(solved, final_eval)


def complete(result: FinetuneResult, config: FinetuneConfig) -> bool:
    """Whether a run ended on its own (solved, or its updates spent): the sweep's test."""
    return bool(result.solved) or result.updates >= config.max_updates
