"""Evaluation: the mean return of a policy over many episodes, played all at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from eligibility.reinforce.rollout import Act, collect_episodes
from eligibility.reinforce.spaces import ObservationMap

MAX_EVAL_ENVS = 100
"""Sub-envs of an evaluation's vector env: all episodes at once, up to this many."""


def evaluate_returns(
    envs: Any,
    act: Act,
    n_episodes: int,
    *,
    seed: int | None = None,
    to_env: Callable[[np.ndarray], np.ndarray] | None = None,
    obs_map: ObservationMap | None = None,
) -> np.ndarray:
    """The undiscounted returns of ``n_episodes`` complete episodes (sub-env i plays qᵢ of them).

    The episodes of :func:`eligibility.reinforce.rollout.collect_episodes` (same quota, same
    autoreset handling, same masks), returns only.
    """
    return collect_episodes(
        envs, act, n_episodes, seed=seed, to_env=to_env, obs_map=obs_map
    ).returns
