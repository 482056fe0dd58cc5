r"""The loss of one update: group advantages, then the sequence REINFORCE loss (one call each).

Everything here delegates to ``eligibility.torch``'s sequence losses; this module only maps the
run's settings onto them, so the trainer calls :func:`loss` and nothing else.
"""

from __future__ import annotations

import torch

from eligibility.torch import formulas, group_advantages, options, sequence_reinforce_loss


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
    """
    if options.row("kl", kl).placement == "reward":  # R̃ = R − β D, before the baseline
        rewards = rewards - beta * formulas.kl_sequence(logps, ref_logps, completion_mask)
        kl = "none"
    a = group_advantages(rewards, group_size, baseline=baseline, scale=scale)
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
