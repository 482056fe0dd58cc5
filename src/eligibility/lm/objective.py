r"""The loss of one optimiser step: the run's settings mapped onto ``eligibility.torch``'s losses.

Nothing is composed here: the reward placement of the KL is
:func:`~eligibility.torch.kl_penalised_rewards`, the advantages
:func:`~eligibility.torch.group_advantages`, and the loss
:func:`~eligibility.torch.sequence_reinforce_loss` (the first step on a batch, on-policy) or
:func:`~eligibility.torch.off_policy_loss` (a further step, at θ ≠ θ_old), which take the same
aggregation and KL rows and compose them by one function. With an importance-sampling mode
(``lm.importance``) each token's advantage term is weighted by w̃, detached, as TRL weights its
per-token policy loss (the KL terms unweighted, as TRL's).
"""

from __future__ import annotations

import torch

from eligibility.lm.importance import importance_weight
from eligibility.torch import (
    group_advantages,
    kl_penalised_rewards,
    off_policy_loss,
    options,
    sequence_reinforce_loss,
)
from eligibility.torch.offpolicy import ratio_diagnostics


def loss(
    logps: torch.Tensor,
    rewards: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    group_size: int,
    baseline: str,
    scale: str,
    aggregation: str,
    max_completion_length: int,
    kl: str,
    beta: float,
    ref_logps: torch.Tensor | None,
    scorable: torch.Tensor | None = None,
    importance_sampling: str = "none",
    importance_sampling_cap: float = 3.0,
    sampler_logps: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss of the first step on a batch (on-policy), and the advantages Aᵢ it used.

    Args:
        logps: [N, T] log π_θ of the completion tokens (differentiable).
        rewards: [N] R_i, groups of ``group_size`` consecutive completions of one prompt.
        completion_mask: [N, T].
        group_size: G.
        baseline: a baseline row of :mod:`eligibility.torch.options`.
        scale: a scale row (``none``: no scaling).
        aggregation: an aggregation row: how token terms become one number.
        max_completion_length: T_max (the constant normalisers').
        kl: a KL row (``none``: no KL term, β unused; ``sequence-reward``: R̃ = R − β D).
        beta: β, the KL's weight.
        ref_logps: [N, T] log π_ref of the tokens (no gradient); None when ``kl`` is ``none``.
        scorable: [N] bool, False for a completion no reward function scored: its advantage
            is 0 (TRL's rule), so only the KL term (if any) moves it.
        importance_sampling: a ``lm.importance.MODES`` name: ``none`` (``logps`` are the
            distribution sampled), or the weight w̃ of each token's advantage term, π/q
            truncated or masked at ``importance_sampling_cap``, ``logps`` being π's.
        importance_sampling_cap: C.
        sampler_logps: [N, T] ln q, the log-probs the sampler drew each token with (needed
            with a mode).
    """
    a, kl = _advantages(logps, rewards, completion_mask, group_size, baseline, scale, kl, beta,
                        ref_logps, scorable)  # fmt: skip
    w = _weight(logps, sampler_logps, completion_mask, importance_sampling, importance_sampling_cap)
    a = a if w is None else a[:, None] * w
    value = sequence_reinforce_loss(
        logps, a, completion_mask, aggregation=aggregation,
        max_completion_length=max_completion_length, kl=kl, beta=beta, ref_logps=ref_logps,
    )  # fmt: skip
    return value, a


def reuse_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    rewards: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    group_size: int,
    baseline: str,
    scale: str,
    aggregation: str,
    max_completion_length: int,
    kl: str,
    beta: float,
    ref_logps: torch.Tensor | None,
    scorable: torch.Tensor | None = None,
    importance_sampling: str = "none",
    importance_sampling_cap: float = 3.0,
    sampler_logps: torch.Tensor | None = None,
    ratio: str,
    clip: float | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""The loss of a further step on a batch drawn at θ_old, and TRL's ratio diagnostics.

    The arguments of :func:`loss`, and ``old_logps`` (θ_old's, detached), the ratio π_θ/π_old
    of ``ratio`` and, if ``clip`` is set, PPO's clip at ε = ``clip``. The KL is taken at θ,
    where this step is. The defaults (the sequence product, no clip, ``sequence-sum``,
    ``reward-to-go``) keep E[−∇loss] = ∇J(θ) at every step: E_{o∼π_old}[s g(o)] =
    E_{o∼π_θ}[g(o)], s = π_θ(o)/π_old(o), g the on-policy estimator at θ. An importance-sampling
    mode weights each token's advantage by w̃ of π_old/q (TRL's, taken once per batch).
    """
    a, kl = _advantages(logps, rewards, completion_mask, group_size, baseline, scale, kl, beta,
                        ref_logps, scorable)  # fmt: skip
    w = _weight(old_logps, sampler_logps, completion_mask, importance_sampling,
                importance_sampling_cap)  # fmt: skip
    a = a if w is None else a[:, None] * w
    eps = 0.2 if clip is None else clip
    value = off_policy_loss(
        logps, old_logps, a, completion_mask, ratio=ratio,
        surrogate="ratio" if clip is None else "ppo-clip", eps_low=eps, aggregation=aggregation,
        max_completion_length=max_completion_length, kl=kl, beta=beta, ref_logps=ref_logps,
    )  # fmt: skip
    diag = ratio_diagnostics(logps, old_logps, a, completion_mask, ratio=ratio, eps_low=eps)
    return value, diag


def moving(
    rewards: torch.Tensor,
    *,
    group_size: int,
    baseline: str,
    scale: str,
    kl: str,
    scorable: torch.Tensor | None = None,
    **settings: object,
) -> torch.Tensor | None:
    """[N] bool: the rows whose terms of the first step's loss can move θ (None: every row).

    Without a KL term row i's terms are Σₜ wᵢ,ₜ Aᵢ ℓᵢ,ₜ (w: the aggregation's normaliser and an
    importance weight, constants), so where Aᵢ = 0 exactly its gradient is 0 at every θ,
    whatever its log-probs: it need not be scored (a group tied at one reward, a completion no
    reward function scored), and where no row moves θ the scoring pass is skipped (a sparse
    reward's wait). A KL term moves every row.
    """
    if kl != "none":
        return None
    return _scored(rewards, group_size, baseline, scale, scorable) != 0


def _weight(
    logps: torch.Tensor,
    sampler_logps: torch.Tensor | None,
    mask: torch.Tensor,
    mode: str,
    cap: float,
) -> torch.Tensor | None:
    """w̃ [N, T] of ``lm.importance`` (None: mode ``none``), or a ValueError without ln q."""
    if mode == "none":
        return None
    if sampler_logps is None:
        raise ValueError(f"importance_sampling={mode!r} needs sampler_logps (the sampler's ln q)")
    return importance_weight(logps, sampler_logps, mask, mode, cap)


def _scored(
    rewards: torch.Tensor,
    group_size: int,
    baseline: str,
    scale: str,
    scorable: torch.Tensor | None,
) -> torch.Tensor:
    """The group advantages Aᵢ of ``rewards``, 0 where a completion was not scorable."""
    a = group_advantages(rewards, group_size, baseline=baseline, scale=scale)
    return a if scorable is None else torch.where(scorable, a, torch.zeros_like(a))


def _advantages(
    logps: torch.Tensor,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    group_size: int,
    baseline: str,
    scale: str,
    kl: str,
    beta: float,
    ref_logps: torch.Tensor | None,
    scorable: torch.Tensor | None,
) -> tuple[torch.Tensor, str]:
    """Aᵢ (0 where unscorable), and the KL row the loss then takes (``none`` once in R̃)."""
    if options.row("kl", kl).placement == "reward":  # R̃ = R − β D(θ), before the baseline
        rewards = kl_penalised_rewards(rewards, logps, ref_logps, mask, beta=beta)  # type: ignore[arg-type]
        kl = "none"
    return _scored(rewards, group_size, baseline, scale, scorable), kl
