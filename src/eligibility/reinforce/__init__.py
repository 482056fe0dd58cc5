"""Williams' episodic REINFORCE on Gymnasium: ``Config`` + ``train(config) -> TrainResult``.

>>> from eligibility.reinforce import Config, train
>>> result = train(Config.for_env("CartPole-v1", seed=0, progress=False))  # doctest: +SKIP
"""

from eligibility.reinforce.config import Config
from eligibility.reinforce.trainer import NonFiniteError, TrainResult, train

__all__ = ["Config", "NonFiniteError", "TrainResult", "train"]
