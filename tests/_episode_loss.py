"""The one loss (``lm.objective``) called as the episodes' tests hold it: rewards per turn,
each token's turn and the weighting beside the mask, as the episodes' rollout hands them in
its :class:`~eligibility.lm.credit.Credit`."""

from __future__ import annotations

from eligibility.lm import objective
from eligibility.lm.credit import Credit


def loss(logps, turn_rewards, mask, turn, *, weighting, **settings):
    """``lm.objective.loss`` of a batch of episodes."""
    return objective.loss(logps, Credit(turn_rewards, turn, weighting), mask, **settings)


def reuse_loss(logps, old_logps, turn_rewards, mask, turn, *, weighting, **settings):
    """``lm.objective.reuse_loss`` of a batch of episodes."""
    credit = Credit(turn_rewards, turn, weighting)
    return objective.reuse_loss(logps, old_logps, credit, mask, **settings)
