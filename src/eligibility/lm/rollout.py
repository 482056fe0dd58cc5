r"""A rollout per kind of task: an update's batch drawn, its loss, its columns, its evaluation.

TRL's ``GRPOTrainer`` generates behind one method (its tool loop included) and computes the
loss behind another, which never asks what made the batch. Here the kind of task is asked
once, where the run is built (``lm.build.rollout_for``), and the loop speaks to the
:class:`Rollout` it gets:

- :meth:`~Rollout.draw`: the batch of an update, M prompts (:func:`prompts`, the one draw of
  them) with G completions or episodes of each, rewarded, every rank its rows (``lm.rows``);
- :meth:`~Rollout.credit`: what the batch's tokens are credited with (``lm.credit.Credit``:
  its rewards per turn and each token's turn), which the one loss
  (:func:`~eligibility.lm.objective.loss`, :func:`~eligibility.lm.objective.reuse_loss` for a
  further step) weighs them by, and from which the rows to score are read
  (:func:`~eligibility.lm.objective.live_rows`);
- :meth:`~Rollout.columns`: metrics.csv's columns of the kind (``lm.metrics.EPISODE_COLUMNS``);
- :meth:`~Rollout.evaluate`: the held-out evaluation, greedy while training.

:class:`CompletionRollout` is the rollout of single completions;
``lm.episodes.episode_rollout.EpisodeRollout`` that of episodes of several turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, Protocol, TypedDict, TypeVar, Unpack

import numpy as np
import torch
from torch import nn

from eligibility.lm.batch import Completions
from eligibility.lm.config import FinetuneConfig
from eligibility.lm.credit import Credit
from eligibility.lm.evaluation import Evaluation, evaluate_policy
from eligibility.lm.learner import Learner
from eligibility.lm.metrics import EPISODE_COLUMNS
from eligibility.lm.phases import Phases
from eligibility.lm.policy import Policy
from eligibility.lm.rewards import TrainerState, fill_unscorable
from eligibility.lm.rows import Rows
from eligibility.lm.sample import sample
from eligibility.lm.tasks import Task, succeeded
from eligibility.lm.truncation import Sampling
from eligibility.runs.progress import Progress

B = TypeVar("B", bound=Completions)


class Run(Protocol):
    """What a rollout and an update read of the run (``lm.trainer``'s ``_Run`` has it)."""

    config: FinetuneConfig
    task: Task
    rollout: Rollout[Any]
    learner: Learner
    ref: Policy | None  # the frozen initial policy of the KL (None: no KL)
    rows: Rows
    t_max: int
    phase: Phases
    counters: dict[str, int]
    progress: Progress | None  # the run's display (None: off, or another rank)


class Drawn(NamedTuple, Generic[B]):
    """An update's batch, as a rollout draws it.

    Attributes:
        prompts: [N] each row's prompt index.
        batch: the rows (completions, or episodes), the whole batch's on every rank.
        rewards: [N] each row's reward (an episode's return), an unscorable one filled as
            ``lm.rewards.fill_unscorable`` says, on the batch's device.
        scorable: [N] bool, which a reward scored.
    """

    prompts: np.ndarray
    batch: B
    rewards: torch.Tensor
    scorable: np.ndarray


class Rollout(Protocol[B]):
    """What a kind of task does in an update (see the module): one object the loop speaks to."""

    def draw(
        self, run: Run, prompt_rng: np.random.Generator, sample_rng: np.random.Generator
    ) -> Drawn[B]:
        """The batch of an update."""
        ...

    def credit(self, batch: B, rewards: torch.Tensor) -> Credit:
        """The tokens' credit on ``batch`` (its ``rewards``: each row's)."""
        ...

    def columns(self, batch: B) -> dict[str, float | None]:
        """metrics.csv's :data:`~eligibility.lm.metrics.EPISODE_COLUMNS` of a batch."""
        ...

    def successes(self, batch: B, rewards: torch.Tensor) -> torch.Tensor:
        """[N] bool, which rows of ``batch`` succeeded (``rewards``: each row's R).

        The one rule of the run: a batch's ``accuracy`` and the evaluation's read it.
        """
        ...

    def played(self, n: int, greedy: bool) -> Evaluating:
        """How ``evaluate --episodes n`` draws: the samples of each prompt (and a limit)."""
        ...

    def evaluate(
        self, model: nn.Module | Policy, t_max: int, chunk: int, **how: Unpack[Evaluating]
    ) -> Evaluation:
        """The held-out evaluation: ``chunk`` rows at once, greedy unless ``how`` has an rng."""
        ...


class Evaluating(TypedDict, total=False):
    """How an evaluation runs (``lm.evaluation.evaluate_policy``'s keywords)."""

    samples: int
    temperature: float
    rng: np.random.Generator | None
    keep: int
    rows: Rows | None
    limit: int | None
    state: TrainerState | None  # the run's progress (episodes' reward functions read it)


def trainer_state(run: Run) -> TrainerState:
    """The run's progress as TRL's reward functions read it (``trainer_state=``)."""
    c, config, ranks = run.counters, run.config, run.rows.ranks
    n = len(run.task.prompts)
    return TrainerState.of(c, config.max_updates, config.group_size, n, (ranks.rank, ranks.local))


EPOCH_STREAM = 3
"""The seed stream of the epochs' shuffles (``SeedSequence(--seed, spawn_key=(3, e))``): apart
from the run's draws (streams 0 and 1) and the defaults' measurement (2)."""


def epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    """The order the N prompts are walked in during ``epoch``: a shuffle of its own.

    A function of the seed and the epoch alone, so a resumed run walks on exactly where it
    stopped (its update counter says where).
    """
    stream = np.random.SeedSequence(seed, spawn_key=(EPOCH_STREAM, epoch))
    return np.random.default_rng(stream).permutation(n)


def prompts(run: Run, prompt_rng: np.random.Generator) -> np.ndarray:
    """Each row's prompt: M = ``--prompts-per-batch`` drawn, each repeated G times.

    The N prompts are walked in epochs, as TRL's sampler walks its dataset: each epoch a shuffle
    of its own (:func:`epoch_order`) cut into ⌊N/M⌋ batches of M distinct prompts, the N mod M
    at its end not drawn that epoch (TRL drops its incomplete batch too). Every prompt comes
    once in each ⌊N/M⌋ updates but those few: a prompt the model answers right now and then is
    never left undrawn for long (drawn anew each update, about N/e of the prompts would wait
    N/M updates or more). Where the task has fewer than M prompts, M are drawn with
    replacement (``prompt_rng``).
    """
    n_prompts, per_batch = len(run.task.prompts), run.config.prompts_per_batch
    if per_batch > n_prompts:
        chosen = prompt_rng.choice(n_prompts, per_batch, replace=True)
    else:
        batches = n_prompts // per_batch  # a whole epoch's
        epoch, j = divmod(run.counters["updates"], batches)
        chosen = epoch_order(run.config.seed, epoch, n_prompts)[j * per_batch : (j + 1) * per_batch]
    return np.repeat(chosen, run.config.group_size)


@dataclass(frozen=True)
class CompletionRollout:
    """The rollout of single completions: G of each prompt, sampled, scored by the reward."""

    task: Task

    def draw(
        self, run: Run, prompt_rng: np.random.Generator, sample_rng: np.random.Generator
    ) -> Drawn[Completions]:
        """M prompts drawn, G completions of each sampled (each rank its rows), and scored."""
        task, config = self.task, run.config
        prompt_of = prompts(run, prompt_rng)
        n = len(prompt_of)
        # -- this rank samples and scores its rows (lm.rows), the draws the whole batch's --
        mine, share = run.rows.draws([task.prompts[i] for i in prompt_of])
        with run.phase("sample"):
            batch = sample(
                run.learner.policy,
                mine,
                vocab_size=task.vocab_size,
                max_new_tokens=run.t_max,
                temperature=config.temperature,
                rng=sample_rng,
                eos_id=task.eos_id,
                share=share,
                sampling=Sampling.of(config),
            )
            run.rows.align(sample_rng, batch.completion_ids.shape[1], n)
        with run.phase("reward"):
            own = prompt_of[share[0]].tolist()
            scored = task.rewards(own, batch.completions(), batch.ended.tolist())
            r, scorable = run.rows.rewards(scored)
        with run.phase("sample"):
            batch = run.rows.batch(batch, n, task.eos_id)  # the batch's rows, on every rank
        r = fill_unscorable(r, scorable, config.group_size)
        rewards = torch.tensor(r, dtype=torch.float32, device=batch.completion_ids.device)
        return Drawn(prompt_of, batch, rewards, scorable)

    def credit(self, batch: Completions, rewards: torch.Tensor) -> Credit:
        """One turn a completion, its reward."""
        return Credit.of_completions(rewards, batch.completion_mask)

    def columns(self, batch: Completions) -> dict[str, float | None]:
        """None for each: a single completion has no turns and calls no tool."""
        return dict.fromkeys(EPISODE_COLUMNS)

    def successes(self, batch: Completions, rewards: torch.Tensor) -> torch.Tensor:
        """R = 1, or R ≥ ``--success-return`` (``lm.tasks.succeeded``)."""
        return succeeded(rewards, self.task.success_return)

    def played(self, n: int, greedy: bool) -> Evaluating:
        """``n`` completions of each evaluation prompt (one, greedy)."""
        return {"samples": 1 if greedy else n}

    def evaluate(
        self, model: nn.Module | Policy, t_max: int, chunk: int, **how: Unpack[Evaluating]
    ) -> Evaluation:
        """``lm.evaluation.evaluate_policy`` on the task's evaluation prompts.

        (The run's ``state`` is not asked for: single completions' rewards take no
        ``trainer_state``.)
        """
        how.pop("state", None)
        return evaluate_policy(model, self.task, t_max, chunk, **how)


__all__ = [
    "CompletionRollout",
    "Drawn",
    "Evaluating",
    "Rollout",
    "Run",
    "epoch_order",
    "prompts",
    "trainer_state",
]
