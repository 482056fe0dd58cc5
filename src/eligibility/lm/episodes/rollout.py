r"""Playing episodes: every live episode of a batch sampled together, turn by turn.

Each turn samples one reply for every episode still going (on the keys and values kept from
the turns before, ``lm.episodes.turns``, the world's new tokens alone given to the model; or,
where the model's cache cannot be kept, ``lm.sample.sample`` on each episode's whole context:
the prompt and every token since, the model's and the world's: the same tokens), then
asks each episode's world for its answer (:class:`~eligibility.lm.tasks.Answer`): its tokens
are appended, its reward is the turn's, and an episode the world ends, or at the turn limit
K_max, is dropped from the next turn's batch. The draws are the sampler's (one uniform a row
and step), so a run's episodes are a function of its generator's state.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from eligibility.lm import evaluation
from eligibility.lm.episodes.episode import Episode, Episodes, batch_of
from eligibility.lm.episodes.loss import loss
from eligibility.lm.episodes.turns import Turns, keeps_cache
from eligibility.lm.evaluation import Evaluation
from eligibility.lm.metrics import EPISODE_COLUMNS
from eligibility.lm.policy import device_of
from eligibility.lm.sample import Completions, sample
from eligibility.lm.tasks import EpisodicTask, Task
from eligibility.lm.truncation import Sampling


def play(
    policy: Any,
    task: EpisodicTask,
    prompt_index: Sequence[int],
    *,
    t_max: int,
    temperature: float = 1.0,
    rng: np.random.Generator | None = None,
    sampling: Sampling | None = None,
    cache: bool = True,
) -> Episodes:
    """One episode of each prompt index, all sampled together turn by turn (greedy: rng None).

    Args:
        policy: the policy (or a bare causal LM), as ``lm.sample.sample`` takes it.
        task: the task of several turns.
        prompt_index: each episode's prompt.
        t_max: T, the most tokens of one reply (EOS included).
        temperature: τ.
        rng: the draws' generator; None: the mode at every step.
        sampling: the sampler's truncation (``lm.truncation``), or None.
        cache: keep each episode's keys and values from turn to turn (``lm.episodes.turns``)
            where the model allows it (``keeps_cache``), without ``sampling`` and unless the
            environment's ``ELIGIBILITY_EPISODE_CACHE`` is 0; else (False) each turn's
            contexts are computed whole. The same tokens either way.
    """
    worlds = [task.world(int(i)) for i in prompt_index]  # a world may open with its own prompt
    episodes = [Episode(tuple(getattr(w, "prompt", None) or task.prompts[i]))
                for w, i in zip(worlds, prompt_index, strict=True)]  # fmt: skip
    keep = cache and sampling is None and os.environ.get("ELIGIBILITY_EPISODE_CACHE") != "0"
    of = _on_cache if keep and keeps_cache(policy) else _on_contexts
    replies_of = of(policy, task, episodes, t_max=t_max, temperature=temperature, rng=rng,
                    sampling=sampling)  # fmt: skip
    for k in range(task.max_turns):
        live = [j for j, e in enumerate(episodes) if not e.done]
        if not live:
            break
        replies = replies_of(live)
        lengths = replies.lengths.tolist()
        texts, ended = replies.completions(), replies.ended.tolist()
        for row, j in enumerate(live):
            e, n = episodes[j], lengths[row]
            e.act(replies.completion_ids[row, :n].tolist(), replies.logps[row, :n].tolist(),
                  ended[row])  # fmt: skip
            answer = worlds[j].step(texts[row], ended[row])
            e.reward(answer.reward)
            e.tool_calls += answer.tool_calls
            e.tool_failures += answer.tool_failures
            e.done = answer.done or k == task.max_turns - 1
            if not e.done:
                e.answer(answer.tokens)
    return batch_of(episodes, eos_id=task.eos_id, max_turns=task.max_turns,
                    weighting=task.weighting)  # fmt: skip


Replies = Callable[[list[int]], Completions]
"""live episodes' indices → a reply for each (a :class:`~eligibility.lm.sample.Completions`)."""


def _on_contexts(policy: Any, task: EpisodicTask, episodes: list[Episode], **kw: Any) -> Replies:
    """Each turn's replies sampled on the live episodes' whole contexts, computed anew."""

    def replies(live: list[int]) -> Completions:
        return sample(policy, [episodes[j].context() for j in live], vocab_size=task.vocab_size,
                      max_new_tokens=kw["t_max"], temperature=kw["temperature"], rng=kw["rng"],
                      eos_id=task.eos_id, sampling=kw["sampling"])  # fmt: skip

    return replies


def _on_cache(policy: Any, task: EpisodicTask, episodes: list[Episode], **kw: Any) -> Replies:
    """Each turn's replies sampled on the cache kept from the turns before (:class:`Turns`)."""
    turns = Turns(policy, [e.prompt for e in episodes], vocab_size=task.vocab_size,
                  eos_id=task.eos_id)  # fmt: skip
    rows = list(range(len(episodes)))  # the cache's rows: episodes' indices

    def replies(live: list[int]) -> Completions:
        row_of = {j: r for r, j in enumerate(rows)}
        turns.keep([row_of[j] for j in live])
        rows[:] = live
        turns.catch_up([episodes[j].context() for j in live])
        return turns.reply(kw["t_max"], kw["temperature"], kw["rng"])

    return replies


def refused(config: Any, task: Task, world: int) -> None:
    """A ValueError for a setting episodes do not take yet (one line, saying what to change).

    Checked once the task is made, before the model is loaded or a file written.
    """
    if not isinstance(task, EpisodicTask):
        return
    if world > 1:
        raise ValueError(
            f"task {config.task!r} plays episodes of several turns, which run on one process: "
            "launch without torchrun (sharing episodes across ranks is not supported yet)"
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
    with run.phase("sample"):
        batch = play(run.learner.policy, task, prompts.tolist(), t_max=run.t_max,
                     temperature=config.temperature, rng=sample_rng,
                     sampling=Sampling.of(config))  # fmt: skip
    batch = _to(batch, device_of(run.learner.policy))
    rewards = batch.returns.to(torch.float32)
    return prompts, batch, rewards, np.ones(len(prompts), dtype=bool)


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


def columns(batch: Any) -> dict[str, float | None]:
    """metrics.csv's :data:`EPISODE_COLUMNS` of a batch (None for single completions)."""
    if not isinstance(batch, Episodes):
        return dict.fromkeys(EPISODE_COLUMNS)
    return {
        "turns": float(batch.turns.float().mean()),
        "tool_calls": float(batch.tool_calls.float().mean()),
        "tool_failures": float(batch.tool_failures.sum()),
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
) -> Evaluation:
    """``lm.evaluation.evaluate_policy`` for episodes: each evaluation prompt's episodes played.

    An episode is a success when its return is 1 (``accuracy``'s rule for a batch); the mean
    reward is the mean return, the length the model's tokens; an example's completion is the
    whole episode after the prompt (the world's tokens too).
    """
    target = task.evaluation
    assert isinstance(target, EpisodicTask)
    index = np.repeat(np.arange(len(target.prompts)), samples).tolist()
    returns, lengths, examples = [], [], []
    for start in range(0, len(index), max(chunk, 1)):
        part = index[start : start + chunk]
        batch = play(model, target, part, t_max=t_max, temperature=temperature, rng=rng)
        r = batch.returns.numpy()
        returns.append(r)
        lengths.append(batch.lengths.cpu().numpy())
        rows = zip(
            part, batch.completion_ids.tolist(), batch.completion_mask.tolist(), r, strict=True
        )
        for p, ids, m, x in list(rows)[: max(keep - len(examples), 0)]:
            width = max((k + 1 for k, on in enumerate(m) if on), default=0)
            examples.append((p, ids[:width], float(x)))
    r_all = np.concatenate(returns)
    return Evaluation(
        accuracy=float((r_all == 1.0).mean()),
        mean_reward=float(r_all.mean()),
        mean_length=float(np.concatenate(lengths).mean()),
        completions=len(index),
        examples=examples,
    )


def greedy_eval(
    policy: Any, task: Task, t_max: int, chunk: int, rows: Any = None
) -> tuple[float, float]:
    """``lm.evaluation.greedy_eval``, the episodes played on a task of several turns (one rank)."""
    if not isinstance(task, EpisodicTask):
        return evaluation.greedy_eval(policy, task, t_max, chunk, rows)
    result = evaluate_episodes(policy, task, t_max, chunk)
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
    "greedy_eval",
    "loss_for",
    "play",
    "refused",
]
