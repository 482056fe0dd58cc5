r"""Fine-tune a causal LM with REINFORCE on a verifiable task: sample G, score, step, repeat.

    θ ← θ + α ĝ,   ĝ = −∇ loss,   loss = aggregate_{i,t}( −Aᵢ ℓᵢ,ₜ + β kᵢ,ₜ )

with G completions oᵢ of each of the batch's prompts drawn from π_θ at temperature τ (KV
cache), Rᵢ the task's exact reward, Aᵢ its group advantage and ℓᵢ,ₜ = ln π_θ(oᵢ,ₜ | q, oᵢ,<ₜ)
recomputed with gradients (one update per batch: on-policy, no ratio). The loss is
``eligibility.torch``'s :func:`~eligibility.torch.sequence_reinforce_loss`; the defaults are its
unbiased set (RLOO, no std, a sum over each sequence's tokens). One readable function,
:func:`finetune`; the run directory, checkpoints, logs and signals are the ones ``train`` uses.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from eligibility._signals import Interrupted, stop_on_signals
from eligibility.lm.config import IDENTITY, FinetuneConfig
from eligibility.lm.model import build_model
from eligibility.lm.objective import OFF_POLICY_COLUMNS, reuse_loss
from eligibility.lm.objective import loss as reinforce_loss
from eligibility.lm.sample import Completions, sample, token_logps
from eligibility.lm.tasks import Task, make_task
from eligibility.reinforce import logs
from eligibility.reinforce.config import resumed

COLUMNS = (
    "update",
    "env_steps",
    "episodes",
    "mean_return",
    "min_return",
    "max_return",
    "accuracy",
    "eval_return",
    "mean_length",
    "incorrect_length",
    "loss",
    "entropy",
    "kl",
    "grad_norm",
    "wall_s",
    "steps_per_s",
    *OFF_POLICY_COLUMNS,
)
"""metrics.csv of a fine-tuning run: an episode is a completion, a step one of its tokens, the
return its reward; ``eval_return`` is the greedy accuracy, ``accuracy`` the sampled one,
``incorrect_length`` the mean length of the incorrect completions, ``entropy`` the mean −ln π
of the sampled tokens (an estimate of the per-token entropy), ``kl`` the mean k1 estimate of
KL(π_θ ‖ π_ref) per token (when a KL is set); with ``--epochs-per-batch`` K > 1, the ratio's
diagnostics on the batch's last step under TRL's names (``clip_ratio/*``, ``ratio/*``)."""


class FinetuneRunDir(logs.RunDir):
    """The run directory of ``train``, with the columns and identity of a fine-tuning run."""

    COLUMNS = COLUMNS
    TAGS: ClassVar[dict[str, str]] = {
        "charts/mean_reward": "mean_return",
        "charts/accuracy": "accuracy",
        "charts/eval_accuracy": "eval_return",
        "charts/mean_length": "mean_length",
        "charts/incorrect_length": "incorrect_length",
        "losses/policy_loss": "loss",
        "losses/entropy": "entropy",
        "losses/kl": "kl",
        "losses/grad_norm": "grad_norm",
    }
    IDENTITY = IDENTITY


@dataclass
class FinetuneResult(logs.RunResult):
    """What a run did (the attributes ``train``'s ``TrainResult`` has, for sweeps and tools).

    Attributes:
        solved: the greedy accuracy reached ``target_accuracy``.
        env_steps: completion tokens sampled in training.
        episodes: completions sampled in training.
        updates: gradient steps.
        wall_s: total wall time, evaluation included.
        eval_wall_s: the part spent in greedy evaluation.
        final_eval_return: the last greedy accuracy (None if none ran).
        out_dir: the run directory (None when nothing was written).
        target_return: the target accuracy (None: none).
        history: one dict per update (the rows of metrics.csv).
        already_solved: a resumed run that had met its target: nothing was trained.
        model: the trained model; ``task``: the task.
    """

    model: Any = field(default=None, repr=False)
    task: Task | None = field(default=None, repr=False)


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
    if resume is not None:
        from eligibility.reinforce.runs import load_config

        given = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
        given.pop("out")
        config = resumed(load_config(resume, FinetuneConfig), given, IDENTITY)

    # -- task, policy, frozen reference, optimiser (all checked before a file is written) -------
    task, model, t_max = task_and_model(config)
    ref = copy.deepcopy(model).requires_grad_(False) if config.kl != "none" else None
    learner = _Learner(model, config.lr)
    prompt_rng, sample_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(config.seed).spawn(2)
    )
    rngs = [prompt_rng, sample_rng]
    counters = {"updates": 0, "env_steps": 0, "episodes": 0}
    target = config.target_accuracy
    v, g = task.vocab_size, config.group_size

    run = FinetuneRunDir.open(config, resume=resume is not None) if config.out else None
    history: list[dict[str, Any]] = []
    if run is not None and resume is not None:
        try:
            history = run.restore(learner, counters, {}, rngs)
        except BaseException:
            run.close()
            raise
        last = next(
            (r["eval_return"] for r in reversed(history) if r["eval_return"] is not None), None
        )
        if target is not None and last is not None and last >= target:
            run.close()
            return FinetuneResult(
                solved=True,
                env_steps=counters["env_steps"],
                episodes=counters["episodes"],
                updates=counters["updates"],
                wall_s=time.perf_counter() - t_start,
                eval_wall_s=0.0,
                final_eval_return=last,
                out_dir=run.path,
                target_return=target,
                history=history,
                already_solved=True,
                model=model,
                task=task,
            )
    progress = logs.Progress(f"finetune {config.task}", None, counters) if config.progress else None

    eval_wall, final_eval, solved, stopped = 0.0, None, False, False
    recent: list[float] = []
    t_loop, steps_at_loop = time.perf_counter(), counters["env_steps"]
    try:
        with stop_on_signals(install=run is not None) as stop:
            while counters["updates"] < config.max_updates and not (solved or stopped or stop):
                # -- sample G completions of each prompt of the batch, score them --------------
                n_prompts = len(task.prompts)
                chosen = prompt_rng.choice(
                    n_prompts,
                    config.prompts_per_batch,
                    replace=config.prompts_per_batch > n_prompts,
                )
                group_prompts = np.repeat(chosen, g)
                batch = sample(
                    model,
                    [task.prompts[i] for i in group_prompts],
                    vocab_size=v,
                    max_new_tokens=t_max,
                    temperature=config.temperature,
                    rng=sample_rng,
                )
                rewards = torch.tensor(
                    [_score(task, batch, i, int(p)) for i, p in enumerate(group_prompts)],
                    dtype=torch.float32,
                )

                # -- the REINFORCE loss on recomputed log-probs, one step ----------------------
                mask = batch.completion_mask.bool()
                logps = token_logps(model, batch, vocab_size=v, temperature=config.temperature)
                ref_logps = None
                if ref is not None:
                    with torch.no_grad():
                        ref_logps = token_logps(
                            ref, batch, vocab_size=v, temperature=config.temperature
                        )
                value, _ = reinforce_loss(
                    logps,
                    rewards,
                    mask,
                    group_size=g,
                    baseline=config.baseline,
                    scale=config.scale,
                    aggregation=config.aggregation,
                    max_completion_length=t_max,
                    kl=config.kl,
                    beta=config.beta,
                    ref_logps=ref_logps,
                )
                learner.optimizer.zero_grad(set_to_none=True)
                value.backward()
                clip = math.inf if config.max_grad_norm is None else config.max_grad_norm
                grad_norm = float(torch.nn.utils.clip_grad_norm_(learner.params, clip))
                if not (math.isfinite(float(value.detach())) and math.isfinite(grad_norm)):
                    raise ValueError(
                        "the loss or gradient became non-finite at update "
                        f"{counters['updates'] + 1}: --lr {config.lr} is likely too large "
                        "(or set --max-grad-norm)"
                    )
                learner.optimizer.step()
                reuse = _reuse(
                    learner, model, batch, rewards, mask, logps.detach(), config, v, t_max
                )

                # -- counters, metrics, evaluation, checkpoint ---------------------------------
                lengths = batch.lengths.float()
                correct = rewards == 1.0
                counters["updates"] += 1
                counters["env_steps"] += int(lengths.sum())
                counters["episodes"] += len(group_prompts)
                recent = (recent + rewards.tolist())[-256:]
                eval_acc = None
                if config.eval_every and counters["updates"] % config.eval_every == 0:
                    t0 = time.perf_counter()
                    eval_acc = final_eval = _greedy_accuracy(model, task, t_max)
                    solved = target is not None and eval_acc >= target
                    eval_wall += time.perf_counter() - t0
                elapsed = time.perf_counter() - t_loop
                n_tokens = mask.sum()
                row = {
                    "update": counters["updates"],
                    "env_steps": counters["env_steps"],
                    "episodes": counters["episodes"],
                    "mean_return": float(rewards.mean()),
                    "min_return": float(rewards.min()),
                    "max_return": float(rewards.max()),
                    "accuracy": float(correct.float().mean()),
                    "eval_return": eval_acc,
                    "mean_length": float(lengths.mean()),
                    "incorrect_length": float(lengths[~correct].mean())
                    if (~correct).any()
                    else None,
                    "loss": float(value.detach()),
                    "entropy": float(-(logps.detach() * mask).sum() / n_tokens),
                    "kl": None
                    if ref_logps is None
                    else float(((logps.detach() - ref_logps) * mask).sum() / n_tokens),
                    "grad_norm": grad_norm,
                    "wall_s": elapsed,
                    "steps_per_s": (counters["env_steps"] - steps_at_loop) / max(elapsed, 1e-9),
                    **reuse,
                }
                history.append(row)
                if run is not None:
                    run.log(row)
                    if counters["updates"] % config.checkpoint_every == 0 or solved:
                        run.checkpoint(learner, counters, {}, rngs)
                if progress is not None:
                    progress.update(row, float(np.mean(recent)))
                if callback is not None and callback(dict(row)) is False:
                    stopped = True
            signum = stop.signum
    except BaseException:
        if run is not None:
            run.close()  # the last checkpoint stays as it was; the lock is released
        raise
    finally:
        if progress is not None:
            progress.close()
    if run is not None:
        if history and history[-1]["update"] % config.checkpoint_every != 0 and not solved:
            run.checkpoint(learner, counters, {}, rngs)
        run.finish(history)
        if signum is not None:
            raise Interrupted(signum, run.path)
    return FinetuneResult(
        solved=solved,
        env_steps=counters["env_steps"],
        episodes=counters["episodes"],
        updates=counters["updates"],
        wall_s=time.perf_counter() - t_start,
        eval_wall_s=eval_wall,
        final_eval_return=final_eval,
        out_dir=None if run is None else run.path,
        target_return=target,
        history=history,
        model=model,
        task=task,
    )


def _reuse(
    learner: _Learner,
    model: torch.nn.Module,
    batch: Completions,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    old_logps: torch.Tensor,
    config: FinetuneConfig,
    v: int,
    t_max: int,
) -> dict[str, float | None]:
    """The K − 1 further optimiser steps on one batch (off-policy); the last one's diagnostics."""
    diag: dict[str, float | None] = dict.fromkeys(OFF_POLICY_COLUMNS)
    for k in range(config.epochs_per_batch - 1):
        logps = token_logps(model, batch, vocab_size=v, temperature=config.temperature)
        value, diag = reuse_loss(  # type: ignore[assignment]
            logps,
            old_logps,
            rewards,
            mask,
            group_size=config.group_size,
            baseline=config.baseline,
            scale=config.scale,
            aggregation=config.aggregation,
            max_completion_length=t_max,
            ratio=config.ratio,
            clip=config.clip,
        )
        learner.optimizer.zero_grad(set_to_none=True)
        value.backward()
        clip = math.inf if config.max_grad_norm is None else config.max_grad_norm
        grad_norm = float(torch.nn.utils.clip_grad_norm_(learner.params, clip))
        if not (math.isfinite(float(value.detach())) and math.isfinite(grad_norm)):
            raise ValueError(
                f"the loss or gradient became non-finite on reuse step {k + 2} of a batch: "
                f"--lr {config.lr} is likely too large (or set --max-grad-norm, --clip)"
            )
        learner.optimizer.step()
    return diag


def complete(result: FinetuneResult, config: FinetuneConfig) -> bool:
    """Whether a run ended on its own (solved, or its updates spent): the sweep's test."""
    return bool(result.solved) or result.updates >= config.max_updates
