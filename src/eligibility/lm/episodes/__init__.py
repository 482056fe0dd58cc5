"""Episodes of several turns: the model acts, the world answers, the model acts again.

``episode``: an episode's tokens (the model's and the world's) and per-turn rewards, and a
batch of them; ``loss``: the update's loss over the model's tokens alone.
"""

from eligibility.lm.episodes.episode import WEIGHTINGS, Episode, Episodes, batch_of
from eligibility.lm.episodes.loss import loss

__all__ = ["WEIGHTINGS", "Episode", "Episodes", "batch_of", "loss"]
