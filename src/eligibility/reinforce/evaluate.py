"""Evaluation: the mean return of a policy over many episodes, played all at once."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

import numpy as np

from eligibility.reinforce.rollout import _autoreset_mode, _quota

MAX_EVAL_ENVS = 100
"""Sub-envs of an evaluation's vector env: all episodes at once, up to this many."""


def make_vec_env(env_id: str, num_envs: int, mode: str = "auto") -> Any:
    """``gymnasium.make_vec(env_id, num_envs)``, with the env's own vector env when it has one.

    ``mode="auto"`` takes ``vector_entry_point`` (CartPole's NumPy-vectorised
    ``CartPoleVectorEnv``: all sub-envs in one array, no Python loop) where Gymnasium provides it,
    else ``sync``.

    Raises:
        ValueError: an unknown env id, with the closest registered ids.
    """
    import gymnasium as gym

    if env_id not in gym.envs.registry:
        close = difflib.get_close_matches(env_id, list(gym.envs.registry), n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown environment id {env_id!r}{hint}")
    if mode == "auto":
        has_vec = gym.envs.registry[env_id].vector_entry_point is not None
        mode = "vector_entry_point" if has_vec else "sync"
    try:
        return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode)
    except gym.error.DependencyNotInstalled as err:
        raise ValueError(f"{env_id} needs a package that is not installed: {err}") from None
    except gym.error.Error as err:
        raise ValueError(f"{env_id}: {err}") from None


def evaluate_returns(
    envs: Any,
    act: Callable[[np.ndarray], np.ndarray],
    n_episodes: int,
    *,
    seed: int | None = None,
    to_env: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """The undiscounted returns of ``n_episodes`` complete episodes (sub-env i plays qᵢ of them).

    A lean version of :func:`eligibility.reinforce.rollout.collect_episodes` that keeps only
    the returns, for evaluation (same quota and autoreset handling).
    """
    n_envs = envs.num_envs
    quota, first_id = _quota(n_episodes, n_envs)
    next_step = _autoreset_mode(envs) == "NextStep"
    obs, _ = envs.reset(seed=seed)
    obs = np.asarray(obs, dtype=np.float64).reshape(n_envs, -1)
    done = np.zeros(n_envs, dtype=np.int64)
    resetting = np.zeros(n_envs, dtype=bool)
    running = np.zeros(n_envs)
    returns = np.zeros(n_episodes)
    while (done < quota).any():
        valid = (done < quota) & ~resetting
        a = act(obs)
        obs, r, term, trunc, _ = envs.step(a if to_env is None else to_env(a))
        obs = np.asarray(obs, dtype=np.float64).reshape(n_envs, -1)
        running += np.where(valid, r, 0.0)
        ended = valid & (np.asarray(term) | np.asarray(trunc))
        returns[(first_id + done)[ended]] = running[ended]
        running[ended] = 0.0
        done += ended
        resetting = ended if next_step else np.zeros_like(ended)
    return returns
