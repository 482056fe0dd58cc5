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

from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True, eq=False)
class LossSettings:
    """What a step's loss is computed with, beside the batch's log-probs, rewards and mask.

    One declaration for :func:`loss`, :func:`reuse_loss` and :func:`live_rows`: each takes
    these as one ``settings`` object or as keywords (``loss(ell, r, m, group_size=2, …)``).

    Attributes:
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
        ratio: a further step's importance ratio π_θ/π_old (:func:`reuse_loss` only): the
            ``sequence`` product, per ``token``, or their geometric mean.
        clip: PPO's clip ε of that ratio (None: no clip; :func:`reuse_loss` only).
    """

    group_size: int
    baseline: str
    scale: str
    aggregation: str
    max_completion_length: int
    kl: str
    beta: float
    ref_logps: torch.Tensor | None
    scorable: torch.Tensor | None = None
    importance_sampling: str = "none"
    importance_sampling_cap: float = 3.0
    sampler_logps: torch.Tensor | None = None
    ratio: str = "sequence"
    clip: float | None = None


def _settings(settings: LossSettings | None, given: dict[str, Any]) -> LossSettings:
    """``settings``, or the :class:`LossSettings` of the keywords ``given`` (not both)."""
    if settings is None:
        return LossSettings(**given)
    if given:
        raise ValueError(f"give a LossSettings or keywords, not both ({', '.join(given)})")
    return settings


def loss(
    logps: torch.Tensor,
    rewards: torch.Tensor,
    completion_mask: torch.Tensor,
    settings: LossSettings | None = None,
    **given: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss of the first step on a batch (on-policy), and the advantages Aᵢ it used.

    Args:
        logps: [N, T] log π_θ of the completion tokens (differentiable).
        rewards: [N] R_i, groups of ``group_size`` consecutive completions of one prompt.
        completion_mask: [N, T].
        settings: the :class:`LossSettings`.
        **given: its fields as keywords instead.
    """
    o = _settings(settings, given)
    a, kl = _advantages(logps, rewards, completion_mask, o)
    w = _weight(logps, completion_mask, o)
    a = a if w is None else a[:, None] * w
    value = sequence_reinforce_loss(
        logps,
        a,
        completion_mask,
        aggregation=o.aggregation,
        max_completion_length=o.max_completion_length,
        kl=kl,
        beta=o.beta,
        ref_logps=o.ref_logps,
    )
    return value, a


def reuse_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    rewards: torch.Tensor,
    completion_mask: torch.Tensor,
    settings: LossSettings | None = None,
    **given: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""The loss of a further step on a batch drawn at θ_old, and TRL's ratio diagnostics.

    The arguments of :func:`loss`, and ``old_logps`` (θ_old's, detached); the settings'
    ``ratio`` π_θ/π_old and, if ``clip`` is set, PPO's clip at ε = ``clip``. The KL is taken
    at θ, where this step is. The defaults (the sequence product, no clip, ``sequence-sum``,
    ``reward-to-go``) keep E[−∇loss] = ∇J(θ) at every step: E_{o∼π_old}[s g(o)] =
    E_{o∼π_θ}[g(o)], s = π_θ(o)/π_old(o), g the on-policy estimator at θ. An importance-sampling
    mode weights each token's advantage by w̃ of π_old/q (TRL's, taken once per batch).
    """
    o = _settings(settings, given)
    a, kl = _advantages(logps, rewards, completion_mask, o)
    w = _weight(old_logps, completion_mask, o)
    a = a if w is None else a[:, None] * w
    eps = 0.2 if o.clip is None else o.clip
    value = off_policy_loss(
        logps,
        old_logps,
        a,
        completion_mask,
        ratio=o.ratio,
        surrogate="ratio" if o.clip is None else "ppo-clip",
        eps_low=eps,
        aggregation=o.aggregation,
        max_completion_length=o.max_completion_length,
        kl=kl,
        beta=o.beta,
        ref_logps=o.ref_logps,
    )
    diag = ratio_diagnostics(logps, old_logps, a, completion_mask, ratio=o.ratio, eps_low=eps)
    return value, diag


def live_rows(
    rewards: torch.Tensor, settings: LossSettings | None = None, **given: Any
) -> torch.Tensor | None:
    """[N] bool: the rows whose terms of the first step's loss can move θ (None: every row).

    Without a KL term row i's terms are Σₜ wᵢ,ₜ Aᵢ ℓᵢ,ₜ (w: the aggregation's normaliser and an
    importance weight, constants), so where Aᵢ = 0 exactly its gradient is 0 at every θ,
    whatever its log-probs: it need not be scored (a group tied at one reward, a completion no
    reward function scored), and where no row moves θ the scoring pass is skipped (a sparse
    reward's wait). A KL term moves every row.
    """
    o = _settings(settings, given)
    if o.kl != "none":
        return None
    return _scored(rewards, o) != 0


def _weight(logps: torch.Tensor, mask: torch.Tensor, o: LossSettings) -> torch.Tensor | None:
    """w̃ [N, T] of ``lm.importance`` (None: mode ``none``), or a ValueError without ln q."""
    if o.importance_sampling == "none":
        return None
    if o.sampler_logps is None:
        raise ValueError(
            f"importance_sampling={o.importance_sampling!r} needs sampler_logps (the sampler's "
            "ln q)"
        )
    return importance_weight(
        logps, o.sampler_logps, mask, o.importance_sampling, o.importance_sampling_cap
    )


def _scored(rewards: torch.Tensor, o: LossSettings) -> torch.Tensor:
    """The group advantages Aᵢ of ``rewards``, 0 where a completion was not scorable."""
    a = group_advantages(rewards, o.group_size, baseline=o.baseline, scale=o.scale)
    return a if o.scorable is None else torch.where(o.scorable, a, torch.zeros_like(a))


def _advantages(
    logps: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor, o: LossSettings
) -> tuple[torch.Tensor, str]:
    """Aᵢ (0 where unscorable), and the KL row the loss then takes (``none`` once in R̃)."""
    kl = o.kl
    if options.row("kl", kl).placement == "reward":  # R̃ = R − β D(θ), before the baseline
        rewards = kl_penalised_rewards(rewards, logps, o.ref_logps, mask, beta=o.beta)  # type: ignore[arg-type]
        kl = "none"
    return _scored(rewards, o), kl
