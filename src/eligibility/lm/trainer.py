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
import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from eligibility._signals import Interrupted, stop_on_signals
from eligibility.lm import hf, limits
from eligibility.lm.config import IDENTITY, FinetuneConfig
from eligibility.lm.model import build_model, vocab_of
from eligibility.lm.objective import loss as reinforce_loss
from eligibility.lm.rewards import fill_unscorable
from eligibility.lm.sample import sample, token_logps
from eligibility.lm.tasks import Task
from eligibility.lm.usertask import fingerprints, make_task
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
    "eval_reward",
    "mean_length",
    "incorrect_length",
    "loss",
    "entropy",
    "kl",
    "grad_norm",
    "wall_s",
    "steps_per_s",
)
"""metrics.csv of a fine-tuning run: an episode is a completion, a step one of its tokens, the
return its reward; ``eval_return`` is the greedy accuracy (on the held-out prompts when
given), ``eval_reward`` the greedy completions' mean reward, ``accuracy`` the sampled one,
``incorrect_length`` the mean length of the incorrect completions, ``entropy`` the mean −ln π
of the sampled tokens (an estimate of the per-token entropy), ``kl`` the mean k1 estimate of
KL(π_θ ‖ π_ref) per token (when a KL is set)."""


class FinetuneRunDir(logs.RunDir):
    """The run directory of ``train``, with the columns and identity of a fine-tuning run."""

    COLUMNS = COLUMNS
    TAGS: ClassVar[dict[str, str]] = {
        "charts/mean_reward": "mean_return",
        "charts/accuracy": "accuracy",
        "charts/eval_accuracy": "eval_return",
        "charts/eval_reward": "eval_reward",
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


def task_and_model(config: FinetuneConfig, **user: Any) -> tuple[Task, torch.nn.Module, int]:
    """The run's task, its freshly initialised model and T_max (ValueErrors for bad input).

    ``user``: ``reward_funcs`` and ``records`` from Python (see ``usertask.make_task``). Sizes
    that cannot fit the machine are refused before the model is built (``lm.limits``).
    """
    task = make_task(config, **user)
    try:
        t_max = config.max_completion_length or task.max_completion_length
        longest = max(len(p) for p in (*task.prompts, *task.evaluation.prompts))
        n, length = config.prompts_per_batch * config.group_size, longest + t_max
        what = (
            f"a batch of N = {n} sequences of {length} tokens (the longest prompt, {longest}, "
            f"+ T_max {t_max})"
        )
        if config.model == "tiny":
            dims = {"d_model": config.d_model, "n_layer": config.n_layer}
            params = limits.tiny_params(task.vocab_size, length, **dims)
            need = limits.update_bytes(
                n, length, **dims, n_head=config.n_head, vocab=task.vocab_size, params=params
            )
            limits.check_fits(need, f"--d-model {config.d_model} with {what}")
        model = build_model(
            config.model,
            task.vocab_size,
            config.seed,
            d_model=config.d_model,
            n_layer=config.n_layer,
            n_head=config.n_head,
            max_positions=length,
        )
        if config.model != "tiny":
            _check_model_fits(model, length, n, what)
        if task.tokenizer is not None:  # the whole vocabulary of the model (no first-V slice)
            v = vocab_of(model)
            held = task.held_out and dataclasses.replace(task.held_out, n_tokens=v)
            task = dataclasses.replace(task, n_tokens=v, held_out=held)
    except BaseException:
        task.close()
        raise
    return task, model, t_max


def _check_model_fits(model: torch.nn.Module, length: int, n: int, what: str) -> None:
    """The model's positions hold prompt + completion, and one update fits the machine."""
    cfg = getattr(model, "config", None)
    positions = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    if isinstance(positions, int) and length > positions:
        raise ValueError(
            f"the model has {positions} positions, fewer than the {length} that the longest "
            "prompt + --max-completion-length need: shorten the prompts or lower "
            "--max-completion-length"
        )
    dims = {
        "d_model": int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "n_embd", 0) or 1),
        "n_layer": int(getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layer", 0) or 1),
        "n_head": int(getattr(cfg, "num_attention_heads", 0) or getattr(cfg, "n_head", 0) or 1),
    }
    params = sum(p.numel() for p in model.parameters())
    need = limits.update_bytes(n, length, **dims, vocab=vocab_of(model), params=params)
    limits.check_fits(need, what)


def _greedy_eval(model: torch.nn.Module, task: Task, t_max: int, chunk: int) -> tuple[float, float]:
    """(accuracy, mean reward) of the greedy completions of the evaluation prompts.

    Evaluated ``chunk`` prompts at a time (the training batch's size, known to fit).
    """
    ev = task.evaluation
    correct, rewards = [], []
    for start in range(0, len(ev.prompts), chunk):
        index = list(range(start, min(start + chunk, len(ev.prompts))))
        batch = sample(
            model,
            [ev.prompts[i] for i in index],
            vocab_size=ev.vocab_size,
            max_new_tokens=t_max,
            eos_id=ev.eos_id,
        )
        completions = [batch.completion(k) for k in range(len(index))]
        ended = batch.ended.tolist()
        r, ok = ev.rewards(index, completions, ended)
        correct.append(ev.correct(index, completions, ended, r))
        rewards.append(r[ok])
    c = np.concatenate(correct)
    acc = float(np.nanmean(c)) if np.isfinite(c).any() else 0.0
    r_all = np.concatenate(rewards)
    return acc, float(r_all.mean()) if r_all.size else float("nan")


def finetune(
    config: FinetuneConfig,
    *,
    resume: str | Path | None = None,
    callback: Callable[[dict[str, Any]], bool | None] | None = None,
    reward_funcs: Sequence[Any] | None = None,
    train_dataset: Any = None,
    eval_dataset: Any = None,
) -> FinetuneResult:
    """Fine-tune ``config.model`` on ``config.task`` until the greedy accuracy reaches the target.

    Args:
        config: the run's settings.
        resume: a run directory to continue from its last checkpoint (its saved config is
            used; only the budget, target, cadences and progress are taken from ``config``).
        callback: ``callback(row)`` after each update; returning ``False`` stops the run cleanly,
            with a checkpoint.
        reward_funcs: reward callables in TRL's convention (they replace ``config.task``'s).
        train_dataset: the prompts in memory (a ``datasets.Dataset`` or a list of records),
            in place of ``config.prompts``.
        eval_dataset: held-out prompts in memory, in place of ``config.eval_prompts``.

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
        given.pop("data_sha256")  # the run's own, checked against the files below
        config = resumed(load_config(resume, FinetuneConfig), given, IDENTITY)

    # -- task, policy, frozen reference, optimiser (all checked before a file is written) -------
    config, user = _user_data(config, resume, reward_funcs, train_dataset, eval_dataset)
    task, model, t_max = task_and_model(config, **user)
    try:
        return _run(config, task, model, t_max, resume, callback, t_start)
    finally:
        task.close()


def _user_data(
    config: FinetuneConfig,
    resume: str | Path | None,
    reward_funcs: Sequence[Any] | None,
    train_dataset: Any,
    eval_dataset: Any,
) -> tuple[FinetuneConfig, dict[str, Any]]:
    """The config with its data's SHA-256, and the in-memory rewards and records.

    On a resume the SHA-256 are checked against the saved ones instead of replacing them.

    Raises:
        ValueError: a resume whose data file changed since the run began, naming it.
    """
    user: dict[str, Any] = {}
    if reward_funcs is not None:
        user["reward_funcs"] = list(reward_funcs)
    if train_dataset is not None:
        records = ([dict(r) for r in train_dataset], None)
        if eval_dataset is not None:
            records = (records[0], [dict(r) for r in eval_dataset])
        user["records"] = records
        blob = json.dumps(records, sort_keys=True, default=str).encode()
        sums = {"train_dataset": hashlib.sha256(blob).hexdigest()}
    else:
        sums = fingerprints(config)
    if resume is None:
        return dataclasses.replace(config, data_sha256=sums), user
    for path, digest in sums.items():
        if config.data_sha256 and config.data_sha256.get(path) != digest:
            raise ValueError(
                f"{path} changed since the run began (its SHA-256 is not the one saved with "
                "the run): resume on the same data, or start a new run with another --out"
            )
    return config, user


def _run(
    config: FinetuneConfig,
    task: Task,
    model: torch.nn.Module,
    t_max: int,
    resume: str | Path | None,
    callback: Callable[[dict[str, Any]], bool | None] | None,
    t_start: float,
) -> FinetuneResult:
    """The training loop of :func:`finetune` on a built task and model."""
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
                    eos_id=task.eos_id,
                )
                completions = [batch.completion(i) for i in range(len(group_prompts))]
                r, ok = task.rewards(group_prompts.tolist(), completions, batch.ended.tolist())
                rewards = torch.tensor(fill_unscorable(r, ok, g), dtype=torch.float32)

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
                    scale=None if config.scale == "none" else config.scale,
                    aggregation=config.aggregation,
                    max_completion_length=t_max,
                    kl=None if config.kl == "none" else config.kl,
                    beta=config.beta,
                    ref_logps=ref_logps,
                    scorable=torch.from_numpy(ok),
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

                # -- counters, metrics, evaluation, checkpoint ---------------------------------
                lengths = batch.lengths.float()
                correct = rewards == 1.0
                counters["updates"] += 1
                counters["env_steps"] += int(lengths.sum())
                counters["episodes"] += len(group_prompts)
                recent = (recent + rewards.tolist())[-256:]
                eval_acc = eval_reward = None
                if config.eval_every and counters["updates"] % config.eval_every == 0:
                    t0 = time.perf_counter()
                    eval_acc, eval_reward = _greedy_eval(model, task, t_max, len(group_prompts))
                    final_eval = eval_acc
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
                    "eval_reward": eval_reward,
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
        if hasattr(model, "save_pretrained"):  # the policy as the Hugging Face directory it came
            hf.save_pretrained(model, task.tokenizer, run.path / "model", overwrite=True)
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


def complete(result: FinetuneResult, config: FinetuneConfig) -> bool:
    """Whether a run ended on its own (solved, or its updates spent): the sweep's test."""
    return bool(result.solved) or result.updates >= config.max_updates
