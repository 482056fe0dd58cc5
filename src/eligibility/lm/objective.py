r"""The loss of one update: group advantages, then the sequence REINFORCE loss (one call each).

Everything here delegates to ``eligibility.torch``'s sequence losses; this module only maps the
run's settings onto them, so the trainer calls :func:`loss` and nothing else.
"""

from __future__ import annotations

import torch

from eligibility.torch import group_advantages, sequence_reinforce_loss


def loss(
    logps: torch.Tensor,
    rewards: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    group_size: int,
    baseline: str,
    scale: str | None,
    aggregation: str,
    max_completion_length: int,
    kl: str | None,
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
        baseline: ``rloo``, ``mean`` or ``none`` (see ``group_advantages``).
        scale: None, ``group-std`` or ``batch-std``.
        aggregation: how token terms become one number (see ``sequence_reinforce_loss``).
        max_completion_length: T_max (the constant normaliser's).
        kl: None or the KL placement (see ``sequence_reinforce_loss``).
        beta: β, the KL's weight.
        ref_logps: [N, T] log π_ref of the tokens (no gradient), when ``kl`` is set.
        scorable: [N] bool, False for a completion no reward function scored: its advantage
            is 0 (TRL's rule), so only the KL term (if any) moves it.
    """
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
