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
        agent: the backend's agent (``agent.policy.act`` takes flattened rows).
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
            An action the env accepts (``env.step(policy.predict(obs))``), or (N, …) actions,
            of the action space's dtype (``action_space.contains`` holds).

        Raises:
            ValueError: ``obs`` not of the observation space (its shape, a Discrete state out
                of range) or not finite; an ``action_mask`` of the wrong width or that allows
                no action in some row.
        """
        obs_map, head = self.spaces.obs, self.spaces.head
        n = obs_map.batch_size(obs)
        try:
            x, mask = obs_map.one(obs) if n is None else obs_map.batch(obs, n)
        except (TypeError, ValueError) as err:
            raise ValueError(f"obs is not an observation of {obs_map.space}: {err}") from None
        bad = np.argwhere(~np.isfinite(x))
        if len(bad):
            raise ValueError(
                f"obs holds {x[tuple(bad[0])]} (row {bad[0][0]}, entry {bad[0][1]} of its flat "
                "form): a policy cannot act on a non-finite observation"
            )
        if action_mask is not None:
            mask = np.asarray(action_mask).astype(bool).reshape(x.shape[0], -1)
        if mask is not None:
            if head.maskable and mask.shape[1] != head.n_out:
                raise ValueError(
                    f"action_mask has {mask.shape[1]} entries per row; the env has {head.n_out} "
                    "actions"
                )
            empty = np.flatnonzero(~mask.any(axis=1))
            if len(empty):
                raise ValueError(
                    f"action_mask allows no action (row {empty[0]}): allow at least one action"
                )
        a = self.agent.policy.act(x, self.rng, greedy=deterministic, mask=mask)
        out = head.to_env(a)
        if self.spaces.action_space is not None:
            out = out.astype(self.spaces.action_space.dtype, copy=False)
        return out[0] if n is None else out
