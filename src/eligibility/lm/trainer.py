r"""Fine-tune a causal LM with REINFORCE on a verifiable task: sample G, score, step, repeat.

    θ ← θ + α ĝ,   ĝ = −∇ loss,   loss = aggregate_{i,t}( −Aᵢ ℓᵢ,ₜ + β kᵢ,ₜ )

with G completions oᵢ of each of the batch's prompts drawn from π_θ at temperature τ (KV
cache), Rᵢ the task's exact reward, Aᵢ its group advantage and ℓᵢ,ₜ = ln π_θ(oᵢ,ₜ | q, oᵢ,<ₜ)
recomputed with gradients. Each batch (one update) gets K = ``epochs_per_batch`` optimiser
steps (TRL's ``num_iterations``): the first on-policy, no ratio, with ``eligibility.torch``'s
:func:`~eligibility.torch.sequence_reinforce_loss`, the K − 1 after it off-policy with
:func:`~eligibility.torch.off_policy_loss`; the defaults are the unbiased set (K = 1, RLOO, no
std, a sum over each sequence's tokens).

One readable function, :func:`finetune`; the run directory, checkpoints, resume rule, progress
and signals are the run layer's (:mod:`eligibility.runs`, as ``train``'s are); the metrics speak
of rewards, accuracies, completions and tokens (:mod:`eligibility.lm.metrics`); the plumbing
around the loop is a small private class beside it, ``_Run``: the run layer's
:class:`~eligibility.runs.Bookkeeping` (written once for ``train`` and ``finetune``) with the
task and the model added.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from eligibility.lm import micro, objective
from eligibility.lm.build import task_and_policy
from eligibility.lm.config import IDENTITY, INFINITE, FinetuneConfig
from eligibility.lm.episodes import rollout as episodes
from eligibility.lm.learner import Learner
from eligibility.lm.metrics import OFF_POLICY_COLUMNS, SCHEMA, FinetuneResult, frac_zero_std
from eligibility.lm.mismatch import mismatch
from eligibility.lm.objective import moving, reuse_loss
from eligibility.lm.phases import Phases
from eligibility.lm.policy import Policy, lora_fields
from eligibility.lm.rewards import fill_unscorable
from eligibility.lm.sample import Completions, sample, token_logps
from eligibility.lm.tasks import Task
from eligibility.lm.truncation import Sampling
from eligibility.lm.usertask import user_data
from eligibility.lm.watches import Watches
from eligibility.runs import (
    Bookkeeping,
    Interrupted,
    RunDir,
    Schema,
    load_config,
    resumed,
    stop_on_signals,
)


def _settings(run: _Run, batch: Completions, scorable: np.ndarray) -> dict[str, Any]:
    """The loss's arguments for every step on ``batch``: its rows, T_max, the reference ℓ."""
    config = run.config
    ref_logps = None
    if run.ref is not None:
        with torch.no_grad(), run.phase("score"):
            ranks = run.learner.policy.ranks
            ref_logps = micro.scores(_scorer(run, run.ref), batch, config.micro_batch_size, ranks)
    return dict(
        group_size=config.group_size,
        baseline=config.baseline,
        scale=config.scale,
        aggregation=config.aggregation,
        max_completion_length=run.t_max,
        kl=config.kl_term,
        beta=config.beta,
        ref_logps=ref_logps,
        scorable=torch.from_numpy(scorable).to(batch.completion_mask.device),
        importance_sampling=config.importance_sampling,
        importance_sampling_cap=config.importance_sampling_cap,
        sampler_logps=batch.logps,  # ln q, as the sampler drew each token (lm.importance)
    )


def _update(
    run: _Run, batch: Completions, rewards: torch.Tensor, settings: dict[str, Any]
) -> tuple[dict[str, Any], torch.Tensor]:
    """The first optimiser step on a batch: the REINFORCE loss on recomputed log-probs.

    The scoring and backward pass go ``--micro-batch-size`` sequences at a time, the gradient
    accumulated (``lm.micro``: the same gradient as one pass).

    Returns:
        The update's numbers (``loss``, ``entropy``, ``kl`` (None without a KL),
        ``grad_norm``; the off-policy columns None), and the log-probs θ_old gave the batch.

    Raises:
        ValueError: the loss or the gradient is NaN/inf (nothing applied).
    """
    config, learner = run.config, run.learner
    mask = batch.completion_mask.bool()
    where = f"at update {run.counters['updates'] + 1}"
    ref_logps = settings["ref_logps"]
    raw: list[torch.Tensor] = []  # with truncation, ln π_τ before it (the mismatch's)
    scored = None  # the scoring pass's ln π_τ (None: skipped)
    # the rows whose gradient can be nonzero (Aᵢ ≠ 0 without a KL: lm.objective.moving); the
    # others are not scored, their log-probs the sampler's (a truncating scorer scores all)
    live = moving(rewards, **settings) if config.epochs_per_batch == 1 else None
    loss_of, live = episodes.loss_for(batch, objective.loss, live)  # episodes: per turn
    if live is not None and _trained_as_sampled(config) is not None and bool(live.any()):
        live = None  # its kept sets and ln π_τ before them are read for every row
    if live is not None and not bool(live.any()):
        # ∇ loss = 0 exactly: Adam steps on zeros (its moments decay, its momentum carries on)
        # without the scoring pass; the sampler's log-probs are the policy's (lm.sample)
        for p in learner.params:
            p.grad = torch.zeros_like(p)
        logps, value = _finite(batch.logps, mask, config, where), torch.zeros(())
    else:
        logps, value = _backward(
            run, batch, lambda ell: loss_of(ell, rewards, mask, **settings)[0], where, raw,
            live,
        )  # fmt: skip
        scored = logps if not raw else torch.cat(raw[0::2])[-len(logps) :]  # the last pass's
    with run.phase("step"):
        grad_norm = _step(learner, value, config, where)
    n_tokens = mask.sum().clamp(min=1)
    kl = None if ref_logps is None else float(((logps - ref_logps) * mask).sum() / n_tokens)
    entropy = float(-(logps * mask).sum() / n_tokens)
    stats = dict(loss=float(value), entropy=entropy, kl=kl, grad_norm=grad_norm)
    sampled = batch.logps if batch.raw_logps is None else batch.raw_logps
    off = None if not raw else torch.cat(raw[1::2])[-len(logps) :]
    if live is not None and scored is not None:  # over the rows scored
        scored, sampled, mask = scored[live], sampled[live], mask[live]
    diverge = mismatch(scored, sampled, mask, off)
    return stats | dict.fromkeys(OFF_POLICY_COLUMNS) | diverge, logps


def _scorer(
    run: _Run, policy: Policy, raw: list[torch.Tensor] | None = None
) -> Callable[[Completions], torch.Tensor]:
    """The log-probs of a batch's (or a chunk's) completion tokens under ``policy``.

    The policy trained is the one sampled, truncated as the sampler truncated (``lm.truncation``;
    ``raw`` gets each call's ln π_τ before it), or with ``--importance-sampling`` the full π_τ
    (``lm.importance``); the reference of a KL is the full π_τ.
    """
    v, tau = run.task.vocab_size, run.config.temperature
    s = _trained_as_sampled(run.config) if policy is run.learner.policy else None
    return lambda rows: token_logps(
        policy, rows, vocab_size=v, temperature=tau, sampling=s, raw=raw
    )


def _trained_as_sampled(config: FinetuneConfig) -> Sampling | None:
    """The truncation the trained policy is scored under (None: the full π_τ).

    The sampler's, unless an importance-sampling mode trains the full π_τ.
    """
    return Sampling.of(config) if config.importance_sampling == "none" else None


def _backward(
    run: _Run,
    batch: Completions,
    loss_of: Callable[[torch.Tensor], torch.Tensor],
    where: str,
    raw: list[torch.Tensor] | None = None,
    live: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero the gradient, backpropagate ``loss_of`` of the policy's log-probs (``lm.micro``).

    ``live``: [N] bool, the rows whose gradient can be nonzero, the only ones scored (None: all).
    """
    config, policy = run.config, run.learner.policy
    score = _scorer(run, policy, raw)

    def checked(rows: Completions) -> torch.Tensor:  # LoRA's dropout in this pass only
        with policy.training():
            return _finite(score(rows), rows.completion_mask.bool(), config, where)

    run.learner.optimizer.zero_grad(set_to_none=True)
    size, kl = config.micro_batch_size, config.kl_term
    with run.phase("score"):
        out = micro.backward(
            checked, loss_of, batch, size=size, kl=kl, values_of=score, ranks=policy.ranks,
            live=live,
        )  # fmt: skip
    with run.phase("all_reduce"):
        policy.sum_gradients()  # Σ over the ranks' shares: the gradient
    return out


def _finite(
    logps: torch.Tensor, mask: torch.Tensor, config: FinetuneConfig, where: str
) -> torch.Tensor:
    """``logps`` when finite on every completion token; else the step size is named."""
    if not bool(torch.isfinite(logps[mask]).all()):
        raise ValueError(
            f"the policy's log-probs became non-finite {where}: --lr {config.lr} is likely too "
            "large (or set --max-grad-norm, or --clip with --epochs-per-batch)"
        )
    return logps


def _step(learner: Learner, value: torch.Tensor, config: FinetuneConfig, where: str) -> float:
    """One Adam step on the gradient in ``.grad``, clipped to ``--max-grad-norm``.

    Returns the gradient's norm before clipping. A ValueError, saying ``where``, when the loss
    ``value`` or the gradient is NaN/inf (nothing applied).
    """
    clip = math.inf if config.max_grad_norm is None else config.max_grad_norm
    grad_norm = learner.policy.clip_gradients(clip)
    if not (math.isfinite(float(value.detach())) and math.isfinite(grad_norm)):
        raise ValueError(
            f"the loss or gradient became non-finite {where}: --lr {config.lr} is likely too "
            "large (or set --max-grad-norm, or --clip with --epochs-per-batch)"
        )
    learner.optimizer.step()
    learner.steps += 1
    return grad_norm


def _reuse(
    run: _Run,
    batch: Completions,
    rewards: torch.Tensor,
    settings: dict[str, Any],
    old_logps: torch.Tensor,
    k: int,
) -> dict[str, float]:
    """Optimiser step ``k`` ≥ 2 on one batch (off-policy: θ has moved since it was drawn).

    Returns:
        TRL's ratio diagnostics of the step (``lm.metrics.OFF_POLICY_COLUMNS``).
    """
    config = run.config
    mask, where = batch.completion_mask.bool(), f"on step {k} of a batch"
    off = dict(settings, ratio=config.ratio, clip=config.clip)
    logps, value = _backward(
        run, batch, lambda ell: reuse_loss(ell, old_logps, rewards, mask, **off)[0], where
    )
    with run.phase("step"):
        _step(run.learner, value, config, where)
    diag = reuse_loss(logps, old_logps, rewards, mask, **off)[1]
    return diag


@episodes.played  # on a task of several turns, its episodes (lm.episodes)
def _draw(
    run: _Run, prompt_rng: np.random.Generator, sample_rng: np.random.Generator
) -> tuple[np.ndarray, Completions, torch.Tensor, np.ndarray]:
    """The batch of an update: M prompts drawn, G completions of each sampled, and scored.

    Returns:
        Each row's prompt index, the completions, their rewards (an unscorable one filled as
        ``fill_unscorable`` says) and which were scorable.
    """
    config, task, g = run.config, run.task, run.config.group_size
    n_prompts, per_batch = len(task.prompts), config.prompts_per_batch
    chosen = prompt_rng.choice(n_prompts, per_batch, replace=per_batch > n_prompts)
    prompts = np.repeat(chosen, g)
    # -- each rank samples and scores its share of the rows, the draws the whole batch's --
    ranks, n = run.learner.policy.ranks, len(prompts)
    mine, width = ranks.share(n), max(len(task.prompts[i]) for i in prompts)
    with run.phase("sample"):
        batch = sample(
            run.learner.policy,
            [task.prompts[i] for i in prompts[mine]],
            vocab_size=task.vocab_size,
            max_new_tokens=run.t_max,
            temperature=config.temperature,
            rng=sample_rng,
            eos_id=task.eos_id,
            share=(mine, n, width),
            sampling=Sampling.of(config),
        )
        steps = batch.completion_ids.shape[1]  # each step drew n uniforms, as one process would:
        sample_rng.random((ranks.largest(steps) - steps) * n)  # the longest share's steps in all
    with run.phase("reward"):
        scored = task.rewards(prompts[mine].tolist(), batch.completions(), batch.ended.tolist())
        r, scorable = (np.concatenate(p) for p in zip(*ranks.objects(scored), strict=True))
    with run.phase("sample"):
        batch = micro.gathered(batch, ranks, n, task.eos_id)  # the batch's rows, on every rank
    rewards = torch.tensor(fill_unscorable(r, scorable, g), dtype=torch.float32)
    return prompts, batch, rewards.to(batch.completion_ids.device), scorable


@dataclass(kw_only=True)
class _Run(Bookkeeping):
    """One call of :func:`finetune`: the run layer's bookkeeping, with the task and the model.

    The plumbing around the loop lives here and in :class:`~eligibility.runs.Bookkeeping`
    (counters, history, resume, progress, logging, checkpoints), so that :func:`finetune` shows
    the algorithm; this class adds what is ``finetune``'s own: the task, the learner and the
    reference policy, the greedy evaluation, the watches (``lm.watches``: drift, silence), the
    checkpoint a failing reward leaves, the exported model and the :class:`FinetuneResult`.
    """

    SCHEMA: ClassVar[Schema] = SCHEMA

    task: Task
    learner: Learner
    ref: Policy | None  # the frozen initial policy of the KL (None: no KL)
    t_max: int
    last_eval: float | None = None  # the last greedy accuracy (the progress line's)
    watches: Watches = field(default_factory=Watches)  # the drift's and the silence's
    last_steps: int = 0  # the optimiser steps after the last completed update
    writes: bool = False  # the run has a directory (rank 0's, whichever rank this is)
    phase: Phases = field(default_factory=Phases)  # where each update's time goes (lm.phases)

    @classmethod
    def open(
        cls,
        stack: contextlib.ExitStack,
        config: FinetuneConfig,
        resume: Any,
        t_start: float,
        user: dict[str, Any],
    ) -> _Run:
        """Build the task and models (checked before a file is written), open the run, restore.

        ``user``: the in-memory rewards and records (see ``usertask.make_task``).
        """
        config, task, policy, t_max = task_and_policy(config, **user)  # measured: the run's
        stack.callback(task.close)  # the reward workers stop with the run
        stack.callback(policy.ranks.close)
        several, writes, home = policy.ranks.world > 1, config.out is not None, config.out
        if not policy.ranks.main:  # rank 0 writes the run directory, the logs, the progress
            config = dataclasses.replace(config, out=None, progress=False)
        stack.enter_context(policy.precision())  # every pass of the run in --dtype
        ref = policy.reference() if config.kl_term != "none" else None
        rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(config.seed).spawn(2)]
        files = None
        if config.out:
            open_dir = RunDir.open(config, SCHEMA, IDENTITY, resume=resume is not None)
            files = stack.enter_context(open_dir)
        # no forced exit: the loop's user code runs in workers bounded by --reward-timeout, and
        # an update and its checkpoint (minutes at real sizes) finish before the run stops
        install = files is not None or several  # every rank finishes the update in flight
        stop = stack.enter_context(stop_on_signals(grace=None, install=install))
        learner = Learner(policy, config.lr, home)  # sharded: every rank writes its shards
        wait = torch.cuda.synchronize if policy.device.type == "cuda" else None  # its seconds
        run = cls(
            config=config,
            target=config.target_accuracy,
            t_start=t_start,
            stack=stack,
            stop=stop,
            files=files,
            rngs=rngs,  # the prompts' draws, the samples'
            counters=dict.fromkeys(("updates", "tokens", "completions"), 0),
            task=task,
            learner=learner,
            ref=ref,
            t_max=t_max,
            writes=writes,
            phase=Phases(wait),
        )
        if resume is not None and (files is not None or several):
            expected = learner.expected() if files else None  # the checkpoint's names, shapes
            tensors = run.restore(expected, framework="pt") if files else None
            tensors = run.shared(tensors)  # rank 0's checkpoint, on every rank
            if tensors is not None:
                learner.load_state_dict(tensors)
            run.watches.replay(config, run.history)  # as the interrupted run left them
        run.mark_completed()
        return run

    def shared(self, tensors: Any) -> Any:
        """Rank 0's restored checkpoint (tensors, counters, RNGs, history) on every rank."""
        ranks = self.learner.policy.ranks
        if ranks.world == 1:
            return tensors
        if tensors is not None:  # read lazily from the file: the values, to send
            tensors = {k: tensors[k].clone() for k in list(tensors.keys())}
        rngs = [r.bit_generator.state for r in self.rngs]
        state = ranks.broadcast((tensors, dict(self.counters), rngs, self.history))
        tensors, counters, rngs, self.history = state
        self.counters.update(counters)
        for r, saved in zip(self.rngs, rngs, strict=True):
            r.bit_generator.state = saved
        self.checkpointed = self.counters["updates"]
        return tensors

    def agreed_stop(self) -> bool:
        """Whether any rank was asked to stop (SIGINT/SIGTERM): every rank stops together."""
        return bool(self.learner.policy.ranks.largest(int(bool(self.stop))))

    def state(self) -> dict[str, Any]:
        """The checkpoint's tensors: the policy's weights and the optimiser's state."""
        return self.learner.state_dict()

    def evaluate(self) -> tuple[float, float]:
        """The greedy accuracy and mean reward on the evaluation prompts (time kept apart)."""
        chunk = self.config.prompts_per_batch * self.config.group_size
        with self.evaluating(), self.phase("eval"):  # episodes played, on a task of turns
            return episodes.greedy_eval(self.learner.policy, self.task, self.t_max, chunk)

    def record(
        self,
        batch: Completions,
        rewards: torch.Tensor,
        stats: dict[str, Any],
        eval_accuracy: float | None,
        eval_reward: float | None,
        checkpoint: bool,
    ) -> dict[str, Any]:
        """Log the update just made (metrics.csv, TensorBoard, progress), checkpoint if asked.

        Returns:
            The update's metrics row.
        """
        c, lengths, correct = self.counters, batch.lengths.float(), rewards == 1.0
        wall_s, tokens_per_s = self.clock()
        row = {
            "update": c["updates"],
            "tokens": c["tokens"],
            "completions": c["completions"],
            "mean_reward": float(rewards.mean()),
            "min_reward": float(rewards.min()),
            "max_reward": float(rewards.max()),
            "accuracy": float(correct.float().mean()),
            "frac_reward_zero_std": frac_zero_std(rewards, self.config.group_size),
            "eval_accuracy": eval_accuracy,
            "eval_reward": eval_reward,
            "mean_length": float(lengths.mean()),
            "incorrect_length": float(lengths[~correct].mean()) if (~correct).any() else None,
            **stats,  # loss, entropy, kl, grad_norm
            **episodes.columns(batch),  # turns, tool calls, failures (lm.episodes)
            **self.phase.row(),
            "wall_s": wall_s,
            "tokens_per_s": tokens_per_s,
        }
        self.mark_completed()
        if eval_accuracy is not None:
            self.last_eval = eval_accuracy
        shown = {**row, "last_eval_accuracy": self.last_eval}
        with self.phase("write"):  # shows in the next row
            self.log(row, row["mean_reward"], checkpoint, shown=shown)
        if checkpoint:
            self.after_checkpoint()
        return row

    def after_checkpoint(self) -> None:
        """A sharded run's other ranks: their part of the checkpoint rank 0 writes (shards).

        Rank 0 of an unsharded run: the shard directories a sharded run left, dropped once its
        own checkpoint, which names none, is written.
        """
        if self.files is not None:
            self.learner.drop_shards()
        elif self.writes and self.learner.policy.sharded:
            self.learner.state_dict()
            self.checkpointed = self.counters["updates"]  # as rank 0's: they decide alike

    def mark_completed(self) -> None:
        """Remember the state after this update: what a failure later checkpoints."""
        super().mark_completed()
        self.last_steps = self.learner.steps

    @contextlib.contextmanager
    def checkpoint_on_error(self) -> Iterator[None]:
        """A reward or model error mid-run leaves the last completed update checkpointed.

        The error came after that update's counters and RNGs were saved aside and before the
        next update changed a weight (else the weights are not that update's: nothing is
        written, the checkpoint on disk stays the last good one). Sharded, every rank writes
        its shards; where a rank was lost, the checkpoint on disk stays the last good one.
        """
        try:
            yield
        except Exception:  # a wreck's stop (Diverged) too: its update was logged, then judged
            done = self.last
            if done is None or self.last_steps != self.learner.steps:
                raise
            counters, rngs = done
            if counters["updates"] <= self.checkpointed:
                raise
            try:
                if self.files is not None:
                    self.files.checkpoint(self.state(), counters, rngs)
                else:
                    self.after_checkpoint()  # sharded: every rank writes its shards
            except Exception:
                if not self.learner.policy.sharded:
                    raise
                # a lost rank took its shards: the last checkpoint on disk stays, whole
            raise

    def finish(self, solved: bool, final_eval: float | None) -> FinetuneResult:
        """Checkpoint the last update, draw the curve, close; :class:`Interrupted` for a stop."""
        signum, policy, h = self.stop.signum, self.learner.policy, self.history
        writes = self.files is not None or (policy.sharded and self.writes)
        if writes:  # rank 0, and under sharding the others for their part of the gathering
            if h and h[-1]["update"] % self.config.checkpoint_every != 0 and not solved:
                self.checkpoint()
                self.after_checkpoint()
            if policy.exportable:  # the policy as the kind of directory it came
                path = self.files.path if self.files is not None else Path()
                policy.save(path / "model", self.task.tokenizer)
        self.close()
        if signum is not None and self.files is not None:
            raise Interrupted(signum, self.out_dir)
        return self.result(solved, final_eval)

    def result(
        self, solved: bool, final_eval: float | None, already_solved: bool = False
    ) -> FinetuneResult:
        """The run's :class:`FinetuneResult` (the one place it is built)."""
        return FinetuneResult(
            **self.outcome(solved, final_eval, already_solved),
            samples=self.counters["completions"],
            model=self.learner.model,
            task=self.task,
        )


def finetune(
    config: FinetuneConfig,
    *,
    resume: str | Path | None = None,
    callback: Callable[[dict[str, Any]], bool | None] | None = None,
    reward_funcs: Sequence[Any] | None = None,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    peft_config: Any = None,
    **trl: Any,
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
        peft_config: a ``peft.LoraConfig``, as TRL's ``GRPOTrainer`` takes it: its r, α,
            dropout and target modules become the config's ``lora_*`` fields.
        **trl: TRL's ``tools=`` and ``environment_factory=`` (for ``--tools``, ``--env``).

    Raises:
        ValueError: a bad task, model, prompt file or reward (before anything is written), or
            a reward that fails later (the last checkpoint stays whole).
        Interrupted: SIGINT/SIGTERM, after checkpointing the last completed update.
    """
    t_start = time.perf_counter()
    if peft_config is not None:
        config = config.with_changes(**lora_fields(peft_config))
    if resume is not None:  # the saved run is the identity; only the settings given apply
        config = resumed(load_config(resume, FinetuneConfig), config.given(), IDENTITY, INFINITE)
    config, user = user_data(config, resume, reward_funcs, train_dataset, eval_dataset)
    user |= episodes.given(**trl)  # TRL's tools= and environment_factory=, from Python
    target = config.target_accuracy
    with contextlib.ExitStack() as stack:  # the run directory, the stop flag, the progress
        run = _Run.open(stack, config, resume, t_start, user)
        config = run.config  # with the column measured at load (lm.build)
        counters, (prompt_rng, sample_rng) = run.counters, run.rngs
        if (last_eval := run.already_solved()) is not None:  # raise the target to go on
            return run.result(True, last_eval, already_solved=True)
        run.start(f"finetune {config.task}", None)
        final_eval, solved, stopped = None, False, False
        with run.checkpoint_on_error():
            while counters["updates"] < config.max_updates and not (solved or stopped):
                # -- sample G completions of each prompt of the batch, score them ------------------
                prompts, batch, rewards, scorable = _draw(run, prompt_rng, sample_rng)

                # -- K optimiser steps on the batch (--epochs-per-batch): the first on-policy, -
                # -- the K − 1 after it off-policy, weighted by the ratio π_θ/π_old (--ratio) -
                settings = _settings(run, batch, scorable)
                stats, old_logps = _update(run, batch, rewards, settings)
                for k in range(2, config.epochs_per_batch + 1):
                    stats |= _reuse(run, batch, rewards, settings, old_logps, k)
                counters["updates"] += 1
                counters["tokens"] += int(batch.lengths.sum())
                counters["completions"] += len(prompts)

                # -- the greedy accuracy every eval_every updates ----------------------------------
                eval_accuracy = eval_reward = None
                if config.eval_every and counters["updates"] % config.eval_every == 0:
                    eval_accuracy, eval_reward = run.evaluate()
                    final_eval, solved = (
                        eval_accuracy,
                        target is not None and eval_accuracy >= target,
                    )

                # -- log, checkpoint, report -------------------------------------------------------
                due = counters["updates"] % config.checkpoint_every == 0 or solved
                row = run.record(batch, rewards, stats, eval_accuracy, eval_reward, due)
                run.watches.check_signal(config, row, counters["updates"])
                run.watches.check_mismatch(config, row, counters["updates"])
                run.watches.check_wreck(config, row, counters["updates"])  # a stop checkpoints
                stopped = callback is not None and callback(dict(row)) is False
                stopped = run.agreed_stop() or stopped
        return run.finish(solved, final_eval)
