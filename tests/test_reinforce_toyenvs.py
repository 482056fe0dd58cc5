"""Tiny Gymnasium envs for the trainer's tests (imported by the other test_reinforce* files).

* ``CountEnv``: rₜ = t + 1 and s_t = (t/10, episode marker), so a collected episode shows at a
  glance whether its steps are in order and belong together. Its natural length L ∈ {2, …, 7}
  is drawn at reset; a TimeLimit of 5 truncates the longer ones.
* ``ToyEnv``: 4 steps, obs in [−1, 1]², any action space; reward −|f(a) − target(s)|.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

COUNT_ID = "eligibility-test/Count-v0"
TOY_IDS = {
    "discrete": "eligibility-test/ToyDiscrete-v0",
    "multidiscrete": "eligibility-test/ToyMultiDiscrete-v0",
    "multibinary": "eligibility-test/ToyMultiBinary-v0",
    "box": "eligibility-test/ToyBox-v0",
}


class CountEnv(gym.Env):
    def __init__(self):
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float64)
        self.action_space = spaces.Discrete(2)
        self.t = 0
        self.length = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.length = int(self.np_random.integers(2, 8))
        return np.array([0.0, self.length], dtype=np.float64), {}

    def step(self, action):
        r = float(self.t + 1)
        self.t += 1
        terminated = self.t >= self.length
        return np.array([self.t / 10, self.length], dtype=np.float64), r, terminated, False, {}


def _space(kind):
    return {
        "discrete": spaces.Discrete(3, start=1),
        "multidiscrete": spaces.MultiDiscrete([2, 3]),
        "multibinary": spaces.MultiBinary(3),
        "box": spaces.Box(-1.0, 1.0, (2,), np.float64),
    }[kind]


class ToyEnv(gym.Env):
    def __init__(self, kind="discrete"):
        self.kind = kind
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float64)
        self.action_space = _space(kind)
        self.t = 0
        self.s = np.zeros(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.s = self.np_random.uniform(-1, 1, 2)
        return self.s.copy(), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action).astype(self.action_space.dtype)), (
            action
        )
        x = float(np.sum(np.asarray(action, dtype=np.float64)))
        target = 1.0 + self.s[0]  # the best action depends on the state
        r = -abs(x - target)
        self.t += 1
        self.s = self.np_random.uniform(-1, 1, 2)
        return self.s.copy(), r, self.t >= 4, False, {}


def register() -> None:
    if COUNT_ID not in gym.envs.registry:
        gym.register(COUNT_ID, entry_point=CountEnv, max_episode_steps=5)
        for kind, env_id in TOY_IDS.items():
            gym.register(env_id, entry_point=ToyEnv, kwargs={"kind": kind})


register()


# -- the toy envs themselves: the other tests trust what these say they are ----------------------


@pytest.mark.filterwarnings("ignore:.*infinity:UserWarning")  # CountEnv's unbounded Box, on purpose
def test_every_toy_env_passes_gymnasiums_checker():
    from gymnasium.utils.env_checker import check_env

    for env_id in (COUNT_ID, *TOY_IDS.values()):
        check_env(gym.make(env_id, disable_env_checker=True).unwrapped, skip_render_check=True)


def test_count_env_episodes_count_up_and_the_long_ones_are_truncated_at_5():
    env = gym.make(COUNT_ID)
    lengths = set()
    for seed in range(60):
        obs, _ = env.reset(seed=seed)
        natural, rewards, ended = int(obs[1]), [], False
        while not ended:
            obs, r, term, trunc, _ = env.step(0)
            rewards.append(r)
            assert obs[0] == len(rewards) / 10 and obs[1] == natural  # in order, one episode
            ended = term or trunc
        lengths.add(len(rewards))
        assert rewards == [float(t + 1) for t in range(min(natural, 5))]
        assert (term, trunc) == (natural <= 5, natural >= 5)  # at 5: both
    assert lengths == {2, 3, 4, 5}


def test_toy_env_reward_is_minus_the_distance_to_the_state_dependent_target():
    env = ToyEnv("box")
    s, _ = env.reset(seed=0)
    _, r, term, _, _ = env.step(np.array([0.25, 0.5]))
    assert r == -abs(0.75 - (1.0 + s[0])) and not term
