r"""The loss of one update on episodes: the option table's rows over the model's tokens.

The model's tokens of each episode are packed to the left (their order kept, the world's
dropped), so every row of the table sees what it sees on single completions: a row of the
policy's tokens, "length" Lᵢ the model's tokens of episode i, T_max the most an episode may
have (K_max turns of at most T tokens each). Each token carries its turn's advantage

    Âᵢ,ₜ = A(G₍·,ₖ₎)ᵢ,   k the turn of token t,   Gᵢ,ₖ = Σ_{j ≥ k} rᵢ,ⱼ (``reward-to-go``)
                                                  or Σⱼ rᵢ,ⱼ for every k (``outcome``),

A the group advantage of the baseline and scale rows, taken column by column (the episodes of
a prompt are a group; a baseline from the others is independent of this one). The KL rows
placed in the loss act on the packed tokens (``reward-to-go``: the penalty of every later
token of the model, later turns included); ``sequence-reward`` puts β Dₖ, the turn's
Σₜ (ℓₜ − ℓ^ref_ₜ), into rₖ before the returns.

The sampler's options act on the packed tokens as on a completion's: an importance-sampling
mode weights each model token's advantage by w̃ of π/q (``lm.importance``; at the sequence
level the episode's Πₜ πₜ/qₜ over the model's tokens, which is π(e)/q(e): the world's factors
p(w⁽ᵏ⁾ | …) are the same under both and cancel), and a further step on the same episodes
(:func:`reuse_loss`) is :func:`~eligibility.torch.off_policy_loss`, its ratio π_θ/π_old over
the model's tokens (``sequence``: π_θ(e)/π_old(e), the world's factors cancelling again).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import torch

from eligibility.lm.episodes.episode import WEIGHTINGS
from eligibility.lm.importance import importance_weight
from eligibility.lm.objective import LossSettings
from eligibility.torch import group_advantages, kl_penalised_rewards, off_policy_loss, options
from eligibility.torch import sequence_reinforce_loss as _sequence_loss
from eligibility.torch.offpolicy import ratio_diagnostics


def returns(r: torch.Tensor, weighting: str) -> torch.Tensor:
    """Gₖ = Σ_{j ≥ k} rⱼ (``reward-to-go``) or G₁ at every k (``outcome``), [N, K] → [N, K]."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
    if weighting == "outcome":
        return r.sum(1, keepdim=True).expand_as(r)
    return r.flip(1).cumsum(1).flip(1)


def packed(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The masked entries of each row moved left in order, [N, W] → [N, L] (L = max Σ mask).

    A gather (differentiable); the mask comes back packed alike.
    """
    m = mask.bool()
    order = torch.sort((~m).to(torch.int8), dim=1, stable=True).indices
    width = max(int(m.sum(1).max()), 1)
    order = order[:, :width]
    return x.gather(1, order), m.gather(1, order)


def token_advantages(
    turn_rewards: torch.Tensor,
    turn: torch.Tensor,
    *,
    group_size: int,
    baseline: str,
    scale: str,
    weighting: str,
) -> torch.Tensor:
    """Âᵢ,ₜ = A(G₍·,ₖ₎)ᵢ for the turn k of each token, [N, K] and [N, T] → [N, T] (0 off turns).

    A is :func:`~eligibility.torch.group_advantages` of the column Gₖ of the returns.
    """
    g = returns(turn_rewards, weighting)
    a = torch.stack(
        [
            group_advantages(g[:, k], group_size, baseline=baseline, scale=scale)
            for k in range(g.shape[1])
        ],
        dim=1,
    )
    k = turn.clamp(min=0)
    return torch.where(turn >= 0, a.gather(1, k), torch.zeros((), dtype=a.dtype))


def penalised(
    turn_rewards: torch.Tensor,
    logps: torch.Tensor,
    ref_logps: torch.Tensor,
    mask: torch.Tensor,
    turn: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """r̃ₖ = rₖ − β Dₖ, Dₖ = Σ_{t ∈ turn k} (ℓₜ − ℓ^ref_ₜ) over the model's tokens (detached)."""
    m = mask.bool()
    return torch.stack(
        [
            kl_penalised_rewards(turn_rewards[:, k], logps, ref_logps, m & (turn == k), beta=beta)
            for k in range(turn_rewards.shape[1])
        ],
        dim=1,
    )


def loss(
    logps: torch.Tensor,
    turn_rewards: torch.Tensor,
    completion_mask: torch.Tensor,
    turn: torch.Tensor,
    settings: LossSettings | None = None,
    *,
    weighting: str,
    **given: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss of an update on episodes, and the per-token advantages it used ([N, T]).

    Args:
        logps: [N, T] ln π_θ of every token after the prompt (the world's are not read).
        turn_rewards: [N, K] rₖ.
        completion_mask: [N, T] 1 on the model's tokens.
        turn: [N, T] each token's turn (−1 on padding).
        settings: the step's ``lm.objective.LossSettings``, as single completions take them
            (the baseline row taken per turn column, the aggregation over the packed model
            tokens, T_max the most model tokens of an episode, ``scorable`` per episode,
            ``sampler_logps`` [N, T] ln q of every token with an importance-sampling mode:
            the weight of π/q over the model's tokens, ``sequence-*`` the episode's
            π(e)/q(e)).
        weighting: ``reward-to-go`` or ``outcome`` (:data:`WEIGHTINGS`).
        **given: the settings' fields as keywords instead (or beside them, replacing theirs).
    """
    o = _settings(settings, given)
    p = _packed_terms(logps, turn_rewards, completion_mask, turn, weighting, o)
    w = _weight(p, p.logps, o)
    value = _sequence_loss(
        p.logps,
        p.advantages if w is None else p.advantages * w,
        p.mask,
        aggregation=o.aggregation,
        max_completion_length=o.max_completion_length,
        kl=p.kl,
        beta=o.beta,
        ref_logps=p.ref_logps,
    )
    return value, p.token_advantages


def reuse_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    turn_rewards: torch.Tensor,
    completion_mask: torch.Tensor,
    turn: torch.Tensor,
    settings: LossSettings | None = None,
    *,
    weighting: str,
    **given: object,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""A further step on a batch of episodes played at θ_old, and TRL's ratio diagnostics.

    :func:`loss`'s terms (the KL at θ, where the step is) through
    :func:`~eligibility.torch.off_policy_loss` on the packed model tokens, as
    ``lm.objective.reuse_loss`` for single completions: the settings' ``ratio`` π_θ/π_old over
    the model's tokens (``sequence``: π_θ(e)/π_old(e), the world's factors cancelling) and,
    with ``clip``, PPO's clip at ε; an importance-sampling mode weights by w̃ of π_old/q. The
    defaults keep E[−∇loss] = ∇J(θ): E_{e∼π_old}[s g(e)] = E_{e∼π_θ}[g(e)],
    s = π_θ(e)/π_old(e). ``old_logps``: [N, T] θ_old's (detached); the rest as :func:`loss`.
    """
    o = _settings(settings, given)
    p = _packed_terms(logps, turn_rewards, completion_mask, turn, weighting, o)
    old = p.pack(old_logps)
    w = _weight(p, old, o)
    a = p.advantages if w is None else p.advantages * w
    eps = 0.2 if o.clip is None else o.clip
    value = off_policy_loss(
        p.logps,
        old,
        a,
        p.mask,
        ratio=o.ratio,
        surrogate="ratio" if o.clip is None else "ppo-clip",
        eps_low=eps,
        aggregation=o.aggregation,
        max_completion_length=o.max_completion_length,
        kl=p.kl,
        beta=o.beta,
        ref_logps=p.ref_logps,
    )
    return value, ratio_diagnostics(p.logps, old, a, p.mask, ratio=o.ratio, eps_low=eps)


def _settings(settings: LossSettings | None, given: dict[str, Any]) -> LossSettings:
    """``settings`` with the fields ``given`` replaced, or the settings of ``given`` alone."""
    return LossSettings(**given) if settings is None else dataclasses.replace(settings, **given)


class _Packed(NamedTuple):
    """An update's terms over the model's tokens packed to the left (:func:`packed`).

    Attributes:
        logps: [N, L] ℓ (differentiable).
        advantages: [N, L] Âᵢ,ₜ.
        mask: [N, L] bool.
        ref_logps: [N, L] ℓ^ref, or None (no KL term left for the loss).
        kl: the KL row left for the loss (``none`` once β Dₖ is in the rewards).
        token_advantages: [N, T] Âᵢ,ₜ in place (0 off the model's tokens).
        where: [N, T] bool, the model's tokens (the packing's).
    """

    logps: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    ref_logps: torch.Tensor | None
    kl: str
    token_advantages: torch.Tensor
    where: torch.Tensor

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """[N, T] values of every token → the model's, packed as ℓ is (in ℓ's dtype)."""
        return packed(x.to(self.logps.dtype), self.where)[0]


def _packed_terms(
    logps: torch.Tensor,
    turn_rewards: torch.Tensor,
    completion_mask: torch.Tensor,
    turn: torch.Tensor,
    weighting: str,
    o: LossSettings,
) -> _Packed:
    """The terms :func:`loss` and :func:`reuse_loss` share, over the packed model tokens."""
    m, kl = completion_mask.bool(), o.kl
    r = turn_rewards.to(logps.dtype)
    if options.row("kl", kl).placement == "reward":  # r̃ₖ = rₖ − β Dₖ, before the baseline
        r, kl = penalised(r, logps, o.ref_logps, m, turn, o.beta), "none"  # type: ignore[arg-type]
    a = token_advantages(
        r, turn, group_size=o.group_size, baseline=o.baseline, scale=o.scale, weighting=weighting
    )
    if o.scorable is not None:
        a = torch.where(o.scorable[:, None], a, torch.zeros((), dtype=a.dtype))
    lp, mp = packed(logps, m)
    ap, _ = packed(a, m)
    ref = None if o.ref_logps is None or kl == "none" else packed(o.ref_logps.to(lp.dtype), m)[0]
    return _Packed(lp, ap, mp, ref, kl, a, m)


def _weight(p: _Packed, logps: torch.Tensor, o: LossSettings) -> torch.Tensor | None:
    """w̃ [N, L] of π/q over the model's tokens, π's ``logps`` packed (None: mode ``none``)."""
    mode = o.importance_sampling
    if mode == "none":
        return None
    if o.sampler_logps is None:
        raise ValueError(f"importance_sampling={mode!r} needs sampler_logps (the sampler's ln q)")
    return importance_weight(
        logps, p.pack(o.sampler_logps), p.mask, mode, o.importance_sampling_cap
    )


__all__ = ["loss", "packed", "penalised", "returns", "reuse_loss", "token_advantages"]
