r"""One update of ``finetune``: the optimiser steps on a batch drawn and rewarded.

    ĝ = −∇ loss(ℓ),   ℓᵢ,ₜ = ln π_θ(oᵢ,ₜ | q, oᵢ,<ₜ)  recomputed with gradients

The batch is the run's rollout's (``lm.rollout``: G completions of each of the batch's M
prompts, or G episodes, each rank its rows), and so is the loss of ℓ (the episodes' per turn):
all the update asks of what made the batch. :func:`settings` gathers the loss's arguments (the
reference's log-probs of a KL among them); :func:`update` makes the first step (on-policy: the
scoring and backward pass ``--micro-batch-size`` rows at a time, ``lm.micro``, the gradient
summed over the ranks, clipped, Adam's step) and :func:`reuse` each of the K − 1 after it
(off-policy). The loop, :func:`~eligibility.lm.trainer.finetune`, calls them in that order.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from eligibility.lm import micro, objective
from eligibility.lm.batch import Completions
from eligibility.lm.config import FinetuneConfig
from eligibility.lm.credit import Credit
from eligibility.lm.learner import Learner
from eligibility.lm.metrics import OFF_POLICY_COLUMNS
from eligibility.lm.mismatch import mismatch
from eligibility.lm.objective import LossSettings, live_rows
from eligibility.lm.rollout import Run
from eligibility.lm.sample import token_logps, truncated_token_logps
from eligibility.lm.truncation import Sampling


def settings(run: Run, batch: Completions, scorable: np.ndarray) -> LossSettings:
    """The loss's arguments for every step on ``batch``: its rows, T_max, the reference ℓ."""
    config, ref = run.config, run.ref
    ref_logps = None
    if ref is not None:  # the reference of a KL: the full π_τ
        v, tau = run.task.vocab_size, config.temperature
        with torch.no_grad(), run.phase("score"):
            ref_logps = micro.scores(
                lambda rows: token_logps(ref, rows, vocab_size=v, temperature=tau),
                batch,
                config.micro_batch_size,
                run.rows,
            )
    return LossSettings(
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


class First(NamedTuple):
    """What the first step on a batch leaves to the steps after it (:func:`reuse`).

    Attributes:
        logps: [N, T] ln π_old, the log-probs θ_old gave the batch (detached; the sampler's on
            a row not scored).
        credit: the tokens' credit (the kind's: episodes' per turn).
        live: [N] bool, the rows every step scores (None: every row; :func:`_credit`).
    """

    logps: torch.Tensor
    credit: Credit
    live: torch.Tensor | None


def update(
    run: Run, batch: Completions, rewards: torch.Tensor, loss_args: LossSettings
) -> tuple[dict[str, Any], First]:
    """The first optimiser step on a batch: the REINFORCE loss on recomputed log-probs.

    The scoring and backward pass go ``--micro-batch-size`` sequences at a time, the gradient
    accumulated (``lm.micro``: the same gradient as one pass).

    Returns:
        The update's numbers (``loss``, ``entropy``, ``kl`` (None without a KL),
        ``grad_norm``; the off-policy columns None), and what the steps after it take
        (:class:`First`).

    Raises:
        ValueError: the loss or the gradient is NaN/inf (nothing applied).
    """
    config, learner = run.config, run.learner
    mask = batch.completion_mask.bool()
    where = f"at update {run.counters['updates'] + 1}"
    ref_logps = loss_args.ref_logps
    scored = off = None  # the scoring pass's ln π_τ (None: skipped), its tokens outside K
    credit, live = _credit(run, batch, rewards, loss_args)
    if live is not None and not bool(live.any()):
        # ∇ loss = 0 exactly: no scoring pass and no step (_step's rule); the sampler's
        # log-probs are the policy's (lm.sample)
        logps, value = _finite(batch.logps, mask, config, where), torch.zeros(())
        grad_norm = 0.0
    else:
        logps, value, before = _backward(
            run, batch, lambda ell: objective.loss(ell, credit, mask, loss_args)[0], where, live
        )
        scored, off = before if before else (logps, None)  # truncated: ln π_τ before it
        with run.phase("step"):
            grad_norm = _step(learner, value, config, where)
    n_tokens = mask.sum().clamp(min=1)
    kl = None if ref_logps is None else float(((logps - ref_logps) * mask).sum() / n_tokens)
    entropy = float(-(logps * mask).sum() / n_tokens)
    stats = dict(loss=float(value), entropy=entropy, kl=kl, grad_norm=grad_norm)
    sampled = batch.logps if batch.raw_logps is None else batch.raw_logps
    if live is not None and scored is not None:  # over the rows scored
        scored, sampled, mask = scored[live], sampled[live], mask[live]
    diverge = mismatch(scored, sampled, mask, off)
    return stats | dict.fromkeys(OFF_POLICY_COLUMNS) | diverge, First(logps, credit, live)


def _credit(
    run: Run, batch: Completions, rewards: torch.Tensor, loss_args: LossSettings
) -> tuple[Credit, torch.Tensor | None]:
    """The tokens' credit (the kind's: episodes' per turn) and the rows every step scores.

    Taken once a batch, by its first step (:class:`First` hands both to the others).

    The rows whose gradient can be nonzero at every θ (Aᵢ ≠ 0 without a KL, read from the
    credit: ``lm.objective.live_rows``, at each of the K steps alike: a row's term is its ratio
    times Aᵢ); the others are not scored, their log-probs the sampler's. None: every row (a KL,
    a credit of several turns, or a truncating scorer, whose kept sets and ln π_τ before them
    are read for every row).
    """
    credit = run.rollout.credit(batch, rewards)
    live = live_rows(credit, loss_args)
    if live is not None and _trained_as_sampled(run.config) is not None and bool(live.any()):
        live = None
    return credit, live


def _scoring(run: Run) -> Callable[[Completions], micro.Scored]:
    """The trained policy's scoring pass over a batch (or a chunk of it), as ``lm.micro`` takes it.

    ℓ of each completion token under the policy sampled, truncated as the sampler truncated
    (``lm.truncation``; then with ln π_τ before it and the tokens outside the kept set, the
    mismatch's), or with ``--importance-sampling`` the full π_τ (``lm.importance``).
    """
    policy, v, tau = run.learner.policy, run.task.vocab_size, run.config.temperature
    s = _trained_as_sampled(run.config)

    def score(rows: Completions) -> micro.Scored:
        if s is None:
            return (token_logps(policy, rows, vocab_size=v, temperature=tau),)
        return tuple(truncated_token_logps(policy, rows, vocab_size=v, temperature=tau, sampling=s))

    return score


def _trained_as_sampled(config: FinetuneConfig) -> Sampling | None:
    """The truncation the trained policy is scored under (None: the full π_τ).

    The sampler's, unless an importance-sampling mode trains the full π_τ.
    """
    return Sampling.of(config) if config.importance_sampling == "none" else None


def _backward(
    run: Run,
    batch: Completions,
    loss_of: Callable[[torch.Tensor], torch.Tensor],
    where: str,
    live: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, micro.Scored]:
    """Zero the gradient, backpropagate ``loss_of`` of the policy's log-probs (``lm.micro``).

    ``live``: [N] bool, the rows whose gradient can be nonzero, the only ones scored (None: all).
    Returns the batch's log-probs, the loss and the scoring pass's companions (:func:`_scoring`).
    """
    config, policy = run.config, run.learner.policy
    score = _scoring(run)

    synced = policy.gradient_pass(score)  # its backward sums the gradient over the ranks

    def checked(rows: Completions) -> micro.Scored:  # LoRA's dropout in this pass only
        with policy.training():
            lp, *more = synced(rows)
            return (_finite(lp, rows.completion_mask.bool(), config, where), *more)

    run.learner.optimizer.zero_grad(set_to_none=True)
    size, kl = config.micro_batch_size, config.kl_term
    with run.phase("score"), policy.summing():  # the sum over the ranks overlaps the backward
        return micro.backward(
            checked,
            loss_of,
            batch,
            size=size,
            kl=kl,
            values_of=score,
            rows=run.rows,
            live=live,
            deferred=policy.deferred,
        )


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
    """One Adam step on the gradient in ``.grad``, clipped to ``--max-grad-norm``; none on 0.

    A gradient of exactly 0 (every advantage 0 and no KL: a sparse reward's wait) takes no step:
    Adam's t, m and v stay as they were. Stepped on zeros, as the Hugging Face ``Trainer`` under
    TRL steps every batch, Adam would go on moving θ by its momentum, lr·m̂/(√v̂ + ε), at every
    silent update: after a lone success at t = 1, whose own step is lr·sign(g) on every weight,
    Σₖ β₁ᵏ(1 − β₁)/(1 − β₁^(1+k)) / √(β₂ᵏ(1 − β₂)/(1 − β₂^(1+k))) ≈ 5.6 lr more over 25
    updates, one sample's direction taken about six times over with no new signal (the paired
    runs that chose this: docs/measurements/lm.md, *A sparse reward's wait*).

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
    if grad_norm == 0.0:  # the global norm: every rank agrees
        return grad_norm
    learner.optimizer.step()
    learner.steps += 1
    return grad_norm


def reuse(
    run: Run, batch: Completions, loss_args: LossSettings, first: First, k: int
) -> dict[str, float | None]:
    """Optimiser step ``k`` ≥ 2 on one batch (off-policy: θ has moved since it was drawn).

    Scores the rows the first step scored (``first.live``), and on a batch with none, whose
    gradient is 0 at every θ, takes no step.

    Returns:
        TRL's ratio diagnostics of the step over the rows scored
        (``lm.metrics.OFF_POLICY_COLUMNS``; None where no step was taken).
    """
    config = run.config
    mask, where = batch.completion_mask.bool(), f"on step {k} of a batch"
    off = dataclasses.replace(loss_args, ratio=config.ratio, clip=config.clip)
    old_logps, credit, live = first
    if live is not None and not bool(live.any()):  # ∇ loss = 0 at every θ: no pass, no step
        return dict.fromkeys(OFF_POLICY_COLUMNS)
    logps, value, _ = _backward(
        run,
        batch,
        lambda ell: objective.reuse_loss(ell, old_logps, credit, mask, off)[0],
        where,
        live,
    )
    with run.phase("step"):
        _step(run.learner, value, config, where)
    seen = mask if live is None else mask & live[:, None].to(mask.device)  # the rows scored
    return objective.reuse_loss(logps, old_logps, credit, seen, off)[1]


__all__ = ["First", "reuse", "settings", "update"]
