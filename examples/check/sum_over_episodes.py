"""A sum over episodes instead of a mean: E[ĝ] = E ∇J, a step-size matter (scaled)."""

from correct import loss as correct_loss


def loss(policy, episodes, gamma):
    """The correct loss times the number of episodes."""
    return correct_loss(policy, episodes, gamma) * len(episodes)
