r"""The loss of one update: group advantages, then the sequence REINFORCE loss (one call each).

Everything here delegates to ``eligibility.torch``'s sequence losses; this module only maps the
run's settings onto them, so the trainer calls :func:`loss` and nothing else.
"""

from __future__ import annotations

import torch

from eligibility.torch import formulas, group_advantages, options, sequence_reinforce_loss
from eligibility.torch.offpolicy import off_policy_loss, ratio_diagnostics


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
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss whose gradient is the update, and the advantages A_i it used.

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
    """
    if options.row("kl", kl).placement == "reward":  # R̃ = R − β D, before the baseline
        rewards = rewards - beta * formulas.kl_sequence(logps, ref_logps, completion_mask)
        kl = "none"
    a = group_advantages(rewards, group_size, baseline=baseline, scale=scale)
    if scorable is not None:
        a = torch.where(scorable, a, torch.zeros_like(a))
    value = sequence_reinforce_loss(
        logps,
        a,
        completion_mask,
        aggregation=aggregation,
        max_completion_length=max_completion_length,
        kl=kl,
        beta=beta,
        ref_logps=ref_logps,
    )
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
    ratio: str,
    clip: float | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""The loss of a further step on a batch drawn at θ_old, and TRL's ratio diagnostics.

    The arguments of :func:`loss`, and: ``old_logps`` ℓ^old (θ_old's, detached), the ratio
    π_θ/π_old of ``ratio`` and, if ``clip`` is set, PPO's clip at ε = ``clip``
    (``off_policy_loss``). The KL is taken at θ, where this step is: with ``sequence-reward``
    the rewards are R − β D(θ) before the baseline, with ``reward-to-go`` the advantage of
    token t is Aᵢ − β Kᵢ,ₜ(θ), and a KL row of the loss adds β Σ w k(θ) unweighted (as TRL
    does). The defaults (the sequence product, no clip, ``sequence-sum``, ``reward-to-go``)
    keep E[−∇loss] = ∇J(θ) at every step, since for any function g of a completion
    E_{o∼π_old}[s g(o)] = E_{o∼π_θ}[g(o)], s = π_θ(o)/π_old(o), and g here is the on-policy
    estimator at θ: (1/N) Σᵢ Σₜ ∇ℓᵢ,ₜ (Aᵢ − β Kᵢ,ₜ(θ)).
    """
    row = options.row("kl", kl)
    beta = beta if row.placement else 0.0
    if beta and row.placement == "reward":
        rewards = rewards - beta * formulas.kl_sequence(logps, ref_logps, completion_mask)
    a = group_advantages(rewards, group_size, baseline=baseline, scale=scale)
    if scorable is not None:
        a = torch.where(scorable, a, torch.zeros_like(a))
    a_t = a.detach().reshape(-1, 1)
    if beta and row.placement == "advantage":
        a_t = a_t - beta * row.fn(logps, ref_logps, completion_mask)  # type: ignore[misc]
    eps = 0.2 if clip is None else clip
    value = off_policy_loss(
        logps,
        old_logps,
        a_t,
        completion_mask,
        ratio=ratio,
        surrogate="ratio" if clip is None else "ppo-clip",
        eps_low=eps,
        aggregation=aggregation,
        max_completion_length=max_completion_length,
    )
    if beta and row.placement == "loss":
        m = completion_mask
        w = options.row("aggregation", aggregation).fn(  # type: ignore[misc]
            m.to(logps.dtype), m.shape[1], max_completion_length, None
        )
        k = row.fn(logps, torch.where(m, ref_logps, logps.detach()))  # type: ignore[misc]
        value = value + beta * (w * torch.where(m, k, 0.0)).sum()
    diag = ratio_diagnostics(logps, old_logps, a, completion_mask, ratio=ratio, eps_low=eps)
    return value, diag
