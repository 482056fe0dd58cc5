"""The exact problems as Gymnasium environments, so the trainer's collector can run on them.

Each environment samples with its own ``np_random`` (seeded through ``reset(seed=...)``), pays
the problem's reward, and ends episodes exactly where the exact solution assumes they end:
on entering a terminal state (MDPs) or after one step (bandits). Nothing is ever truncated, so
no episode is cut short of the return the exact J counts.
"""

from __future__ import annotations

import bisect
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces

from eligibility.lab.mdp import FiniteMDP

_ONE = np.ones(1)
"""The bandits' observation: one constant feature, so logits z = W₀·1 + b₀."""


def _draw(cdf: list[float], u: float) -> int:
    """Inverse-CDF draw of an index from one row of cumulative probabilities.

    ``np.searchsorted(cdf, u · cdf[-1], side="right")`` on a list, by ``bisect`` (the same
    comparisons, without a NumPy call on every step of every episode).
    """
    return min(bisect.bisect_right(cdf, u * cdf[-1]), len(cdf) - 1)


class MDPEnv(gymnasium.Env):
    """A :class:`~eligibility.lab.mdp.FiniteMDP` as an environment: obs φ(s), ``Discrete(A)``.

    Optionally Gaussian reward noise of standard deviation ``reward_std`` on R[s, a], and the
    observations' ``dtype`` (float64 by default; ``eligibility check`` uses float32).

    ``info["state"]`` carries the true state s (the policy only ever sees φ(s)). An episode
    terminates on entering a terminal state and is never truncated; the MDP's check guarantees
    a terminal state is reachable from every state, so episodes end with probability 1.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(
        self, mdp: FiniteMDP, *, reward_std: float = 0.0, dtype: type = np.float64
    ) -> None:
        self.mdp = mdp
        self.reward_std = float(reward_std)
        self._phi = np.asarray(mdp.phi, dtype=dtype)
        d = mdp.n_features
        self.observation_space = spaces.Box(-np.inf, np.inf, (d,), dtype=dtype)
        self.action_space = spaces.Discrete(mdp.n_actions)
        # plain lists of the same float64 values: a step reads them without NumPy's overhead
        self._cdf_start = np.cumsum(mdp.rho0).tolist()
        self._cdf_next = np.cumsum(mdp.P, axis=2).tolist()
        self._R = np.asarray(mdp.R, dtype=np.float64).tolist()
        self._terminal = np.asarray(mdp.terminal, dtype=bool).tolist()
        self._s = -1

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """s₀ ~ ρ₀; returns (φ(s₀), {"state": s₀})."""
        super().reset(seed=seed)
        self._s = _draw(self._cdf_start, self.np_random.random())
        return self._phi[self._s].copy(), {"state": self._s}

    def step(self, action: Any):
        """Draw s' ~ P[s, a, ·]; reward R[s, a]; terminated when s' is terminal."""
        s, a = self._s, int(action)
        if s < 0 or self._terminal[s]:
            raise RuntimeError("step() called before reset() or after the episode ended")
        reward = self._R[s][a]
        if self.reward_std:
            reward += self.reward_std * float(self.np_random.standard_normal())
        self._s = _draw(self._cdf_next[s][a], self.np_random.random())
        terminated = self._terminal[self._s]
        return self._phi[self._s].copy(), reward, terminated, False, {"state": self._s}


class BanditEnv(gymnasium.Env):
    """A one-step episode: obs [1], any action space, reward r(a) + σ_r ε with ε ~ N(0, 1).

    Args:
        action_space: ``Discrete(K)`` (categorical), ``MultiBinary(n)`` (Bernoulli units) or an
            unbounded ``Box(d)`` (Gaussian).
        mean_reward: r(a), the mean reward of an action as the env receives it.
        reward_std: σ_r, the standard deviation of the zero-mean reward noise.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, action_space: spaces.Space, mean_reward: Any, reward_std: float) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, (1,), dtype=np.float64)
        self.action_space = action_space
        self._mean_reward = mean_reward
        self._reward_std = float(reward_std)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Returns ([1.0], {})."""
        super().reset(seed=seed)
        return _ONE.copy(), {}

    def step(self, action: Any):
        """Reward r(a) + noise; the episode terminates after this one step."""
        reward = float(self._mean_reward(np.asarray(action)))
        if self._reward_std:
            reward += self._reward_std * float(self.np_random.standard_normal())
        return _ONE.copy(), reward, True, False, {}


__all__ = ["BanditEnv", "MDPEnv"]
