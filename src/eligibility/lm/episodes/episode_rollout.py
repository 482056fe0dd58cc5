r"""The rollout of episodes of several turns (``lm.rollout``): draw, loss, columns, evaluation.

The batch is played by ``lm.episodes.play``; its credit is its rewards per turn (the one loss,
``lm.objective``, weighs the model's tokens by it); metrics.csv gets its turn and tool
columns; an evaluation plays whole episodes.

Under ``torchrun`` each rank plays its block of the batch's episodes (``lm.rows``'s blocks),
the draws the whole batch's, and every rank gets the whole batch back (``Rows.batch``): the
advantages, normalisers and loss are the batch's, as for single completions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Unpack

import numpy as np
import torch
from torch import nn

from eligibility.lm.credit import Credit
from eligibility.lm.episodes.episode import Episodes
from eligibility.lm.episodes.play import play
from eligibility.lm.episodes.shown import replies_cut, transcripts
from eligibility.lm.evaluation import Evaluation
from eligibility.lm.policy import Policy
from eligibility.lm.rewards import TrainerState
from eligibility.lm.rollout import Drawn, Evaluating, Run, prompts, trainer_state
from eligibility.lm.rows import Rows
from eligibility.lm.tasks import EpisodicTask, succeeded
from eligibility.lm.truncation import Sampling
from eligibility.lm.usermetrics import user_columns


@dataclass(frozen=True)
class EpisodeRollout:
    """The rollout of a task of several turns: G episodes of each prompt, played."""

    task: EpisodicTask
    said: set[str] = field(default_factory=set, compare=False)  # user names said escaped

    def draw(
        self, run: Run, prompt_rng: np.random.Generator, sample_rng: np.random.Generator
    ) -> Drawn[Episodes]:
        """M prompts, G episodes of each played (each rank its block of them).

        The prompts drawn as for single completions (``lm.rollout.prompts``); the rewards are
        the episodes' returns (what ``mean_reward`` and ``accuracy`` read).
        """
        task, config, policy = self.task, run.config, run.learner.policy
        prompt_of = prompts(run, prompt_rng)
        with run.phase("sample"):  # this rank's episodes (lm.rows), then the whole batch's
            mine = play(
                policy,
                task,
                prompt_of.tolist(),
                t_max=run.t_max,
                temperature=config.temperature,
                rng=sample_rng,
                sampling=Sampling.of(config),
                rows=run.rows,
                state=trainer_state(run),
                turned=_turned(run, len(prompt_of)),
            )
            batch = run.rows.batch(mine, len(prompt_of), task.eos_id)
            logged: dict[str, list[float]] = {}
            for part in run.rows.ranks.objects(mine.logged):  # every rank's, as TRL's mean
                for name, values in part.items():
                    logged.setdefault(name, []).extend(values)
        batch = dataclasses.replace(batch.to(policy.device), logged=logged)
        rewards = batch.returns.to(torch.float32)
        return Drawn(prompt_of, batch, rewards, np.ones(len(prompt_of), dtype=bool))

    def credit(self, batch: Episodes, rewards: torch.Tensor) -> Credit:
        """The episodes' rewards per turn and each token's turn (``rewards``, the returns, unread).

        T_max becomes K_max times the reply limit: the most model tokens of an episode.
        """
        return Credit(batch.turn_rewards, batch.turn, batch.weighting, batch.max_turns)

    def columns(self, batch: Episodes) -> dict[str, float | None]:
        """The batch's columns of metrics.csv (``lm.metrics.EPISODE_COLUMNS`` and more).

        An episode's mean turns, calls and failures; the failed calls', cut replies' and cut
        episodes' rates; each reward function's mean and std (``rewards/NAME/*``, TRL's names,
        over the episodes it applies to); what the reward functions logged, averaged, each under
        ``user/NAME`` (``lm.usermetrics``). A reply
        is cut when it ran to the length limit (``lm.episodes.shown.replies_cut``); an
        episode, when it ended at a bound (``--max-turns``, ``--max-tool-calls``, the model's
        positions) rather than where its world would have ended it. ``success_stated``: the
        share of the episodes whose success their environment stated (``is_success``), the
        rest judged by their return (:meth:`successes`).
        """
        calls, failed = int(batch.tool_calls.sum()), int(batch.tool_failures.sum())
        stated = np.isfinite(_stated(batch))
        cut, replies = replies_cut(batch, self.task.eos_id)
        return {
            "turns": float(batch.turns.float().mean()),
            "tool_calls": float(batch.tool_calls.float().mean()),
            "tool_failures": float(batch.tool_failures.float().mean()),
            "tool_failure_rate": failed / calls if calls else None,
            "replies_cut": cut / replies if replies else None,
            "episodes_cut": None if batch.cut is None else float(batch.cut.float().mean()),
            "success_stated": float(stated.mean()) if len(stated) else None,
            **reward_columns(batch),
            **user_columns(batch.logged, self.said),  # user/NAME: never one of the run's columns
        }

    def successes(self, batch: Episodes, rewards: torch.Tensor) -> torch.Tensor:
        """[N] bool: as each episode's environment says (``is_success``), else by its return.

        The return's rule is ``lm.tasks.succeeded`` at the task's ``success_return``; the
        evaluation reads the same (:func:`evaluate_episodes`), so ``accuracy`` and
        ``eval_accuracy`` count one thing. ``rewards``: the returns (the loop's).
        """
        stated = torch.as_tensor(_stated(batch), device=rewards.device)
        by_return = succeeded(rewards.double(), self.task.success_return)
        return torch.where(torch.isnan(stated), by_return, stated == 1.0)

    def played(self, n: int, greedy: bool) -> Evaluating:
        """``n`` episodes in all: the evaluation prompts in order, each as often as it takes."""
        samples = 1 if greedy else -(-n // len(self.task.evaluation.prompts))
        return {"samples": samples, "limit": n}

    def evaluate(
        self, model: nn.Module | Policy, t_max: int, chunk: int, **how: Unpack[Evaluating]
    ) -> Evaluation:
        """:func:`evaluate_episodes` on the task's evaluation prompts."""
        return evaluate_episodes(model, self.task, t_max, chunk, **how)


def reward_columns(batch: Episodes) -> dict[str, float | None]:
    """``rewards/NAME/mean`` and ``rewards/NAME/std`` of each reward function (TRL's names).

    Over the episodes the function applies to (its r not None: TRL's ``nanmean``, and its
    ``nanstd``, Bessel-corrected); empty where it applies to none.
    """
    out: dict[str, float | None] = {}
    if batch.reward_parts is None:
        return out
    for k, name in enumerate(batch.reward_names):
        r = batch.reward_parts[:, k]
        r = r[~torch.isnan(r)].double()
        out[f"rewards/{name}/mean"] = float(r.mean()) if len(r) else None
        out[f"rewards/{name}/std"] = float(r.std()) if len(r) > 1 else None
    return out


def _turned(run: Run, n: int) -> Callable[[int, int], None] | None:
    """What the run's progress says after each turn of an update's episodes (None: no display).

    So that an update of long episodes (a world that never ends, a large ``--max-turns``)
    shows that it moves: ``update 3: turn 40 of at most 500, 12 of 16 episodes playing``.
    """
    if run.progress is None:
        return None
    progress, update, most = run.progress, run.counters["updates"] + 1, run.task.max_turns

    def said(k: int, playing: int) -> None:
        progress.during(f"update {update}: turn {k} of at most {most}, {playing} of {n} "
                        "episodes playing")  # fmt: skip

    return said


def _stated(batch: Episodes) -> np.ndarray:
    """[N] each episode's success as its environment states it (1.0, 0.0; NaN: not stated)."""
    n = len(batch.returns)
    return np.full(n, np.nan) if batch.success is None else batch.success.cpu().numpy()


def evaluate_episodes(
    model: nn.Module | Policy,
    task: EpisodicTask,
    t_max: int,
    chunk: int,
    *,
    samples: int = 1,
    temperature: float = 1.0,
    rng: np.random.Generator | None = None,
    keep: int = 0,
    rows: Rows | None = None,
    limit: int | None = None,
    state: TrainerState | None = None,
) -> Evaluation:
    """``lm.evaluation.evaluate_policy`` for episodes: each evaluation prompt's episodes played.

    An episode is a success as :meth:`EpisodeRollout.successes` reads it (a batch's ``accuracy``
    reads the same): where its environment says so (``is_success``), else when its return is
    1, or reaches the task's ``success_return`` (``lm.tasks.succeeded``); the mean
    reward is the mean return, the length the model's tokens; an example's completion is the
    whole episode after the prompt (the world's tokens too), and the kept episodes are also
    given as transcripts (``lm.episodes.shown``: their messages; their system prompts once,
    ``systems``). ``rows``: greedy (no ``rng``), each rank
    plays its share of the episodes and every rank gets every return back. ``limit``: only the
    first ``limit`` episodes (the prompts in order, each ``samples`` times). ``state``: the
    run's progress its reward functions read (``trainer_state``: the training run's, or the
    checkpoint's for ``evaluate``).
    """
    target = task.evaluation
    rows = rows if rows is not None and rng is None else Rows()
    everyone = np.repeat(np.arange(len(target.prompts)), samples).tolist()[:limit]
    index = rows.evaluated(everyone)
    returns, lengths, successes = [np.zeros(0)], [np.zeros(0)], [np.zeros(0)]
    examples: list[tuple[int, list[int], float]] = []
    shown: list[dict] = []
    systems: list[str] = []  # the shown episodes' system prompts, each once
    for start in range(0, len(index), max(chunk, 1)):
        part = index[start : start + chunk]
        batch = play(
            model, target, part, t_max=t_max, temperature=temperature, rng=rng, state=state
        )
        r = batch.returns.numpy()
        returns.append(r)
        ok = EpisodeRollout(target).successes(batch, batch.returns)  # the batch's rule (accuracy's)
        successes.append(ok.cpu().numpy().astype(np.float64))
        lengths.append(batch.lengths.cpu().numpy())
        kept = max(keep - len(examples), 0)
        shown += transcripts(batch, range(min(kept, len(part))), target.text, systems)
        examples += _examples(part, batch, r, kept)
    mine = tuple(np.concatenate(x).tolist() for x in (returns, lengths, successes))
    r_all, l_all, ok_all = (np.asarray(x, dtype=float) for x in rows.joined(mine))
    return Evaluation(
        accuracy=float(ok_all.mean()),
        mean_reward=float(r_all.mean()),
        mean_length=float(l_all.mean()),
        completions=len(everyone),
        examples=examples,
        episodes=shown,
        systems=systems,
    )


def _examples(
    part: list[int], batch: Episodes, returns: np.ndarray, kept: int
) -> list[tuple[int, list[int], float]]:
    """The first ``kept`` episodes of ``batch`` as examples: (prompt, the tokens after it, R)."""
    played = zip(
        part, batch.completion_ids.tolist(), batch.completion_mask.tolist(), returns, strict=True
    )
    out = []
    for p, ids, m, x in list(played)[:kept]:
        width = max((k + 1 for k, on in enumerate(m) if on), default=0)
        out.append((p, ids[:width], float(x)))
    return out


__all__ = ["EpisodeRollout", "evaluate_episodes", "play", "reward_columns"]
