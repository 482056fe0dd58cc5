r"""Episodes in an update: the batch drawn and played, its loss, metrics and evaluation.

The batch is played by ``lm.episodes.play``; the loss is ``lm.episodes.loss`` bound to its
turns; metrics.csv gets its turn and tool columns; an evaluation plays whole episodes.

Under ``torchrun`` each rank plays its block of the batch's episodes (``lm.rows``'s blocks),
the draws the whole batch's, and every rank gets the whole batch back (:func:`gathered`): the
advantages, normalisers and loss are the batch's, as for single completions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from eligibility.lm import evaluation
from eligibility.lm.episodes.episode import Episodes
from eligibility.lm.episodes.loss import loss
from eligibility.lm.episodes.play import play
from eligibility.lm.episodes.shown import replies_cut, transcripts
from eligibility.lm.evaluation import Evaluation
from eligibility.lm.metrics import EPISODE_COLUMNS
from eligibility.lm.policy import device_of
from eligibility.lm.rows import Rows
from eligibility.lm.tasks import EpisodicTask, Task, succeeded
from eligibility.lm.truncation import Sampling


def refused(config: Any, task: Task, world: int) -> None:
    """A ValueError for a setting episodes do not take yet (one line, saying what to change).

    Checked once the task is made, before the model is loaded or a file written.
    """
    if not isinstance(task, EpisodicTask):
        return
    if world > 1 and config.fsdp:  # a sharded forward runs on every rank at once
        raise ValueError(
            f"task {config.task!r} plays episodes, shared by data-parallel ranks: --fsdp is "
            "not taken with episodes (each rank plays its own turns); drop --fsdp"
        )
    if config.epochs_per_batch != 1:
        raise ValueError(f"task {config.task!r} plays episodes: --epochs-per-batch must be 1")
    if config.importance_sampling != "none":
        raise ValueError(f"task {config.task!r} plays episodes: --importance-sampling none")
    if Sampling.of(config) is not None:  # the episodes keep no kept sets to score under
        raise ValueError(
            f"task {config.task!r} plays episodes, sampled from the full π_τ: leave --top-k, "
            "--top-p, --min-p and --repetition-penalty at their defaults"
        )


def draw(
    run: Any, prompt_rng: np.random.Generator, sample_rng: np.random.Generator
) -> tuple[np.ndarray, Episodes, torch.Tensor, np.ndarray]:
    """The batch of an update on a task of several turns: M prompts, G episodes of each.

    The same draws of prompts as ``lm.update.draw``'s single completions; the rewards returned
    are the episodes' returns (what ``mean_reward`` and ``accuracy`` read).
    """
    config, task, g = run.config, run.task, run.config.group_size
    n_prompts, per_batch = len(task.prompts), config.prompts_per_batch
    chosen = prompt_rng.choice(n_prompts, per_batch, replace=per_batch > n_prompts)
    prompts = np.repeat(chosen, g)
    with run.phase("sample"):  # this rank's episodes (lm.rows), then the whole batch's
        mine = play(run.learner.policy, task, prompts.tolist(), t_max=run.t_max,
                    temperature=config.temperature, rng=sample_rng,
                    sampling=Sampling.of(config), rows=run.rows)  # fmt: skip
        batch = gathered(mine, run.rows, len(prompts), task.eos_id)
    batch = _to(batch, device_of(run.learner.policy))
    rewards = batch.returns.to(torch.float32)
    return prompts, batch, rewards, np.ones(len(prompts), dtype=bool)


def gathered(batch: Episodes, rows: Rows, n: int, eos_id: int) -> Episodes:
    """The whole batch of ``n`` episodes, from each rank's block (the identity on one).

    Padded as :func:`~eligibility.lm.episodes.episode.batch_of` pads one process's batch: the
    prompts on the left, the rest on the right (``turn`` with −1, rewards of turns an episode
    did not play with 0).
    """
    if rows.ranks.world == 1:
        return batch
    g = rows.gather
    return dataclasses.replace(
        batch,
        prompt_ids=g(batch.prompt_ids, n, pad=eos_id, left=True),
        prompt_mask=g(batch.prompt_mask, n, left=True),
        completion_ids=g(batch.completion_ids, n, pad=eos_id),
        completion_mask=g(batch.completion_mask, n),
        logps=g(batch.logps, n),
        ended=g(batch.ended, n),
        turn=g(batch.turn, n, pad=-1),
        turn_rewards=g(batch.turn_rewards, n),
        turns=g(batch.turns, n),
        tool_calls=g(batch.tool_calls, n),
        tool_failures=g(batch.tool_failures, n),
    )


def _to(batch: Episodes, device: torch.device) -> Episodes:
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "logps",
                 "ended", "turn", "turn_rewards"):  # fmt: skip
        setattr(batch, name, getattr(batch, name).to(device))
    return batch


def loss_for(
    batch: Any, single: Callable[..., Any], live: torch.Tensor | None
) -> tuple[Callable[..., Any], torch.Tensor | None]:
    """The episodes' loss bound to ``batch``'s turns, and the rows to score (every one).

    The loss is called as ``lm.objective.loss`` is; ``lm.objective.live_rows`` read a
    single completion's reward, so an episode's are all scored. ``single`` and ``live`` for a
    batch of single completions. T_max becomes K_max times the reply limit: the most model
    tokens of an episode.
    """
    if not isinstance(batch, Episodes):
        return single, live

    def bound(ell: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor, **settings: Any):
        del rewards  # the returns per turn are the batch's
        t_max = settings.pop("max_completion_length") * batch.max_turns
        return loss(ell, batch.turn_rewards, mask, batch.turn, weighting=batch.weighting,
                    max_completion_length=t_max, **settings)  # fmt: skip

    return bound, None


def columns(batch: Any, eos_id: int = 0) -> dict[str, float | None]:
    """metrics.csv's :data:`EPISODE_COLUMNS` of a batch (None for single completions)."""
    if not isinstance(batch, Episodes):
        return dict.fromkeys(EPISODE_COLUMNS)
    calls, failed = int(batch.tool_calls.sum()), int(batch.tool_failures.sum())
    cut, replies = replies_cut(batch, eos_id)
    return {
        "turns": float(batch.turns.float().mean()),
        "tool_calls": float(batch.tool_calls.float().mean()),
        "tool_failures": float(batch.tool_failures.float().mean()),
        "tool_failure_rate": failed / calls if calls else None,
        "replies_cut": cut / replies if replies else None,
    }


def evaluate_episodes(
    model: Any,
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
) -> Evaluation:
    """``lm.evaluation.evaluate_policy`` for episodes: each evaluation prompt's episodes played.

    An episode is a success when its return is 1, or reaches the task's ``success_return``
    (``lm.tasks.succeeded``: ``accuracy``'s rule for a batch); the mean
    reward is the mean return, the length the model's tokens; an example's completion is the
    whole episode after the prompt (the world's tokens too), and the kept episodes are also
    given as transcripts (``lm.episodes.shown``). ``rows``: greedy (no ``rng``), each rank
    plays its share of the episodes and every rank gets every return back. ``limit``: only the
    first ``limit`` episodes (the prompts in order, each ``samples`` times).
    """
    target = task.evaluation
    assert isinstance(target, EpisodicTask)
    rows = rows if rows is not None and rng is None else Rows()
    everyone = np.repeat(np.arange(len(target.prompts)), samples).tolist()[:limit]
    index = rows.evaluated(everyone)
    returns, lengths, examples, shown = [np.zeros(0)], [np.zeros(0)], [], []
    for start in range(0, len(index), max(chunk, 1)):
        part = index[start : start + chunk]
        batch = play(model, target, part, t_max=t_max, temperature=temperature, rng=rng)
        r = batch.returns.numpy()
        returns.append(r)
        lengths.append(batch.lengths.cpu().numpy())
        played = zip(
            part, batch.completion_ids.tolist(), batch.completion_mask.tolist(), r, strict=True
        )
        kept = max(keep - len(examples), 0)
        shown += transcripts(batch, range(min(kept, len(part))), target.text)
        for p, ids, m, x in list(played)[:kept]:
            width = max((k + 1 for k, on in enumerate(m) if on), default=0)
            examples.append((p, ids[:width], float(x)))
    r_all, l_all = (np.concatenate(x).tolist() for x in (returns, lengths))
    r_all, l_all = (np.asarray(x, dtype=float) for x in rows.joined((r_all, l_all)))
    return Evaluation(
        accuracy=float(succeeded(r_all, target.success_return).mean()),
        mean_reward=float(r_all.mean()),
        mean_length=float(l_all.mean()),
        completions=len(everyone),
        examples=examples,
        episodes=shown,
    )


SHOWN = 4
"""Episodes shown at each evaluation of a run (``episodes.jsonl``), as TRL's
``num_completions_to_print``."""


def greedy_eval(
    policy: Any,
    task: Task,
    t_max: int,
    chunk: int,
    rows: Any = None,
    shown: Callable[[list[dict[str, Any]]], None] | None = None,
) -> tuple[float, float]:
    """``lm.evaluation.greedy_eval``; on a task of turns, its episodes (each rank its share).

    The first :data:`SHOWN` episodes are handed to ``shown`` as transcripts
    (``lm.episodes.shown``).
    """
    if not isinstance(task, EpisodicTask):
        return evaluation.greedy_eval(policy, task, t_max, chunk, rows)
    result = evaluate_episodes(policy, task, t_max, chunk, rows=rows, keep=SHOWN)
    if shown is not None:
        shown(result.episodes)
    return result.accuracy, result.mean_reward


def evaluate(model: Any, task: Task, *args: Any, **kwargs: Any) -> Evaluation:
    """``lm.evaluation.evaluate_policy``, or :func:`evaluate_episodes` on a task of turns."""
    of = evaluate_episodes if isinstance(task, EpisodicTask) else evaluation.evaluate_policy
    return of(model, task, *args, **kwargs)


__all__ = [
    "columns",
    "draw",
    "evaluate",
    "evaluate_episodes",
    "gathered",
    "greedy_eval",
    "loss_for",
    "play",
    "refused",
]
