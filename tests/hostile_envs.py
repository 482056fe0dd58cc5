"""Envs that misbehave, as a user's might: each must give one line naming the env, never a hang.

Imported through ``hostile_envs:Id`` ids (the tests directory on the path). All but
``NeverEnds-v0`` are registered with a time limit of 50 steps.
"""

from __future__ import annotations

import os
import signal
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class _Base(gym.Env):
    """Box(4) observations, 2 actions, reward 1, 10 steps; the subclasses break one thing."""

    length = 10

    def __init__(self):
        self.observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float64)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def obs(self):
        return np.full(4, self.t / 10.0)

    def reward(self):
        return 1.0

    def info(self):
        return {}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.obs(), self.info()

    def step(self, action):
        self.t += 1
        return self.obs(), self.reward(), self.t >= self.length, False, self.info()


class NeverEnds(_Base):
    def step(self, action):
        self.t += 1
        return self.obs(), 0.0, False, False, {}


class NanObs(_Base):
    def obs(self):
        x = super().obs()
        if self.t == 3:
            x[2] = np.nan
        return x


class InfReward(_Base):
    def reward(self):
        return np.inf if self.t == 2 else 1.0


class HugeReward(_Base):
    def reward(self):
        return 1e308


class LargeReward(_Base):
    """1e200 per step: every sum is finite, the squares of the gradient are not."""

    def reward(self):
        return 1e200 * (1 + self.t % 2)


class NoValidAction(_Base):
    def info(self):
        return {"action_mask": np.array([self.t != 2, self.t != 2], dtype=np.int8)}


class AssertStep(_Base):
    def step(self, action):
        assert self.t < 3, "the cart left the track"
        return super().step(action)


class NoSeedReset(_Base):
    def reset(self):  # the old signature, on purpose
        self.t = 0
        return self.obs(), {}


class OldGym(_Base):
    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self.obs()

    def step(self, action):
        self.t += 1
        return self.obs(), 1.0, self.t >= 10, {}


class WrongShape(_Base):
    def obs(self):
        return np.zeros(3)


class ShortTuple(_Base):
    def step(self, action):
        self.t += 1
        return self.obs(), 1.0, False


class ObjectObs(_Base):
    def obs(self):
        return np.array([None, "a", 1, 2.0], dtype=object)


class StringReward(_Base):
    def reward(self):
        return "1"


class RaisesOnClose(_Base):
    def close(self):
        raise RuntimeError("the simulator's socket is already closed")


HOSTILE = {
    "NanObs-v0": NanObs,
    "InfReward-v0": InfReward,
    "HugeReward-v0": HugeReward,
    "LargeReward-v0": LargeReward,
    "NoValidAction-v0": NoValidAction,
    "AssertStep-v0": AssertStep,
    "NoSeedReset-v0": NoSeedReset,
    "OldGym-v0": OldGym,
    "WrongShape-v0": WrongShape,
    "ShortTuple-v0": ShortTuple,
    "ObjectObs-v0": ObjectObs,
    "StringReward-v0": StringReward,
    "RaisesOnClose-v0": RaisesOnClose,
}

if "NeverEnds-v0" not in gym.envs.registry:
    gym.register("NeverEnds-v0", entry_point=NeverEnds)  # no max_episode_steps, on purpose
    for _id, _cls in HOSTILE.items():
        gym.register(_id, entry_point=_cls, max_episode_steps=50)


class Zero(_Base):
    """Reward 0 at every step: every return, and every evaluation, is exactly 0.0."""

    def reward(self):
        return 0.0


class BoxF32(_Base):
    """Box actions in float32 (the policy's normal head draws float64)."""

    def __init__(self):
        super().__init__()
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)


class Sleepy(_Base):
    """Each step sleeps ``pause`` seconds: a slow simulator, for signals mid-batch."""

    length = 10_000

    def __init__(self, pause: float = 0.02):
        super().__init__()
        self.pause = pause

    def step(self, action):
        time.sleep(self.pause)
        return super().step(action)


_STEPS: dict[str, int] = {}


class Kamikaze(_Base):
    """Sends SIGTERM to its own process at the ``at``-th step of all ``tag`` instances together.

    Ten steps an episode, so where the signal lands (a batch, an evaluation) is known in advance.
    """

    def __init__(self, at: int = 50, tag: str = "", sig: int = signal.SIGTERM):
        super().__init__()
        self.at, self.tag, self.sig = at, tag, sig

    def step(self, action):
        _STEPS[self.tag] = _STEPS.get(self.tag, 0) + 1
        if _STEPS[self.tag] == self.at:
            os.kill(os.getpid(), self.sig)
        return super().step(action)


def wide_module(obs_dim: int, n_out: int):
    """A user's policy network with one output too many."""
    import torch

    return torch.nn.Linear(obs_dim, n_out + 1).double()


if "Plain-v0" not in gym.envs.registry:
    for _id, _cls in {"Plain-v0": _Base, "Zero-v0": Zero, "BoxF32-v0": BoxF32}.items():
        gym.register(_id, entry_point=_cls, max_episode_steps=50)
    gym.register("Kamikaze-v0", entry_point=Kamikaze, max_episode_steps=50)
    gym.register("Sleepy-v0", entry_point=Sleepy)
