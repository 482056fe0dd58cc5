"""What a fine-tuning run logs and returns, in its field's words: rewards, accuracies, tokens.

``finetune``'s :class:`~eligibility.runs.Schema` (the columns of its metrics.csv, its
TensorBoard tags, its learning curve's axes and its progress line) and its
:class:`FinetuneResult`. (No torch here: ``eligibility plot`` reads it to draw a run.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from eligibility.lm.phases import COLUMNS as TIME_COLUMNS
from eligibility.runs import RunResult, Schema, word

OFF_POLICY_COLUMNS = (
    "clip_ratio/region_mean",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "ratio/mean",
    "ratio/min",
    "ratio/max",
)
"""TRL's names of the ratio diagnostics, logged on the last step of each batch (K > 1)."""

MISMATCH_COLUMNS = (
    "sampling/ratio/mean",
    "sampling/ratio/min",
    "sampling/ratio/max",
    "sampling/ratio/outside_0.9_1.1",
    "sampling/ratio/outside_0.5_2",
    "sampling/sequence_ratio/mean",
    "sampling/sequence_ratio/min",
    "sampling/sequence_ratio/max",
    "sampling/sequence_ratio/std",
    "sampling/ess",
    "sampling/outside_kept",
)
"""The sampler–trainer mismatch of each update's scoring pass (``lm.mismatch``): the per-token
ratio ρₜ = exp(ℓₜ^score − ℓₜ^sample) of π_τ before any truncation, its sequence product ρᵢ
(its spread, and the effective sample size of the ρᵢ as weights, (Σρᵢ)²/(N Σρᵢ²) ∈ (0, 1]: a
stale sampler's, ``--max-staleness``, as much as a precision's), and the fraction of tokens
outside the scorer's kept set (empty where the scoring pass was skipped)."""

ASYNC_COLUMNS = ("async/staleness", "async/dropped")
"""The staleness of the batch learned (updates between the policy that drew it and the one it
trains: 0 in the alternating loop) and the batches dropped before it as older than
``--max-staleness`` (``lm.feed``)."""

EPISODE_COLUMNS = (
    "turns",
    "tool_calls",
    "tool_failures",
    "tool_failure_rate",
    "replies_cut",
    "episodes_cut",
    "success_stated",
)
"""A task of several turns' columns (empty for single completions): the mean turns, tool calls
and failed tool calls of an episode, the share of the batch's tool calls that failed (empty
where none was made), the share of its replies cut at the length limit
(``--max-completion-length``: a reply that did not end with EOS; ``lm.episodes.shown``), and
the share of its episodes cut at a bound (``--max-turns``, ``--max-tool-calls``, the model's
positions) before their world ended them, and the share whose success their environment
stated (``is_success``; the rest judged by their return: ``accuracy``'s and
``eval_accuracy``'s one rule)."""

COLUMNS = (
    "update",
    "tokens",
    "completions",
    "mean_reward",
    "min_reward",
    "max_reward",
    "accuracy",
    "frac_reward_zero_std",
    "eval_accuracy",
    "eval_reward",
    "mean_length",
    "incorrect_length",
    "loss",
    "entropy",
    "kl",
    "grad_norm",
    *OFF_POLICY_COLUMNS,
    *MISMATCH_COLUMNS,
    *ASYNC_COLUMNS,
    *EPISODE_COLUMNS,
    *TIME_COLUMNS,
    "wall_s",
    "tokens_per_s",
)
"""metrics.csv of a fine-tuning run: ``tokens`` and ``completions`` sampled so far, the batch's
rewards, ``accuracy`` the fraction of its completions that are correct (R = 1),
``frac_reward_zero_std`` the fraction of its groups whose G rewards are all equal (TRL's name:
a group-relative advantage is zero there, so those completions teach nothing but the KL),
``eval_accuracy`` the greedy accuracy on the held-out prompts (all of the task's without them),
``eval_reward`` the greedy completions' mean reward there, ``incorrect_length`` the
mean length of the incorrect completions, ``entropy`` the mean −ln π of the sampled tokens (an
estimate of the per-token entropy), ``kl`` the mean k1 estimate of KL(π_θ ‖ π_ref) per token
(when a KL is set); with ``--epochs-per-batch`` K > 1, the ratio's diagnostics on the batch's
last step under TRL's names (``clip_ratio/*``, ``ratio/*``); the sampler–trainer mismatch
(``sampling/*``, :data:`MISMATCH_COLUMNS`); the batch's staleness (``async/*``,
:data:`ASYNC_COLUMNS`); where the update's time went (``time/*``,
``lm.phases``); on a task of several turns, :data:`EPISODE_COLUMNS` (empty for single
completions)."""


PRODUCERS: dict[str, tuple[str, ...]] = {
    "counters": ("update", "tokens", "completions"),
    "batch": (
        "mean_reward",
        "min_reward",
        "max_reward",
        "accuracy",
        "frac_reward_zero_std",
        "mean_length",
        "incorrect_length",
    ),
    "evaluation": ("eval_accuracy", "eval_reward"),
    "update": ("loss", "entropy", "kl", "grad_norm", *OFF_POLICY_COLUMNS, *MISMATCH_COLUMNS),
    "feed": ASYNC_COLUMNS,
    "rollout": EPISODE_COLUMNS,
    "phases": TIME_COLUMNS,
    "clock": ("wall_s", "tokens_per_s"),
}
"""Who writes which of :data:`COLUMNS`: each column has one producer (:func:`metrics_row`)."""

WIDENING: dict[str, tuple[str, ...]] = {"rollout": ("rewards/", "user/")}
"""The prefixes of the columns a producer may add (``schema_of``'s ``rewards/NAME/*``; what the
user's reward functions log, ``user/NAME``, ``lm.usermetrics``): the run's own columns are
never among them."""


def metrics_row(**parts: Mapping[str, Any]) -> dict[str, Any]:
    """One update's metrics.csv row from its producers' parts, by :data:`PRODUCERS`' names.

    A part holds only its producer's declared columns (or, where :data:`WIDENING` lets it, ones
    under its prefixes): no producer can overwrite another's column. The row's order is
    :data:`COLUMNS`', the added columns before the timing ones (as :func:`schema_of` puts them).

    Raises:
        ValueError: a producer not declared, or a column it does not own (a bug here, not the
            user's: the user's own names are kept in ``user/``).
    """
    row: dict[str, Any] = {}
    for producer, part in parts.items():
        if producer not in PRODUCERS:
            raise ValueError(f"{producer!r} is not a producer of metrics.csv's columns")
        owned, prefixes = PRODUCERS[producer], WIDENING.get(producer, ())
        for column, value in part.items():
            if column not in owned and not column.startswith(prefixes):
                raise ValueError(f"{producer} wrote {column!r}, a column it does not own")
            row[column] = value
    own = [c for c in COLUMNS if c in row]
    timing = own.index(TIME_COLUMNS[0]) if TIME_COLUMNS[0] in own else len(own)
    added = [c for c in row if c not in COLUMNS]  # before the timing columns, as schema_of's
    return {c: row[c] for c in [*own[:timing], *added, *own[timing:]]}


def batch_columns(rewards: Any, correct: Any, lengths: Any, group_size: int) -> dict[str, Any]:
    """The ``batch`` producer's columns: the batch's rewards, accuracy, zero-std groups, lengths.

    ``rewards``: [N] each row's R; ``correct``: [N] bool, the run's rule of success;
    ``lengths``: [N] float, each completion's (an episode's model tokens).
    """
    wrong = ~correct
    return {
        "mean_reward": float(rewards.mean()),
        "min_reward": float(rewards.min()),
        "max_reward": float(rewards.max()),
        "accuracy": float(correct.float().mean()),
        "frac_reward_zero_std": frac_zero_std(rewards, group_size),
        "mean_length": float(lengths.mean()),
        "incorrect_length": float(lengths[wrong].mean()) if wrong.any() else None,
    }


def _info(row: dict[str, Any], recent_mean: float) -> str:
    """The progress line: the last batch's reward and accuracy, KL, speed, held-out accuracy.

    The held-out (greedy) accuracy is the last one, carried between evaluations; the KL is per
    token, to the reference. The batch's own reward, not a running mean: a collapse shows at
    the update it happens.
    """
    last = row.get("last_eval_accuracy", row["eval_accuracy"])
    ev = "" if last is None else f"  eval accuracy {last:.3f}"
    kl = "" if row.get("kl") is None else f"  kl {row['kl']:.3g}"
    return (  # what matters first: a narrow terminal keeps the first parts (runs.progress)
        f"accuracy {row['accuracy']:.3f}{ev}  reward {row['mean_reward']:.3f}{kl}  "
        f"completions {row['completions']}  {row['tokens_per_s']:.0f} tokens/s"
    )


SCHEMA = Schema(
    columns=COLUMNS,
    tags={
        "charts/mean_reward": "mean_reward",
        "charts/accuracy": "accuracy",
        "charts/frac_reward_zero_std": "frac_reward_zero_std",
        "charts/eval_accuracy": "eval_accuracy",
        "charts/eval_reward": "eval_reward",
        "charts/mean_length": "mean_length",
        "charts/incorrect_length": "incorrect_length",
        "charts/tokens_per_s": "tokens_per_s",
        "losses/policy_loss": "loss",
        "losses/entropy": "entropy",
        "losses/kl": "kl",
        "losses/grad_norm": "grad_norm",
        **{c: c for c in MISMATCH_COLUMNS},
        **{f"episodes/{c}": c for c in EPISODE_COLUMNS},
    },
    steps="tokens",
    score="mean_reward",
    evaluation="eval_accuracy",
    timing=(*TIME_COLUMNS, "wall_s", "tokens_per_s"),
    unit="tokens",
    x_label="completion tokens sampled",
    y_label="reward\n(batch mean; dots: greedy accuracy)",
    score_name="reward",
    evaluation_name="greedy accuracy",
    info=_info,
    widens=True,  # what the reward functions log (log_metric), each its own column
)
"""``finetune``'s metrics: what its RunDir writes, its learning curve and its progress show."""


def schema_of(reward_names: Sequence[str] | None) -> Schema:
    """:data:`SCHEMA` with each reward function's ``rewards/NAME/mean`` and ``/std`` (TRL's).

    A run's metrics.csv and trackers take them where its task reports its reward functions
    apart (``lm.tasks.Task.reward_names``: episodes'); they come before the timing columns.
    """
    names = (f"rewards/{n}/{s}" for n in reward_names or () for s in ("mean", "std"))
    return SCHEMA.widened(names)


@dataclass
class FinetuneResult(RunResult):
    """What a run did, in a fine-tune's words.

    :class:`~eligibility.runs.RunResult`'s ``steps``, ``samples``, ``final_eval`` and ``target``
    are ``tokens``, ``completions``, ``greedy_accuracy`` and ``target_accuracy`` here.

    Attributes:
        solved: the greedy accuracy reached ``target_accuracy``.
        tokens: completion tokens sampled in training.
        completions: completions sampled in training.
        updates: generation batches, each K = ``epochs_per_batch`` optimiser steps.
        wall_s: total wall time, evaluation included.
        eval_wall_s: the part spent in greedy evaluation.
        greedy_accuracy: the last greedy accuracy (None if none ran).
        out_dir: the run directory (None when nothing was written).
        target_accuracy: the target accuracy (None: none).
        history: one dict per update (the rows of metrics.csv, ``lm.metrics.COLUMNS``).
        already_solved: a resumed run that had met its target: nothing was trained.
        start_accuracy: the greedy accuracy before the first update (``eval_on_start``; None:
            not taken).
        model: the trained model; ``task``: the task.

    ``env_steps``, ``episodes``, ``final_eval_return`` and ``target_return``, ``train``'s
    words, name the same four numbers for code written against them.
    """

    SCHEMA: ClassVar[Schema] = SCHEMA

    start_accuracy: float | None = None
    model: Any = field(default=None, repr=False)
    task: Any = field(default=None, repr=False)  # the run's lm.tasks.Task

    tokens = word("steps", "Completion tokens sampled in training")
    completions = word("samples", "Completions sampled in training")
    greedy_accuracy = word("final_eval", "The last greedy accuracy (None if none ran)")
    target_accuracy = word("target", "The target accuracy (None: none)")
    env_steps = word("steps", "``train``'s word for :attr:`tokens`")
    episodes = word("samples", "``train``'s word for :attr:`completions`")
    final_eval_return = word("final_eval", "``train``'s word for :attr:`greedy_accuracy`")
    target_return = word("target", "``train``'s word for :attr:`target_accuracy`")


def frac_zero_std(rewards: Any, group_size: int) -> float:
    """The fraction of groups whose rewards are all equal: rewards in group order, [P·G].

    Equal exactly, not within a tolerance: a group's mean-subtracted advantage is then exactly
    zero.
    """
    r = rewards.reshape(-1, group_size)
    return int((r.max(1).values == r.min(1).values).sum()) / r.shape[0]


__all__ = [
    "COLUMNS",
    "MISMATCH_COLUMNS",
    "OFF_POLICY_COLUMNS",
    "PRODUCERS",
    "SCHEMA",
    "WIDENING",
    "FinetuneResult",
    "batch_columns",
    "frac_zero_std",
    "metrics_row",
    "schema_of",
]
