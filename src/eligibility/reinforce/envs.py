"""The environment layer: make the vector env, map its observations and masks, play episodes.

Training, evaluation, loading and the lab all go through here. Ids take Gymnasium's forms:
``CartPole-v1``, ``module.path:EnvName-v0`` (the module is imported, which registers the env;
a run records the id, so evaluation and ``--resume`` import it again) and ids registered through
an installed package's ``gymnasium.envs`` entry points.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from eligibility.reinforce.heads import Head
from eligibility.reinforce.rollout import Batch, collect_episodes
from eligibility.reinforce.spaces import MASK_KEY, ObservationMap, head_for_space, observation_map

__all__ = ["Batch", "EnvSpaces", "collect_episodes", "make_vec_env", "resolve_id", "spaces_of"]

_EXTRAS = {"box2d": 'pip install "gymnasium[box2d]"', "mujoco": 'pip install "gymnasium[mujoco]"'}


def resolve_id(env_id: str) -> str:
    """Import the module of a ``module:Id`` id and return the registered id.

    Raises:
        ValueError: the module fails to import (its error, in one line), or the id is unknown
            (with the closest registered ids and the ``module:Id`` hint).
    """
    import gymnasium as gym

    name = env_id
    if ":" in env_id:
        module, name = env_id.split(":", 1)
        try:
            importlib.import_module(module)
        except Exception as err:  # the user's module: any error it raises is its message
            raise ValueError(
                f"cannot import {module!r} for {env_id!r}: {type(err).__name__}: {err}"
            ) from None
    if name not in gym.envs.registry:
        close = difflib.get_close_matches(name, list(gym.envs.registry), n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"unknown environment id {env_id!r}{hint} (an env of your own: "
            "'your.module:YourEnv-v0', where importing your.module registers YourEnv-v0)"
        )
    return name


def make_vec_env(
    env_id: str,
    num_envs: int,
    mode: str = "auto",
    env_kwargs: dict[str, Any] | None = None,
    **make_kwargs: Any,
) -> Any:
    """``gymnasium.make_vec(env_id, num_envs, **env_kwargs)``, the env's own vector env if any.

    ``mode="auto"`` takes ``vector_entry_point`` (CartPole's NumPy-vectorised
    ``CartPoleVectorEnv``: all sub-envs in one array, no Python loop) where Gymnasium provides it
    and no ``env_kwargs`` are given, else ``sync``.

    Raises:
        ValueError: an unknown id, a module that fails to import, a missing optional dependency
            (with the pip command), or ``env_kwargs`` the env rejects (its message).
    """
    import gymnasium as gym

    name = resolve_id(env_id)
    kwargs = {**(env_kwargs or {}), **make_kwargs}
    if mode == "auto":
        has_vec = gym.envs.registry[name].vector_entry_point is not None
        mode = "vector_entry_point" if has_vec and not kwargs else "sync"
    try:
        return gym.make_vec(name, num_envs=num_envs, vectorization_mode=mode, **kwargs)
    except gym.error.DependencyNotInstalled as err:
        pip = next((cmd for key, cmd in _EXTRAS.items() if key in str(err).lower()), None)
        how = f"; install it with: {pip}" if pip and "pip install" not in str(err) else ""
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(f"{env_id} needs a package that is not installed ({first}){how}") from None
    except gym.error.Error as err:
        raise ValueError(f"{env_id}: {err}") from None
    except TypeError as err:  # the env's constructor rejected a keyword
        raise ValueError(f"{env_id} rejected --env-kwargs {kwargs}: {err}") from None


@dataclass(frozen=True)
class EnvSpaces:
    """What a policy needs to know about an env: its observation map and its action head."""

    obs: ObservationMap
    head: Head

    @property
    def obs_dim(self) -> int:
        """Width of the policy's input."""
        return self.obs.dim


def spaces_of(envs: Any, continuous: str = "normal") -> EnvSpaces:
    """The observation map and the action head of a vector env (the two maps of spaces.py).

    ``continuous``: the head of a Box action space, ``normal`` or ``beta``.
    """
    obs = observation_map(envs.single_observation_space)
    head = head_for_space(envs.single_action_space, continuous)
    if obs.mask_key is not None and not head.maskable:
        raise ValueError(f"{MASK_KEY} in the observation needs Discrete actions, not {head.kind}")
    return EnvSpaces(obs, head)


def info_mask(info: dict[str, Any], n: int) -> np.ndarray | None:
    """``info["action_mask"]`` of a vector step as bool (n, k), or None when the env gives none."""
    if MASK_KEY not in info:
        return None
    return np.asarray(info[MASK_KEY]).astype(bool).reshape(n, -1)
