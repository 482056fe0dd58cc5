r"""Playing episodes: every live episode of a batch sampled together, turn by turn.

Each turn samples one reply for every episode still going (on the keys and values kept from
the turns before, ``lm.episodes.turns``, the world's new tokens alone given to the model; or,
where the model's cache cannot be kept, ``lm.sample.sample`` on each episode's whole context:
the prompt and every token since, the model's and the world's: the same tokens), then asks
each episode's world for its answer (:class:`~eligibility.lm.tasks.Answer`): its tokens are
appended, its reward is the turn's, and an episode the world ends, or at the turn limit K_max,
is dropped from the next turn's batch (the worlds answer a turn together, the task's
``respond``: a task of tools makes every episode's calls at once). When every episode has
ended, the task's ``finish`` scores them at once (TRL's reward functions, once a batch): its
reward is added to each episode's last turn.

The draws are the sampler's, keyed by the turn's live episodes: turn k draws T uniforms for
each of the n_k episodes still going in the whole batch (in the batch's order), and the
generator moves on by the steps of the turn's longest reply. On W ranks (``lm.rows``) each
rank plays its block of the batch's episodes and uses its live episodes' columns of the
turn's draws, the ranks agreeing each turn on how many are live on each and on the steps
taken: a run's episodes are a function of its generator's state, whatever W.

Either way a reply is drawn by the sampler's one decode loop (``lm.sample.decode``), so a turn
takes every sampling option a single completion does: with a truncation (``lm.truncation``)
each model token's kept set is recorded (:attr:`~eligibility.lm.episodes.episode.Episode.kept`)
for the scorer to train the distribution sampled.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any, TypedDict, Unpack

import numpy as np
from torch import nn

from eligibility.lm.episodes.episode import Episode, Episodes, batch_of
from eligibility.lm.episodes.turns import Turns, keeps_cache
from eligibility.lm.policy import Policy
from eligibility.lm.rewards import TrainerState
from eligibility.lm.rows import Rows
from eligibility.lm.sample import Completions, sample
from eligibility.lm.tasks import EpisodicTask
from eligibility.lm.truncation import Sampling

Share = tuple[slice, int, int]
"""A turn's ``(columns, n, width)``: this rank's live episodes are the columns of the turn's
``n`` (the whole batch's live episodes), whose longest context has ``width`` tokens."""

Replies = Callable[[list[int], Share], Completions]
"""(the live episodes' indices, the turn's share) → a reply for each."""


class Decoding(TypedDict):
    """How a turn's replies are sampled (:func:`play`'s arguments of the same names)."""

    t_max: int
    temperature: float
    rng: np.random.Generator | None
    sampling: Sampling | None


def play(
    policy: nn.Module | Policy,
    task: EpisodicTask,
    prompt_index: Sequence[int],
    *,
    t_max: int,
    temperature: float = 1.0,
    rng: np.random.Generator | None = None,
    sampling: Sampling | None = None,
    cache: bool = True,
    rows: Rows | None = None,
    state: TrainerState | None = None,
    turned: Callable[[int, int], None] | None = None,
) -> Episodes:
    """One episode of each prompt index, all sampled together turn by turn (greedy: rng None).

    Args:
        policy: the policy (or a bare causal LM), as ``lm.sample.sample`` takes it.
        task: the task of several turns.
        prompt_index: each episode's prompt (the whole batch's).
        t_max: T, the most tokens of one reply (EOS included).
        temperature: τ.
        rng: the draws' generator; None: the mode at every step.
        sampling: the sampler's truncation (``lm.truncation``), or None.
        cache: keep each episode's keys and values from turn to turn (``lm.episodes.turns``)
            where the model allows it (``keeps_cache``), the ranks do not run in lockstep (a
            sharded model), and unless the environment's ``ELIGIBILITY_EPISODE_CACHE`` is 0;
            else (False) each turn's contexts are computed whole. The same tokens either way.
        rows: the run's data-parallel rows (None: one process): this rank plays its block.
        state: the run's progress, for the task's ``finish`` (None: a run's start's).
        turned: ``turned(k, playing)`` after each turn k (from 1): the episodes of the whole
            batch that played it (a progress display's word from inside the update).

    Returns:
        This rank's block of the episodes (every one on one process).
    """
    rows = rows or Rows()
    mine = list(prompt_index)[rows.own(len(prompt_index))]
    worlds = [task.world(int(i)) for i in mine]  # a world may open with its own prompt
    episodes = [
        Episode(tuple(getattr(w, "prompt", None) or task.prompts[i]))
        for w, i in zip(worlds, mine, strict=True)
    ]
    replies_of = _drawer(policy, task, episodes, rows, cache, t_max, temperature, rng, sampling)
    for k in range(task.max_turns):
        live = [j for j, e in enumerate(episodes) if not e.done]
        share = _turn(rows, [episodes[j] for j in live])
        if share[1] == 0:  # no episode of the batch is going
            break
        replies = replies_of(live, share) if live or rows.lockstep else None
        if rng is not None:  # on past the turn's longest reply, wherever it was sampled
            rows.align(rng, 0 if replies is None else replies.completion_ids.shape[1], share[1])
        if replies is not None:
            last = k == task.max_turns - 1
            _answered(replies, [(episodes[j], worlds[j]) for j in live], task, last)
        if turned is not None:
            turned(k + 1, share[1])
    return _ended(task, worlds, episodes, state or TrainerState())


def _drawer(
    policy: nn.Module | Policy,
    task: EpisodicTask,
    episodes: list[Episode],
    rows: Rows,
    cache: bool,
    t_max: int,
    temperature: float,
    rng: np.random.Generator | None,
    sampling: Sampling | None,
) -> Replies:
    """How a turn's replies are drawn: on the kept cache, or each context whole (:func:`play`).

    On a sharded model's ranks, in lockstep (a forward runs on every rank at once: none may
    skip one).
    """
    keep = cache and not rows.lockstep and os.environ.get("ELIGIBILITY_EPISODE_CACHE") != "0"
    of = _on_cache if keep and keeps_cache(policy) else _on_contexts
    replies_of = of(
        policy, task, episodes, t_max=t_max, temperature=temperature, rng=rng, sampling=sampling
    )
    if rows.lockstep:
        prompt = episodes[0].prompt if episodes else task.prompts[0]
        replies_of = _in_lockstep(replies_of, policy, task, prompt, t_max, temperature)
    return replies_of


def _ended(
    task: EpisodicTask, worlds: list[Any], episodes: list[Episode], state: TrainerState
) -> Episodes:
    """The batch of ended episodes, scored at once by the task's ``finish`` (TRL's batch).

    Each with its world's conversation where the world keeps one (``World.shown``). Its
    ``logged``: what the reward functions logged (``log_metric``), by name.
    """
    logged: dict[str, list[float]] = {}
    if task.finish is not None:  # else the last answers held the rewards
        endings, logged = task.finish(worlds, state)
        for e, ending in zip(episodes, endings, strict=True):
            e.settle(ending)
    for e, world in zip(episodes, worlds, strict=True):  # its conversation, where it keeps one
        e.shown = world.shown() if callable(getattr(world, "shown", None)) else None
    batch = batch_of(
        episodes,
        eos_id=task.eos_id,
        max_turns=task.max_turns,
        weighting=task.weighting,
        reward_names=task.reward_names,
    )
    return dataclasses.replace(batch, logged=logged)


def _turn(rows: Rows, live: list[Episode]) -> Share:
    """This rank's share of the turn: its live episodes' columns among every rank's."""
    longest = max((len(e.prompt) + len(e.tokens) for e in live), default=0)
    counts = rows.ranks.objects((len(live), longest))
    start = sum(c for c, _ in counts[: rows.ranks.rank])
    total, width = sum(c for c, _ in counts), max(w for _, w in counts)
    return slice(start, start + len(live)), total, width


def _answered(
    replies: Completions, live: list[tuple[Episode, Any]], task: EpisodicTask, last: bool
) -> None:
    """Each live episode's reply recorded, and its world's answer: reward, tokens, the end.

    The worlds answer the turn together (the task's ``respond``: a task of tools makes every
    episode's calls at once). ``last``: the turn is K_max's; the task's ``last_turn_ends``:
    K_max is the world's own length (not a cut).
    """
    lengths = replies.lengths.tolist()
    texts, ended = replies.completions(), replies.ended.tolist()
    for row, (e, _) in enumerate(live):
        n = lengths[row]
        kept = None if replies.kept_sizes is None else replies.kept_sizes[row, :n].tolist()
        raw = None if replies.raw_logps is None else replies.raw_logps[row, :n].tolist()
        e.act(
            replies.completion_ids[row, :n].tolist(),
            replies.logps[row, :n].tolist(),
            ended[row],
            kept=kept,
            raw=raw,
        )
    answers = task.respond([w for _, w in live], list(texts), list(ended))
    for (e, _), answer in zip(live, answers, strict=True):
        e.reward(answer.reward)
        e.tool_calls += answer.tool_calls
        e.tool_failures += answer.tool_failures
        ends = task.last_turn_ends
        e.cut = answer.cut or (last and not answer.done and not ends)  # by a bound, not its world
        e.done = answer.done or last
        if not e.done:
            e.answer(answer.tokens)


def _on_contexts(
    policy: nn.Module | Policy, task: EpisodicTask, episodes: list[Episode], **kw: Unpack[Decoding]
) -> Replies:
    """Each turn's replies sampled on the live episodes' whole contexts, computed anew."""

    def replies(live: list[int], share: Share) -> Completions:
        return sample(
            policy,
            [episodes[j].context() for j in live],
            vocab_size=task.vocab_size,
            max_new_tokens=kw["t_max"],
            temperature=kw["temperature"],
            rng=kw["rng"],
            eos_id=task.eos_id,
            share=share,
            sampling=kw["sampling"],
        )

    return replies


def _on_cache(
    policy: nn.Module | Policy, task: EpisodicTask, episodes: list[Episode], **kw: Unpack[Decoding]
) -> Replies:
    """Each turn's replies sampled on the cache kept from the turns before (:class:`Turns`)."""
    if not episodes:  # a rank with no episode of the batch (more ranks than rows)
        return _on_contexts(policy, task, episodes, **kw)
    turns = Turns(
        policy, [e.prompt for e in episodes], vocab_size=task.vocab_size, eos_id=task.eos_id
    )
    rows = list(range(len(episodes)))  # the cache's rows: episodes' indices

    def replies(live: list[int], share: Share) -> Completions:
        row_of = {j: r for r, j in enumerate(rows)}
        turns.keep([row_of[j] for j in live])
        rows[:] = live
        return turns.reply(
            [episodes[j].context() for j in live],
            kw["t_max"],
            kw["temperature"],
            kw["rng"],
            share=share[:2],
            sampling=kw["sampling"],
        )

    return replies


def _in_lockstep(
    replies_of: Replies,
    policy: nn.Module | Policy,
    task: EpisodicTask,
    prompt: Sequence[int],
    t_max: int,
    temperature: float,
) -> Replies:
    """``replies_of``; on a rank with no live episode, an idle sampling in step with the others'.

    A sharded model's every forward gathers weights from every rank, so a rank whose episodes
    have all ended computes one row, ``prompt`` (``lm.sample.decode``'s ``idle``: nothing
    drawn, nothing read of the generator) while the others reply; its reply is empty.
    """

    def replies(live: list[int], share: Share) -> Completions:
        if live:
            return replies_of(live, share)
        idle = sample(
            policy,
            [prompt],
            vocab_size=task.vocab_size,
            max_new_tokens=t_max,
            temperature=temperature,
            eos_id=task.eos_id,
            idle=True,
        )
        return dataclasses.replace(
            idle,
            completion_ids=idle.completion_ids[:0, :0],
            completion_mask=idle.completion_mask[:0, :0],
        )

    return replies


__all__ = ["Replies", "Share", "play"]
