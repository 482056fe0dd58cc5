"""The environment layer: make the vector env, map its observations and masks, play episodes.

Training, evaluation, loading and the lab all go through here. Ids take Gymnasium's forms:
``CartPole-v1``, ``module.path:EnvName-v0`` (the module is imported, which registers the env;
a run records the id, so evaluation and ``--resume`` import it again) and ids registered through
an installed package's ``gymnasium.envs`` entry points.
"""

from __future__ import annotations

import copy
import difflib
import functools
from dataclasses import dataclass
from typing import Any

from eligibility._isolate import describe_error, import_user_module
from eligibility.reinforce.heads import Head
from eligibility.reinforce.rollout import (
    DEFAULT_MAX_EPISODE_STEPS,
    Batch,
    EnvError,
    collect_episodes,
)
from eligibility.reinforce.spaces import MASK_KEY, ObservationMap, head_for_space, observation_map

__all__ = [
    "Batch",
    "EnvSpaces",
    "check_env",
    "collect_episodes",
    "episode_limit",
    "make_vec_env",
    "resolve_id",
    "spaces_of",
]

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
            import_user_module(module)  # the current directory imports, as for finetune's
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


def episode_limit(env_id: str, max_episode_steps: int | None = None) -> tuple[int, bool]:
    """The step cap of an episode, and whether it is a time limit (episodes truncated there).

    ``max_episode_steps`` (``--max-episode-steps``) if given, else the env's registered limit,
    else :data:`~eligibility.reinforce.rollout.DEFAULT_MAX_EPISODE_STEPS`, which is no time
    limit: an episode that reaches it without ending is an error.
    """
    import gymnasium as gym

    if max_episode_steps is not None:
        return max_episode_steps, True
    own = gym.envs.registry[resolve_id(env_id)].max_episode_steps
    return (own, True) if own is not None else (DEFAULT_MAX_EPISODE_STEPS, False)


def make_vec_env(
    env_id: str,
    num_envs: int,
    mode: str = "auto",
    env_kwargs: dict[str, Any] | None = None,
    max_episode_steps: int | None = None,
    **make_kwargs: Any,
) -> Any:
    """``gymnasium.make_vec(env_id, num_envs, **env_kwargs)``, the env's own vector env if any.

    ``mode="auto"`` takes ``vector_entry_point`` (CartPole's NumPy-vectorised
    ``CartPoleVectorEnv``: all sub-envs in one array, no Python loop) where Gymnasium provides it
    and no ``env_kwargs`` are given, else ``sync``. ``max_episode_steps`` replaces the env's time
    limit. In ``sync``/``async`` mode each sub-env is wrapped in :class:`CheckedEnv`, which turns
    a broken env API into one line naming the env (it replaces Gymnasium's passive checker).

    Raises:
        ValueError: an unknown id, a module that fails to import, a missing optional dependency
            (with the pip command), or ``env_kwargs`` the env rejects (its message).
    """
    import gymnasium as gym

    from eligibility.reinforce.checked_env import CheckedEnv

    name = resolve_id(env_id)
    kwargs = {**(env_kwargs or {}), **make_kwargs}
    spec = copy.deepcopy(gym.envs.registry[name])
    if mode == "auto":
        mode = (
            "vector_entry_point" if spec.vector_entry_point is not None and not kwargs else "sync"
        )
    limit = spec.max_episode_steps if max_episode_steps is None else max_episode_steps
    wrappers: list[Any] = []
    if mode == "vector_entry_point":
        spec.max_episode_steps = limit
    else:  # the checker sits under the time limit: it sees what the env itself returns
        spec.max_episode_steps, spec.disable_env_checker = None, True
        wrappers = [functools.partial(CheckedEnv, name=env_id)]
        if limit is not None:
            wrappers.append(functools.partial(gym.wrappers.TimeLimit, max_episode_steps=limit))
    try:
        return gym.make_vec(
            spec, num_envs=num_envs, vectorization_mode=mode, wrappers=wrappers, **kwargs
        )
    except gym.error.DependencyNotInstalled as err:
        pip = next((cmd for key, cmd in _EXTRAS.items() if key in str(err).lower()), None)
        how = f"; install it with: {pip}" if pip and "pip install" not in str(err) else ""
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(f"{env_id} needs a package that is not installed ({first}){how}") from None
    except EnvError:
        raise
    except gym.error.Error as err:
        raise ValueError(f"{env_id}: {err}") from None
    except TypeError as err:  # the env's constructor rejected a keyword
        raise ValueError(f"{env_id} rejected --env-kwargs {kwargs}: {err}") from None
    except Exception as err:  # the env's own constructor failed: its error, in one line
        given = f" with --env-kwargs {kwargs}" if kwargs else ""
        text = str(err).splitlines()[0] if str(err) else ""
        raise ValueError(
            f"{env_id} could not be made{given}: {type(err).__name__}: {text}; check the values "
            "the env accepts"
        ) from None


@dataclass(frozen=True)
class EnvSpaces:
    """What a policy needs to know about an env: its observation map, its action head and space."""

    obs: ObservationMap
    head: Head
    action_space: Any = None

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
    return EnvSpaces(obs, head, envs.single_action_space)


def check_env(config: Any) -> None:
    """A sweep's check of a ``train`` config: its env is made once and its spaces are supported.

    An unknown id, a bad keyword or an unsupported space is one error before any run starts,
    not one per run later.

    Raises:
        ValueError: naming the env (and its ``env_kwargs``); the user's env's own error with
            where in its code it was raised.
    """
    import json

    with_kwargs = f" with env_kwargs {json.dumps(config.env_kwargs)}" if config.env_kwargs else ""
    try:
        envs = make_vec_env(config.env_id, 1, "sync", config.env_kwargs)
    except ValueError:
        raise
    except Exception as err:  # the user's env: whatever it raises is its message
        raise ValueError(f"{config.env_id}{with_kwargs}: {describe_error(err)}") from None
    try:
        spaces_of(envs, config.continuous_head)
    finally:
        envs.close()
