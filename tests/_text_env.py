"""Gymnasium environments of text for the tests: say the letter shown, twice in a row."""

from __future__ import annotations

import threading

import gymnasium as gym
from gymnasium import spaces


class Echo(gym.Env):
    """The observation is one letter of ``ab``; the reward is ½ for a reply that is that letter,
    0 otherwise; two steps (a return of 1: both said)."""

    def __init__(self):
        self.observation_space = spaces.Text(max_length=4, charset="ab")
        self.action_space = spaces.Text(max_length=4, charset="ab")
        self.t, self.letter = 0, "a"

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.letter = 0, "ab"[int(self.np_random.integers(2))]
        return self.letter, {}

    def step(self, action):
        r = 0.5 * float(action == self.letter)
        self.t += 1
        self.letter = "ab"[int(self.np_random.integers(2))]
        return self.letter, r, self.t >= 2, False, {}


class Broken(Echo):
    """Raises at every step (an environment's bug)."""

    def step(self, action):
        raise RuntimeError("the environment broke")


class Stated(Echo):
    """Pays nothing, and says at its last step that the episode succeeded (``is_success``)."""

    def step(self, action):
        obs, _, done, truncated, _ = super().step(action)
        return obs, 0.0, done, truncated, {"is_success": True} if done else {}


class Eight(Echo):
    """Ends itself at its eighth step (no registered limit)."""

    def step(self, action):
        obs, r, _, truncated, info = super().step(action)
        return obs, r, self.t >= 8, truncated, info


class Endless(Echo):
    """Never ends itself: registered with a limit of 8 steps (``LongText-v0``), and without
    one (``EndlessText-v0``, a runaway world)."""

    def step(self, action):
        obs, r, _, truncated, info = super().step(action)
        return obs, r, False, truncated, info


class Meet(Echo):
    """Each step waits until four episodes' steps have begun (none passes alone): a turn of
    four episodes completes only where their steps run at once."""

    met = threading.Barrier(4)

    def step(self, action):
        Meet.met.wait(timeout=20)
        return super().step(action)


gym.register("EchoText-v0", entry_point=Echo)
gym.register("MeetText-v0", entry_point=Meet)
gym.register("EightText-v0", entry_point=Eight)
gym.register("LongText-v0", entry_point=Endless, max_episode_steps=8)
gym.register("EndlessText-v0", entry_point=Endless)
gym.register("HalfText-v0", entry_point=Echo, reward_threshold=0.5)  # one letter of two: solved
gym.register("StatedText-v0", entry_point=Stated)
gym.register("BrokenText-v0", entry_point=Broken)
