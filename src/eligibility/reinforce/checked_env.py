"""A user's env held to Gymnasium's API: each break is one line naming the env and the fix."""

from __future__ import annotations

import numbers
from typing import Any

import gymnasium as gym
import numpy as np

from eligibility.reinforce.rollout import EnvError, env_error


def _kind(x: Any) -> str:
    return f"a tuple of {len(x)}" if isinstance(x, tuple) else f"a {type(x).__name__}"


class CheckedEnv(gym.Wrapper):
    """Checks what a user's env returns against Gymnasium's API; a break is an :class:`EnvError`.

    ``reset(*, seed, options) -> (obs, info)`` and ``step(a) -> (obs, reward, terminated,
    truncated, info)``, a real-number reward, observations of the space's shape and of numbers;
    an exception in the env's own ``reset``, ``step`` or ``close`` is one line naming the env,
    the call and the place. Values (NaN, inf) are checked by the collector, which knows the step.
    """

    def __init__(self, env: Any, name: str) -> None:
        super().__init__(env)
        self.name = name

    def _call(self, call: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except EnvError:
            raise
        except TypeError as err:
            if call == "reset()" and "seed" in str(err):
                raise EnvError(
                    f"{self.name}: reset() does not take seed=: Gymnasium calls "
                    "reset(*, seed=None, options=None); define it so and call "
                    "super().reset(seed=seed)"
                ) from None
            raise env_error(self.name, call, err) from None
        except Exception as err:  # the user's env: whatever it raises is its message
            raise env_error(self.name, call, err) from None

    def _check_obs(self, obs: Any, call: str) -> None:
        space = self.observation_space
        if isinstance(space, gym.spaces.Box):
            x = np.asarray(obs)
            if x.dtype.kind not in "biuf":
                raise EnvError(
                    f"{self.name}: {call} returned an observation of dtype {x.dtype}, not numbers "
                    f"(the observation space is {space}); fix the env"
                )
            if x.shape != space.shape:
                raise EnvError(
                    f"{self.name}: {call} returned an observation of shape {x.shape} where its "
                    f"observation_space has {space.shape}; fix the env or its observation_space"
                )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        """The env's reset, checked."""
        out = self._call("reset()", self.env.reset, seed=seed, options=options)
        if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
            raise EnvError(
                f"{self.name}: reset() returned {_kind(out)}, not (obs, info): the old gym API; "
                "Gymnasium's reset returns (obs, info) and step (obs, reward, terminated, "
                "truncated, info)"
            )
        self._check_obs(out[0], "reset()")
        return out

    def step(self, action: Any) -> Any:
        """The env's step, checked."""
        out = self._call("step()", self.env.step, action)
        if not (isinstance(out, tuple) and len(out) == 5):
            old = (
                " (the old gym API: split done into terminated, truncated)" if len(out) == 4 else ""
            )
            raise EnvError(
                f"{self.name}: step() returned {_kind(out)}, not (obs, reward, terminated, "
                f"truncated, info){old}; fix the env"
            )
        reward = out[1]
        if not isinstance(reward, numbers.Real) and not (
            isinstance(reward, np.ndarray) and reward.shape == () and reward.dtype.kind in "biuf"
        ):
            raise EnvError(
                f"{self.name}: step() returned a reward of type {type(reward).__name__} "
                f"({reward!r}), not a number; return a float"
            )
        self._check_obs(out[0], "step()")
        return out

    def close(self) -> None:
        """The env's close; an exception in it is one line."""
        self._call("close()", self.env.close)
