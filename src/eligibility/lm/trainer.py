r"""Fine-tune a causal LM with REINFORCE on a verifiable task: sample G, score, step, repeat.

    θ ← θ + α ĝ,   ĝ = −∇ loss,   loss = aggregate_{i,t}( −Aᵢ ℓᵢ,ₜ + β kᵢ,ₜ )

with G completions oᵢ of each of the batch's prompts drawn from π_θ at temperature τ (KV
cache), Rᵢ the task's exact reward, Aᵢ its group advantage and ℓᵢ,ₜ = ln π_θ(oᵢ,ₜ | q, oᵢ,<ₜ)
recomputed with gradients. Each batch (one update) gets K = ``epochs_per_batch`` optimiser
steps (TRL's ``num_iterations``): the first on-policy, no ratio, with ``eligibility.torch``'s
:func:`~eligibility.torch.sequence_reinforce_loss`, the K − 1 after it off-policy with
:func:`~eligibility.torch.off_policy_loss`; the defaults are the unbiased set (K = 1, RLOO, no
std, a sum over each sequence's tokens).

One readable function, :func:`finetune`; an update's batch is the task's rollout's
(:mod:`eligibility.lm.rollout`: single completions, or episodes on a task of turns, chosen
once), drawn in turn or, with ``--max-staleness k``, by a sampler process while the learner
steps (:mod:`eligibility.lm.feed`: the loop reads the same), its optimiser steps
:mod:`eligibility.lm.update`'s (each rank's rows: :mod:`eligibility.lm.rows`); the run
directory, checkpoints, resume rule, progress and signals are the run layer's
(:mod:`eligibility.runs`, as ``train``'s are); the metrics speak of rewards, accuracies,
completions and tokens (:mod:`eligibility.lm.metrics`); the plumbing
around the loop is a small private class beside it, ``_Run``: the run layer's
:class:`~eligibility.runs.Bookkeeping` (written once for ``train`` and ``finetune``) with the
task and the model added.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from eligibility._output import note
from eligibility.lm.batch import Completions
from eligibility.lm.build import rollout_for, task_and_policy
from eligibility.lm.channel import SyncLost
from eligibility.lm.checkpointer import Checkpointer
from eligibility.lm.config import IDENTITY, FinetuneConfig
from eligibility.lm.evaluation import Evaluation
from eligibility.lm.evaluator import Evaluator
from eligibility.lm.feed import Alternating, Overlapped
from eligibility.lm.learner import Diverged, Learner
from eligibility.lm.metrics import SCHEMA, FinetuneResult, batch_columns, metrics_row, schema_of
from eligibility.lm.phases import Phases
from eligibility.lm.policy import Policy
from eligibility.lm.rollout import Rollout
from eligibility.lm.rows import Rows
from eligibility.lm.sound import SoundWeights, looks
from eligibility.lm.tasks import Task
from eligibility.lm.update import reuse, settings, update
from eligibility.lm.usertask import keep_records
from eligibility.lm.watches import GUARD_SINCE, Watches
from eligibility.runs import (
    Bookkeeping,
    Interrupted,
    RunDir,
    Schema,
    Stop,
    TrainState,
    stop_on_signals,
)


@dataclass(kw_only=True)
class _Run(Bookkeeping):
    """One call of :func:`finetune`: the run layer's bookkeeping, with the task and the model.

    The plumbing around the loop lives here and in :class:`~eligibility.runs.Bookkeeping`
    (counters, history, resume, progress, logging, checkpoints), so that :func:`finetune` shows
    the algorithm; this class adds what is ``finetune``'s own: the task, the learner and the
    reference policy, the greedy evaluation, the watches (``lm.watches``: drift, silence), and
    the :class:`FinetuneResult`; the state's forms on disk, the resume, the checkpoint a
    failure leaves and the exported model are the :class:`~eligibility.lm.checkpointer.
    Checkpointer`'s, which it asks.
    """

    SCHEMA: ClassVar[Schema] = SCHEMA

    task: Task
    rollout: Rollout[Any]  # what the task's kind draws, its loss, columns and evaluation
    learner: Learner
    checkpointer: Checkpointer
    feed: Alternating | Overlapped  # where each update's batch comes from (lm.feed)
    rows: Rows  # this rank's rows of each batch, and their gathering (lm.rows)
    ref: Policy | None  # the frozen initial policy of the KL (None: no KL)
    t_max: int
    evaluator: Evaluator  # when to evaluate, the target, the transcripts (lm.evaluator)
    watches: Watches = field(default_factory=Watches)  # the drift's and the silence's
    last_steps: int = 0  # the optimiser steps after the last completed update
    phase: Phases = field(default_factory=Phases)  # where each update's time goes (lm.phases)
    sound: SoundWeights | None = None  # the last weights the guard judged sound (lm.sound)

    @classmethod
    def open(
        cls,
        stack: contextlib.ExitStack,
        config: FinetuneConfig,
        resume: str | Path | None,
        t_start: float,
        peft_config: Any,
        trl: dict[str, Any],
    ) -> _Run:
        """Build the task and models (checked before a file is written), open the run, restore.

        ``peft_config`` and ``trl``: :func:`finetune`'s (``usertask.task_for_run`` takes TRL's).
        """
        config, task, policy, t_max = task_and_policy(  # the config resolved, once
            config, resume=resume, peft_config=peft_config, **trl
        )
        stack.callback(task.close)  # the reward workers stop with the run
        stack.enter_context(policy)  # DDP let go of, the process group left, at the end
        learner = Learner(policy, config.lr)
        checkpointer = Checkpointer(learner, config.out)  # every rank knows the run's directory
        config = policy.ranks.for_rank(config)  # rank 0 writes the run directory, logs, progress
        stack.enter_context(policy.precision())  # every pass of the run in --dtype
        ref = policy.reference() if config.kl_term != "none" else None
        rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(config.seed).spawn(2)]
        resumed = resume is not None
        files, stop = _files_and_stop(stack, config, task.reward_names, policy, resumed)
        if files is not None and not resumed:  # rows given in memory: evaluate reads them
            keep_records(files.path, task)
        rollout = rollout_for(task)  # single completions, or episodes on a task of turns
        run = cls(
            config=config,
            target=config.target_accuracy,
            t_start=t_start,
            stack=stack,
            stop=stop,
            files=files,
            train_state=TrainState(  # the prompts' draws, the samples'
                counters=dict.fromkeys(("updates", "tokens", "completions"), 0), rngs=rngs
            ),
            task=task,
            rollout=rollout,
            learner=learner,
            checkpointer=checkpointer,
            feed=Alternating(rollout),
            rows=Rows(policy.ranks, lockstep=policy.sharded),
            ref=ref,
            t_max=t_max,
            phase=Phases(policy.synchronize),  # each phase's own seconds
            watches=Watches(t_max=t_max, home=checkpointer.home),  # rambling against T_max
            evaluator=Evaluator(config.eval_every, config.target_accuracy),
        )
        if resumed:  # rank 0's checkpoint, on every rank
            run.checkpointer.resume(run.train_state, run.files)
            # as the interrupted run left them; judged anew after a stop at its end
            run.watches.replay(config, run.history, run.counters.get(GUARD_SINCE, 0))
        if config.max_staleness is not None:  # a sampler process beside the learner
            home = None if files is None else files.path
            user = {**trl, "peft_config": peft_config}
            run.feed = Overlapped.start(config, policy, user, rngs, run.counters, home)
            stack.callback(run.feed.close)
        run.mark_completed()
        keeps = checkpointer.home is not None and config.max_kl < math.inf  # the guard on
        run.sound = SoundWeights(policy, run.counters["updates"], keeps)
        return run

    def agreed_stop(self) -> bool:
        """Whether any rank was asked to stop (SIGINT/SIGTERM): every rank stops together."""
        return bool(self.learner.policy.ranks.largest(int(bool(self.stop))))

    def save(self, snapshot: dict[str, Any]) -> bool:
        """A checkpoint, as the checkpointer writes it (every rank takes part).

        The feed's batches in flight beside it, and the streams as they stand after them.
        """
        home = None if self.files is None else self.files.path
        written = self.checkpointer.save(self.files, self.feed.save(home, snapshot))
        if written:
            self.feed.saved(home, snapshot["counters"]["updates"])
        return written

    def judge(self, row: dict[str, Any]) -> None:
        """The watches on the update's row (a wreck's stop checkpoints); the sound weights kept."""
        self.watches.check(self.config, row, self.counters["updates"])
        if self.sound is not None:
            self.sound.step(self.watches.alarm, self.counters["updates"])

    def judge_the_end(self) -> None:
        """The guard on the weights the run ends with (``lm.sound``): a wreck there is a stop.

        Nothing with the guard off (``--max-kl inf``) or where this call made no update; a look
        that a signal cuts short (a task's worker answers a stop at once) judges nothing.
        """
        n = self.counters["updates"]
        if self.config.max_kl == math.inf or self.sound is None or n == self.sound.start:
            return
        try:
            drawn = looks(self)
        except Interrupted:
            return
        try:
            self.watches.check_end(self.config, drawn, n)
        except Diverged:  # its resume is judged anew from the next update, as after any stop
            self.counters[GUARD_SINCE] = len(self.watches.rows)
            self.mark_completed()
            self.checkpoint()  # the stop's update, saying so
            raise

    def kept_as_result(self) -> str:
        """A stopped run's result: the last weights the guard judged sound, exported; said."""
        kept = None if self.sound is None else self.sound.restore()
        home = self.checkpointer.home  # every rank's (rank 0 writes), so every rank says it
        if kept is None or home is None or not self.learner.policy.exportable:
            return ", its weights not saved as the result"
        self.checkpointer.export(self.task.tokenizer, checkpointed=False)
        which = "the initial weights" if kept == 0 else f"the weights of update {kept}"
        return f"; the result (model/) holds {which}, the last the guard judged sound"

    def begin(self, t_start: float) -> None:
        """Start the loop's clock and progress; the set-up's seconds are ``time/start``."""
        budget = ("update", self.counters["updates"], self.config.max_updates)  # the time left
        bounded = self.config.target_accuracy is not None  # a target may end it sooner
        self.start(f"finetune {self.config.task}", None, budget, bounded=bounded)
        self.phase.started(started := time.perf_counter() - t_start)
        if self.config.progress:
            note("finetune", f"set up in {started:.1f} s; the first update starts")

    def count(self, batch: Completions, completions: int) -> None:
        """One more update, its completion tokens and completions, in the counters."""
        self.counters["updates"] += 1
        self.counters["tokens"] += int(batch.lengths.sum())
        self.counters["completions"] += completions

    def evaluate_if_due(self) -> tuple[float | None, float | None]:
        """The greedy accuracy and mean reward every ``eval_every`` updates, else Nones."""
        if not self.evaluator.due(self.counters["updates"]):
            return None, None
        result = self._evaluated()
        return result.accuracy, result.mean_reward

    def evaluate_on_start(self) -> None:
        """``--eval-on-start``: the greedy accuracy before this run's first update, said.

        Kept as the evaluator's ``start`` (the result's ``start_accuracy``), its episodes in
        episodes.jsonl at the update it was taken after (0 for a new run); no target is
        judged on it and no metrics row is written.
        """
        if not self.config.eval_on_start:
            return
        result = self._evaluated()
        self.evaluator.start = result.accuracy
        if self.config.progress:
            n = self.counters["updates"]
            note("finetune", f"greedy accuracy {result.accuracy:.3f} before update {n + 1}")

    def _evaluated(self) -> Evaluation:
        with self.evaluating():  # its time kept apart
            result = self.evaluator.evaluate(self)
        step = self.counters[self.SCHEMA.steps]
        self.evaluator.show(self.files, self.counters["updates"], step, result)
        return result

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
        c = self.counters
        correct = self.rollout.successes(batch, rewards)  # the evaluation's rule (is_success, R)
        lengths, group = batch.lengths.float(), self.config.group_size
        wall_s, tokens_per_s = self.clock()
        row = metrics_row(
            counters={
                "update": c["updates"],
                "tokens": c["tokens"],
                "completions": c["completions"],
            },
            batch=batch_columns(rewards, correct, lengths, group),
            evaluation={"eval_accuracy": eval_accuracy, "eval_reward": eval_reward},
            update=stats,  # loss, entropy, kl, grad_norm; the ratio's and the sampler's
            feed=self.feed.columns(),  # the batch's staleness, the batches dropped before it
            rollout=self.rollout.columns(batch),  # turns, tool calls, failures (episodes')
            phases=self.phase.row(),
            clock={"wall_s": wall_s, "tokens_per_s": tokens_per_s},
        )
        self.mark_completed()
        shown = {**row, "last_eval_accuracy": self.evaluator.last}
        with self.phase("write"):  # shows in the next row
            self.log(row, row["mean_reward"], checkpoint, shown=shown)
        return row

    def mark_completed(self) -> None:
        """Remember the state after this update: what a failure later checkpoints."""
        super().mark_completed()
        self.last_steps = self.learner.steps

    @contextlib.contextmanager
    def checkpoint_on_error(self) -> Iterator[None]:
        """A reward, model or rank error mid-run leaves the last completed update checkpointed.

        So does a stop answered mid-update (the user's code in the worlds' worker, waited on,
        raises :class:`Interrupted`): it ends the run as a stop between updates does.

        Where the weights are still that update's (no step since), the checkpointer writes it
        if it can; else the checkpoint on disk stays the last good one. A lost rank ends the
        run with one line naming the update kept (``Checkpointer.failed``).
        """
        try:
            yield
        except Exception as err:  # a wreck's stop (Diverged) too: logged, then judged
            # (a sampler's batches in flight die with it: the checkpoint on disk stays)
            current = self.last_steps == self.learner.steps and not self.feed.failure_keeps_disk
            ending = self.checkpointer.failed(err, self.train_state, self.files, current)
            if isinstance(ending, Interrupted) and self.files is not None:  # a stop mid-update
                raise Interrupted(ending.signum, self.out_dir) from None  # (the user's code's)
            if isinstance(ending, Diverged):  # the wreck checkpointed; the sound weights kept
                raise Diverged(f"{ending}{self.kept_as_result()}") from None
            if isinstance(ending, SyncLost) and self.files is not None:
                kept = self.train_state.checkpointed
                raise SyncLost(
                    f"{ending}; the checkpoint of update {kept} stays: resume with eligibility "
                    f"finetune --resume {self.out_dir}",
                    what=ending.what,
                ) from None
            if ending is err:
                raise
            raise ending from None

    def finish(self, solved: bool, final_eval: float | None) -> FinetuneResult:
        """Checkpoint the last update, export, close; :class:`Interrupted` for a stop."""
        h = self.history
        if self.files is not None:  # the curve drawn by its painter while the last writes go on
            self.files.draw_now(h)
        if h and h[-1]["update"] % self.config.checkpoint_every != 0 and not solved:
            self.checkpoint()
        self.checkpointer.export(self.task.tokenizer)  # the policy as the kind it came
        self.close()
        if self.stop.signum is not None and self.files is not None:
            raise Interrupted(self.stop.signum, self.out_dir)
        return self.result(solved, final_eval)

    def result(
        self, solved: bool, final_eval: float | None, already_solved: bool = False
    ) -> FinetuneResult:
        """The run's :class:`FinetuneResult` (the one place it is built)."""
        return FinetuneResult(
            **self.outcome(solved, final_eval, already_solved),
            samples=self.counters["completions"],
            start_accuracy=self.evaluator.start,
            model=self.learner.model,
            task=self.task,
        )


def _files_and_stop(
    stack: contextlib.ExitStack,
    config: FinetuneConfig,
    reward_names: Sequence[str],
    policy: Policy,
    resumed: bool,
) -> tuple[RunDir | None, Stop]:
    """The run's directory and its stop on SIGINT/SIGTERM, both left by ``stack``.

    The directory (None without ``--out``) is made exclusively, or the resumed one reopened,
    by rank 0: its ``metrics.csv`` with each reward function's ``rewards/NAME/*`` columns. The
    stop has no forced exit: the loop's user code runs in workers bounded by
    ``--reward-timeout``, and an update and its checkpoint (minutes at real sizes) finish
    before the run stops; every rank of several finishes the update in flight.
    """
    files = None
    if config.out:
        schema = schema_of(reward_names)
        files = stack.enter_context(RunDir.open(config, schema, IDENTITY, resume=resumed))
    install = files is not None or policy.ranks.world > 1
    stack.callback(policy.ranks.ending)  # once the handlers are restored
    return files, stack.enter_context(stop_on_signals(grace=None, install=install))


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
        resume: a run directory to continue from its last checkpoint (its saved config).
        callback: ``callback(row)`` after each update; returning ``False`` stops the run cleanly,
            with a checkpoint.
        reward_funcs: reward callables in TRL's convention (they replace the task's).
        train_dataset: the prompts in memory (a ``datasets.Dataset`` or a list of records).
        eval_dataset: held-out prompts in memory, in place of ``config.eval_prompts``.
        peft_config: a ``peft.LoraConfig``, as TRL's ``GRPOTrainer`` takes it.
        **trl: TRL's ``tools=`` and ``environment_factory=`` (``--tools``, ``--env``).

    Raises:
        ValueError: a bad task, model, prompt file or reward (before anything is written), or
            a reward that fails later (the last checkpoint stays whole).
        Interrupted: SIGINT/SIGTERM, after checkpointing the last completed update.
    """
    t_start = time.perf_counter()
    trl |= dict(reward_funcs=reward_funcs, train_dataset=train_dataset, eval_dataset=eval_dataset)
    with contextlib.ExitStack() as stack:  # the run directory, the stop flag, the progress
        run = _Run.open(stack, config, resume, t_start, peft_config, trl)
        config, counters, (prompt_rng, sample_rng) = run.config, run.counters, run.rngs
        if (last_eval := run.already_solved()) is not None:  # raise the target to go on
            return run.result(True, last_eval, already_solved=True)
        run.begin(t_start)  # the loop's clock, and the set-up's seconds (time/start)
        final_eval, solved, stopped = None, False, False
        with run.checkpoint_on_error():
            run.evaluate_on_start()  # --eval-on-start: the accuracy before the first update
            while counters["updates"] < config.max_updates and not (solved or stopped):
                # -- G completions (or episodes) of each prompt of the batch, rewarded -------------
                prompts, batch, rewards, scorable = run.feed.draw(run, prompt_rng, sample_rng)
                # -- K optimiser steps (--epochs-per-batch): the first on-policy, then π_θ/π_old --
                loss_args = settings(run, batch, scorable)
                stats, first = update(run, batch, rewards, loss_args)
                for k in range(2, config.epochs_per_batch + 1):
                    stats |= reuse(run, batch, loss_args, first, k)
                run.count(batch, len(prompts))
                run.feed.updated(run)  # the new weights to the sampler (--max-staleness)
                # -- the greedy accuracy every eval_every updates ----------------------------------
                eval_accuracy, eval_reward = run.evaluate_if_due()
                if eval_accuracy is not None:
                    final_eval, solved = eval_accuracy, run.evaluator.reached(eval_accuracy)
                # -- log, checkpoint, report -------------------------------------------------------
                due = counters["updates"] % config.checkpoint_every == 0 or solved
                row = run.record(batch, rewards, stats, eval_accuracy, eval_reward, due)
                run.judge(row)  # the guard: a wreck's stop checkpoints, the sound weights kept
                stopped = callback is not None and callback(dict(row)) is False
                stopped = run.agreed_stop() or stopped
            run.judge_the_end()  # the weights that would be the result, looked at
            return run.finish(solved, final_eval)  # a rank lost in its last writes: one line
