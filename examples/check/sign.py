"""A sign error: the loss is +Σ G ln π, so the optimiser descends J."""

from correct import loss as correct_loss


def loss(policy, episodes, gamma):
    """The negative of the correct loss."""
    return -correct_loss(policy, episodes, gamma)
