r"""The loss of one optimiser step: the run's settings mapped onto ``eligibility.torch``'s losses.

One loss for every kind of batch: a batch supplies its tokens' credit (``lm.credit``: its
rewards per turn and each token's turn; a single completion is one turn), and the loss weighs
the model's tokens, packed to the left, by their group advantages. Nothing else is composed
here: the reward placement of the KL is
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
from typing import Any, NamedTuple

import torch

from eligibility.lm.credit import Credit, packed, penalised, token_advantages, turn_advantages
from eligibility.lm.importance import importance_weight
from eligibility.torch import group_advantages, off_policy_loss, options, sequence_reinforce_loss
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
    rewards: torch.Tensor | Credit,
    completion_mask: torch.Tensor,
    settings: LossSettings | None = None,
    **given: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss of the first step on a batch (on-policy), and the advantages it used.

    Every kind of batch is this one loss: the tokens' credit is its :class:`Credit`
    (``lm.credit``), the group advantages of its returns per turn over the model's tokens.

    Args:
        logps: [N, T] log π_θ of every token after the prompt (differentiable; only the
            model's are read).
        rewards: [N] R_i of single completions (groups of ``group_size`` consecutive rows of
            one prompt), or the batch's :class:`Credit` (episodes: rewards per turn).
        completion_mask: [N, T] 1 on the model's tokens.
        settings: the :class:`LossSettings`.
        **given: its fields as keywords instead.

    Returns:
        (the loss, the advantages): Âᵢ,ₖ [N, K], each row's at each turn (a single
        completion's [N, 1], its Aᵢ), before any importance weight.
    """
    o, c = _settings(settings, given), _credit(rewards, completion_mask)
    p = _terms(logps, c, completion_mask, o)
    value = sequence_reinforce_loss(
        p.logps,
        _weighted(p, p.logps, o),
        p.mask,
        aggregation=o.aggregation,
        max_completion_length=o.max_completion_length * c.turns,
        kl=p.kl,
        beta=o.beta,
        ref_logps=p.ref_logps,
    )
    return value, p.turn_advantages


def reuse_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    rewards: torch.Tensor | Credit,
    completion_mask: torch.Tensor,
    settings: LossSettings | None = None,
    **given: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""The loss of a further step on a batch drawn at θ_old, and TRL's ratio diagnostics.

    The arguments of :func:`loss`, and ``old_logps`` (θ_old's, detached); the settings'
    ``ratio`` π_θ/π_old over the model's tokens (``sequence``: the row's product, the world's
    factors cancelling in an episode's) and, if ``clip`` is set, PPO's clip at ε = ``clip``.
    The KL is taken at θ, where this step is. The defaults (the sequence product, no clip,
    ``sequence-sum``, ``reward-to-go``) keep E[−∇loss] = ∇J(θ) at every step:
    E_{o∼π_old}[s g(o)] = E_{o∼π_θ}[g(o)], s = π_θ(o)/π_old(o), g the on-policy estimator at θ.
    An importance-sampling mode weights each token's advantage by w̃ of π_old/q (TRL's, taken
    once per batch).
    """
    o = _settings(settings, given)
    c = _credit(rewards, completion_mask)
    p = _terms(logps, c, completion_mask, o)
    old = p.pack(old_logps)
    a = _weighted(p, old, o)
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
        max_completion_length=o.max_completion_length * c.turns,
        kl=p.kl,
        beta=o.beta,
        ref_logps=p.ref_logps,
    )
    return value, ratio_diagnostics(p.logps, old, a, p.mask, ratio=o.ratio, eps_low=eps)


def live_rows(
    rewards: torch.Tensor | Credit, settings: LossSettings | None = None, **given: Any
) -> torch.Tensor | None:
    """[N] bool: the rows whose terms of the first step's loss can move θ (None: every row).

    Without a KL term row i's terms are Σₜ wᵢ,ₜ Âᵢ,ₜ ℓᵢ,ₜ (w: the aggregation's normaliser and
    an importance weight, constants). Where the row's return credits every one of its tokens
    (one turn: ``rewards`` [N] of single completions, or a :class:`Credit` of K_max = 1,
    ``Credit.returns_whole``) and its advantage Aᵢ = 0 exactly, its gradient is 0 at every θ,
    whatever its log-probs: it need not be scored (a group tied at one reward, a completion no
    reward function scored), and where no row moves θ the scoring pass is skipped (a sparse
    reward's wait). A KL term moves every row; a credit of several turns is scored whole.
    """
    o = _settings(settings, given)
    r = rewards if isinstance(rewards, torch.Tensor) else rewards.returns_whole
    if o.kl != "none" or r is None:
        return None
    return _scored(r, o) != 0


class _Terms(NamedTuple):
    """A step's terms over the model's tokens packed to the left (``lm.credit.packed``).

    Attributes:
        logps: [N, L] ℓ (differentiable).
        advantages: [N, L] Âᵢ,ₜ.
        mask: [N, L] bool.
        ref_logps: [N, L] ℓ^ref, or None (no KL term left for the loss).
        kl: the KL row left for the loss (``none`` once β Dₖ is in the rewards).
        turn_advantages: [N, K] Âᵢ,ₖ, each row's at each turn.
        where: [N, T] bool, the model's tokens (the packing's).
    """

    logps: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    ref_logps: torch.Tensor | None
    kl: str
    turn_advantages: torch.Tensor
    where: torch.Tensor

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """[N, T] values of every token → the model's, packed as ℓ is (in ℓ's dtype)."""
        return packed(x.to(self.logps.dtype), self.where)[0]


def _credit(rewards: torch.Tensor | Credit, mask: torch.Tensor) -> Credit:
    """The batch's :class:`Credit`: given, or a single completion's of ``rewards`` [N]."""
    return rewards if isinstance(rewards, Credit) else Credit.of_completions(rewards, mask)


def _terms(
    logps: torch.Tensor, c: Credit, completion_mask: torch.Tensor, o: LossSettings
) -> _Terms:
    """The terms :func:`loss` and :func:`reuse_loss` share, over the packed model tokens.

    The KL in the reward (``sequence-reward``) is β Dₖ of each turn's own tokens, taken into
    its rₖ before the returns; the advantages are ``lm.credit.token_advantages``, 0 on a row
    no reward function scored.
    """
    m, kl = completion_mask.bool(), o.kl
    r = c.turn_rewards.to(logps.dtype)
    if options.row("kl", kl).placement == "reward":  # r̃ₖ = rₖ − β Dₖ, before the baseline
        r, kl = penalised(r, logps, o.ref_logps, m, c.turn, o.beta), "none"  # type: ignore[arg-type]
    a = turn_advantages(
        r, group_size=o.group_size, baseline=o.baseline, scale=o.scale, weighting=c.weighting
    )
    if o.scorable is not None:
        a = torch.where(o.scorable[:, None], a, torch.zeros((), dtype=a.dtype))
    lp, mp = packed(logps, m)
    ap, _ = packed(token_advantages(a, c.turn), m)
    ref = None if o.ref_logps is None or kl == "none" else packed(o.ref_logps.to(lp.dtype), m)[0]
    return _Terms(lp, ap, mp, ref, kl, a, m)


def _weighted(p: _Terms, logps: torch.Tensor, o: LossSettings) -> torch.Tensor:
    """Âᵢ,ₜ w̃ᵢ,ₜ [N, L]: w̃ of π/q over the model's tokens, π's ``logps`` packed (``none``: Âᵢ,ₜ)."""
    if o.importance_sampling == "none":
        return p.advantages
    if o.sampler_logps is None:
        raise ValueError(
            f"importance_sampling={o.importance_sampling!r} needs sampler_logps (the sampler's "
            "ln q)"
        )
    w = importance_weight(
        logps, p.pack(o.sampler_logps), p.mask, o.importance_sampling, o.importance_sampling_cap
    )
    return p.advantages * w


def _scored(rewards: torch.Tensor, o: LossSettings) -> torch.Tensor:
    """The group advantages Aᵢ of ``rewards``, 0 where a completion was not scorable."""
    a = group_advantages(rewards, o.group_size, baseline=o.baseline, scale=o.scale)
    return a if o.scorable is None else torch.where(o.scorable, a, torch.zeros_like(a))
