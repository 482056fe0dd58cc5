"""A user's own envs and policy module, imported through ``byo_envs:Id`` ids and ``--module``.

* ``Obs-v0`` (``obs=...``): the same 4-step task behind every observation space; reward 1 when
  the action equals the parity of the step t, which every observation encodes.
* ``Masked-v0`` (``in_obs=False``): 4 actions, a random half of them masked at each step
  (``info["action_mask"]``, or an ``action_mask`` key of a Dict observation); taking a masked
  action raises. Reward 1 for the highest valid action.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

OBS_SPACES = {
    "box": spaces.Box(0.0, 1.0, (2, 2), np.float32),
    "discrete": spaces.Discrete(4, start=1),
    "multidiscrete": spaces.MultiDiscrete([4, 2]),
    "multibinary": spaces.MultiBinary(3),
    "tuple": spaces.Tuple((spaces.Discrete(4), spaces.Box(0.0, 1.0, (1,), np.float32))),
    "dict": spaces.Dict({"pos": spaces.Discrete(4), "flag": spaces.MultiBinary(2)}),
}


def _encode(kind: str, t: int):
    p = t % 2
    return {
        "box": np.full((2, 2), p, np.float32),
        "discrete": t + 1,
        "multidiscrete": np.array([t, p]),
        "multibinary": np.array([p, 0, 1], np.int8),
        "tuple": (t, np.array([p], np.float32)),
        "dict": {"pos": t, "flag": np.array([p, 0], np.int8)},
    }[kind]


class ObsEnv(gym.Env):
    def __init__(self, obs: str = "box"):
        if obs not in OBS_SPACES:
            raise TypeError(f"obs must be one of {sorted(OBS_SPACES)}, got {obs!r}")
        self.kind = obs
        self.observation_space = OBS_SPACES[obs]
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return _encode(self.kind, 0), {}

    def step(self, action):
        r = float(int(action) == self.t % 2)
        self.t += 1
        return _encode(self.kind, self.t % 4), r, self.t >= 4, False, {}


class MaskedEnv(gym.Env):
    def __init__(self, in_obs: bool = False):
        self.in_obs = in_obs
        state = spaces.Box(0.0, 1.0, (4,), np.float64)
        mask = spaces.MultiBinary(4)
        self.observation_space = (
            spaces.Dict({"state": state, "action_mask": mask}) if in_obs else state
        )
        self.action_space = spaces.Discrete(4)
        self.t = 0
        self.mask = np.ones(4, np.int8)

    def _observe(self):
        self.mask = np.zeros(4, np.int8)
        self.mask[self.np_random.choice(4, size=2, replace=False)] = 1
        state = self.mask.astype(np.float64)  # the policy can see which actions are valid
        if self.in_obs:
            return {"state": state, "action_mask": self.mask.copy()}, {}
        return state, {"action_mask": self.mask.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe()

    def step(self, action):
        if not self.mask[int(action)]:
            raise RuntimeError(f"masked action {action} taken (mask {self.mask})")
        r = float(int(action) == int(np.flatnonzero(self.mask).max()))
        self.t += 1
        obs, info = self._observe()
        return obs, r, False, self.t >= 5, info


def tiny_module(obs_dim: int, n_out: int):
    """A user's policy network: one linear layer in float64."""
    import torch

    return torch.nn.Sequential(torch.nn.Linear(obs_dim, n_out)).double()


gym.register("Obs-v0", entry_point=ObsEnv, max_episode_steps=10)
gym.register("Masked-v0", entry_point=MaskedEnv, reward_threshold=4.5)
