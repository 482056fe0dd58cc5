"""Episodes of several turns: the model acts, the world answers, the model acts again.

``episode``: an episode's tokens (the model's and the world's) and per-turn rewards, and a
batch of them. Their loss is every batch's (``lm.objective``), their tokens credited per turn
(``lm.credit``).
"""

from eligibility.lm.episodes.episode import WEIGHTINGS, Episode, Episodes, batch_of

__all__ = ["WEIGHTINGS", "Episode", "Episodes", "batch_of"]
