"""Williams' episodic REINFORCE on Gymnasium: ``Config`` + ``train(config) -> TrainResult``.

>>> from eligibility.reinforce import Config, train
>>> config = Config.for_env("CartPole-v1", seed=0, total_steps=1000, eval_every=0, progress=False)
>>> result = train(config)  # out=None: nothing is written
>>> result.updates, result.env_steps  # the third batch would pass 1000 steps: dropped
(2, 512)
"""

from eligibility.reinforce.config import Config
from eligibility.reinforce.rollout import EnvError
from eligibility.reinforce.trainer import Interrupted, NonFiniteError, TrainResult, train

__all__ = ["Config", "EnvError", "Interrupted", "NonFiniteError", "TrainResult", "train"]
