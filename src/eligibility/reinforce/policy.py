"""A trained policy to act with: ``policy.predict(obs)``, observations as the env gives them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eligibility.reinforce.config import Config
from eligibility.reinforce.envs import EnvSpaces


@dataclass
class Policy:
    """π(· | s) of a run: the agent's network, the env's observation map and action head.

    Attributes:
        config: the run's settings.
        agent: the backend's agent (``agent.act`` takes flattened rows).
        spaces: the observation map and the action head.
        rng: the generator of sampled actions (``deterministic=False``).
    """

    config: Config
    agent: Any
    spaces: EnvSpaces
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0), repr=False)

    def predict(
        self, obs: Any, deterministic: bool = True, action_mask: Any = None
    ) -> np.ndarray | Any:
        """The action for ``obs``: one observation as the env gives it, or a batch of them.

        Args:
            obs: one observation of the env's observation space (a Discrete state, a Box
                array of its shape, a tuple, a dict), or a batch with a leading dimension N
                (as a vector env gives it).
            deterministic: the distribution's mode (argmax, [z > 0], μ); False: a sample.
            action_mask: valid actions, (k,) or (N, k), True/1 where allowed (categorical
                heads); defaults to the ``action_mask`` key of a Dict observation, if any.

        Returns:
            An action the env accepts (``env.step(policy.predict(obs))``), or (N, …) actions.
        """
        obs_map = self.spaces.obs
        n = obs_map.batch_size(obs)
        x, mask = obs_map.one(obs) if n is None else obs_map.batch(obs, n)
        if action_mask is not None:
            mask = np.asarray(action_mask).astype(bool).reshape(x.shape[0], -1)
        a = self.agent.act(x, self.rng, greedy=deterministic, mask=mask)
        out = self.spaces.head.to_env(a)
        return out[0] if n is None else out
