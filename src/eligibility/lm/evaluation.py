"""The held-out evaluation of a policy: one function, for training and ``eligibility evaluate``.

The evaluation prompts are completed ``chunk`` at a time (as many as memory allows:
``lm.limits.eval_rows``), greedily (the mode at every step: each distinct prompt once) or
sampled from π_τ; each completion is scored by the task's reward. On several ranks (a
data-parallel run) each rank completes its share of the prompts greedily and the ranks' scores
are gathered in prompt order, so every rank gets the one process's figures. A completion the
reward cannot score (``None``: say, no answer to parse) is left out of the mean reward, and
counts as not correct in the accuracy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from eligibility.lm.policy import Policy
from eligibility.lm.rows import Rows
from eligibility.lm.sample import sample
from eligibility.lm.tasks import Task


@dataclass
class Evaluation:
    """What one evaluation measured.

    Attributes:
        accuracy: the share of completions judged correct (0.0 when none could be judged).
        mean_reward: the mean reward of the scorable completions (NaN: none).
        mean_length: the mean completion length in tokens.
        completions: how many completions were drawn.
        examples: the first few (prompt index, completion tokens, reward).
        episodes: on a task of turns, the first few episodes as a person reads them
            (``lm.episodes.shown.transcript``: their messages, each reply's reward).
        systems: their system prompts, each once (an episode's ``system`` is its index).
    """

    accuracy: float
    mean_reward: float
    mean_length: float
    completions: int
    examples: list[tuple[int, list[int], float]] = field(default_factory=list)
    episodes: list[dict] = field(default_factory=list)
    systems: list[str] = field(default_factory=list)


SHOWN = 4
"""Episodes shown at each evaluation of a run (``episodes.jsonl``), as TRL's
``num_completions_to_print``."""


def logged(
    path: Path, update: int, records: list[dict[str, Any]], systems: Sequence[str] = ()
) -> None:
    """``records`` as the line of ``update`` in ``path`` (JSON lines).

    A line is ``{"update", "system": [text, …], "episodes"}``: the system prompts once, each
    episode naming its own by index (``lm.episodes.shown``).

    The file is written whole, atomically, with the lines of earlier updates kept and any of
    this update or later dropped: a resumed run that evaluates the same update again writes
    the same file as the uninterrupted one.
    """
    from eligibility._io import atomic_write_text

    kept = []
    if path.is_file():
        kept = [x for x in path.read_text().splitlines() if json.loads(x)["update"] < update]
    line = json.dumps(
        {"update": update, "system": list(systems), "episodes": records}, ensure_ascii=False
    )
    atomic_write_text(path, "".join(f"{x}\n" for x in [*kept, line]))


def evaluate_policy(
    model: nn.Module | Policy,
    task: Task,
    t_max: int,
    chunk: int,
    *,
    samples: int = 1,
    temperature: float = 1.0,
    rng: np.random.Generator | None = None,
    keep: int = 0,
    rows: Rows | None = None,
) -> Evaluation:
    """Accuracy and mean reward of ``model`` on ``task``'s evaluation prompts.

    Greedy (``rng`` None), each distinct prompt is completed once and its completion scored
    for every record that holds it (the mode does not depend on the row: the same tokens);
    sampled, every record's completions are drawn.

    Args:
        model: the policy.
        task: its task (``task.evaluation`` holds the prompts and the reward).
        t_max: the longest completion.
        chunk: completions drawn (and scored) at once (:func:`eval_rows`: as many as memory
            allows).
        samples: completions per prompt (greedy: 1).
        temperature: τ of the samples (greedy decoding ignores it).
        rng: None: greedy; else the samples' generator.
        keep: how many (prompt, completion, reward) examples to return.
        rows: the run's data-parallel rows (``lm.rows``): greedy completions are split
            between its ranks and their scores gathered (None: one process).
    """
    ev = task.evaluation
    index = np.repeat(np.arange(len(ev.prompts)), samples).tolist()
    # greedy completions split between the ranks (the draws of samples are one process's)
    rows = rows if rows is not None and rng is None else Rows()
    mine = rows.evaluated(index)
    drawn = _completions(model, ev, mine, t_max, chunk, temperature, rng)
    correct, rewards, lengths, examples = [], [], [], []
    for start in range(0, len(mine), chunk):
        part = mine[start : start + chunk]
        completions, ended, length = (x[start : start + chunk] for x in drawn)
        r, ok = ev.rewards(part, completions, ended)
        correct.append(ev.correct(part, completions, ended, r))
        rewards.append(r[ok])
        lengths.append(np.asarray(length))
        kept = zip(part[: keep - len(examples)], completions, r, strict=False)
        examples += [(p, list(c), float(x)) for p, c, x in kept]
    correct, rewards, lengths, examples = rows.joined((correct, rewards, lengths, examples))
    examples = examples[:keep]  # every rank's scores, in prompt order
    c, r_all = np.concatenate(correct), np.concatenate(rewards)
    return Evaluation(
        accuracy=float(np.nanmean(c)) if np.isfinite(c).any() else 0.0,
        mean_reward=float(r_all.mean()) if r_all.size else float("nan"),
        mean_length=float(np.concatenate(lengths).mean()),
        completions=len(index),
        examples=examples,
    )


def _completions(
    model: nn.Module | Policy,
    ev: Task,
    rows: list[int],
    t_max: int,
    chunk: int,
    temperature: float,
    rng: np.random.Generator | None,
) -> tuple[list[list[int]], list[bool], list[int]]:
    """Each row's completion (its tokens without EOS), whether it ended, and its length.

    Greedy, the distinct prompts among ``rows`` are completed once each, ``chunk`` at a time,
    in the order they first appear; sampled, every row is drawn, in order.
    """
    prompts = [ev.prompts[i] for i in rows]
    first: dict[tuple[int, ...], int] = {}  # each distinct prompt → its number, in order
    for p in prompts if rng is None else []:
        first.setdefault(tuple(p), len(first))
    todo = list(first) if rng is None else prompts
    completions: list[list[int]] = []
    ended: list[bool] = []
    lengths: list[int] = []
    for start in range(0, len(todo), chunk):
        batch = sample(
            model,
            todo[start : start + chunk],
            vocab_size=ev.vocab_size,
            max_new_tokens=t_max,
            temperature=temperature,
            rng=rng,
            eos_id=ev.eos_id,
            prefix=True,  # the chat template's system turn, say, computed once
        )
        completions += batch.completions()
        ended += batch.ended.tolist()
        lengths += batch.lengths.tolist()
    if rng is not None:
        return completions, ended, lengths
    at = [first[tuple(p)] for p in prompts]
    return [completions[u] for u in at], [ended[u] for u in at], [lengths[u] for u in at]


__all__ = ["SHOWN", "Evaluation", "evaluate_policy", "logged"]
