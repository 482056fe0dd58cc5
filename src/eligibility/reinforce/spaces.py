r"""Gymnasium spaces → the policy's input and output: two explicit maps, nothing else chooses.

Actions, :func:`head_for_space` (the heads are in :mod:`eligibility.reinforce.heads`):

=====================  ===========================================  =========================
space                  distribution                                  network output z
=====================  ===========================================  =========================
``Discrete(n)``        categorical, π = softmax(z)                   n logits
``MultiDiscrete(k)``   independent categoricals, one per entry       Σ kᵢ logits
``MultiBinary(n)``     independent Bernoullis, p = σ(z)              n logits
``Box(d)``             diagonal normal N(μ = z, σ = e^{s_σ})         d means; s_σ = ln σ is a
                                                                     state-independent parameter
``Box(d)``, finite     Beta(α, β) per dimension on [low, high]       2d: α = 1 + softplus(z_α),
bounds, ``beta``       (``continuous="beta"``)                       β = 1 + softplus(z_β)
=====================  ===========================================  =========================

Observations, :func:`observation_map`: Gymnasium's own ``spaces.flatten`` — ``Box`` of any
shape flattened, ``Discrete`` one-hot, ``MultiDiscrete`` one-hot per entry, ``MultiBinary`` 0/1,
``Tuple`` and ``Dict`` each part flattened and concatenated. An ``action_mask`` key of a Dict
observation is not an input: it is the mask of the categorical head.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from eligibility.reinforce.heads import (
    BOX_HEADS,
    BernoulliHead,
    CategoricalHead,
    Head,
    MultiCategoricalHead,
)

__all__ = ["Head", "ObservationMap", "head_for_space", "obs_dim_for_space", "observation_map"]

MASK_KEY = "action_mask"
"""The Dict-observation key (and ``info`` key, Gymnasium's convention) of an action mask."""


def _discrete(space: Any) -> Head:
    return CategoricalHead(int(space.n), (), start=int(space.start))


def _multi_discrete(space: Any) -> Head:
    nvec = tuple(int(k) for k in np.ravel(space.nvec))
    start = tuple(int(s) for s in np.ravel(space.start))
    return MultiCategoricalHead(sum(nvec), tuple(space.shape), nvec=nvec, start=start)


def _multi_binary(space: Any) -> Head:
    return BernoulliHead(int(np.prod(space.shape)), tuple(space.shape))


def _box(space: Any, continuous: str = "normal") -> Head:
    if not np.issubdtype(space.dtype, np.floating):
        raise ValueError(f"unsupported action space {space!r}: Box actions must be floating")
    head = BOX_HEADS.get(continuous)
    if head is None:
        raise ValueError(
            f"--continuous-head must be one of {', '.join(BOX_HEADS)}, got {continuous!r}"
        )
    low = tuple(float(x) for x in np.ravel(space.low))
    high = tuple(float(x) for x in np.ravel(space.high))
    d = int(np.prod(space.shape))
    if head.bounded and not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        unbounded = ", ".join(name for name, h in BOX_HEADS.items() if not h.bounded)
        raise ValueError(
            f"--continuous-head {continuous} needs finite action bounds, and {space!r} has "
            f"infinite ones; use --continuous-head {unbounded}"
        )
    return head(head.outputs_per_dim * d, tuple(space.shape), low=low, high=high)


def _head_table() -> dict[type, Callable[[Any], Head]]:
    from gymnasium import spaces

    return {
        spaces.Discrete: _discrete,
        spaces.MultiDiscrete: _multi_discrete,
        spaces.MultiBinary: _multi_binary,
        spaces.Box: _box,
    }


def head_for_space(space: Any, continuous: str = "normal") -> Head:
    """The one map from a Gymnasium action space to the policy distribution used for it.

    ``Discrete`` → categorical (logits); ``MultiDiscrete`` → independent categoricals;
    ``MultiBinary`` → independent Bernoullis (logits); ``Box`` → diagonal normal with a
    state-independent log standard deviation, actions clipped to the bounds at the env, or,
    with ``continuous="beta"``, a Beta policy on the (finite) bounds themselves.

    Raises:
        ValueError: any other space (``Dict``, ``Tuple``, ``Text``, ...), named in the message.
    """
    make = _head_table().get(type(space))
    if make is None:
        raise ValueError(
            f"unsupported action space {space!r}: REINFORCE here supports Discrete, "
            "MultiDiscrete, MultiBinary and Box"
        )
    return make(space, continuous) if make is _box else make(space)


def _check_flattenable(space: Any, whole: Any) -> None:
    from gymnasium import spaces

    if isinstance(space, spaces.Tuple):
        for sub in space.spaces:
            _check_flattenable(sub, whole)
    elif isinstance(space, spaces.Dict):
        for sub in space.spaces.values():
            _check_flattenable(sub, whole)
    elif not isinstance(
        space, spaces.Box | spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary
    ):
        raise ValueError(
            f"unsupported observation space {whole!r}: {type(space).__name__} has no fixed-size "
            "vector form; the policy takes Box, Discrete, MultiDiscrete, MultiBinary and "
            "Tuple/Dict of them (wrap the env with a gymnasium ObservationWrapper)"
        )


@dataclass(frozen=True)
class ObservationMap:
    """Raw observations (one, or a vector env's batch) → x, float64 rows of width ``dim``.

    Attributes:
        space: the observation space, without the ``action_mask`` key.
        dim: width of x, ``gymnasium.spaces.flatdim(space)``.
        mask_key: ``"action_mask"`` when the Dict observation carries the action mask, else None.
    """

    space: Any
    dim: int
    mask_key: str | None = None

    def batch(self, obs: Any, n: int) -> tuple[np.ndarray, np.ndarray | None]:
        """x (n, dim) and the action mask (n, k) bool or None, for a batch of ``n`` observations."""
        from gymnasium import spaces
        from gymnasium.vector.utils import batch_space, iterate

        mask = None
        if self.mask_key is not None:
            mask = np.asarray(obs[self.mask_key]).astype(bool).reshape(n, -1)
            obs = {k: v for k, v in obs.items() if k != self.mask_key}
        if isinstance(self.space, spaces.Box):  # the common case: no Python loop
            return np.asarray(obs, dtype=np.float64).reshape(n, -1), mask
        if isinstance(self.space, spaces.Discrete):
            i = np.asarray(obs).reshape(n) - int(self.space.start)
            if not np.issubdtype(i.dtype, np.integer) or ((i < 0) | (i >= self.dim)).any():
                lo, hi = int(self.space.start), int(self.space.start) + self.dim - 1
                raise ValueError(
                    f"observation {np.asarray(obs).ravel().tolist()[:8]} is outside {self.space} "
                    f"(states {lo} … {hi})"
                )
            x = np.zeros((n, self.dim))
            x[np.arange(n), i] = 1.0
            return x, mask
        rows = [spaces.flatten(self.space, o) for o in iterate(batch_space(self.space, n), obs)]
        return np.stack(rows).astype(np.float64).reshape(n, self.dim), mask

    def batch_size(self, obs: Any) -> int | None:
        """None when ``obs`` is one observation of the space, else the number in the batch."""
        return _batch_size(self.space, obs)

    def one(self, obs: Any) -> tuple[np.ndarray, np.ndarray | None]:
        """x (1, dim) and mask (1, k) or None for a single observation."""
        from gymnasium import spaces

        if isinstance(self.space, spaces.Discrete):  # checked against the range, as a batch
            return self.batch(np.asarray([obs]), 1)
        mask = None
        if self.mask_key is not None:
            mask = np.asarray(obs[self.mask_key]).astype(bool).reshape(1, -1)
            obs = {k: v for k, v in obs.items() if k != self.mask_key}
        x = np.asarray(spaces.flatten(self.space, obs), dtype=np.float64)
        return x.reshape(1, self.dim), mask


def _batch_size(space: Any, obs: Any) -> int | None:
    """Read from the first leaf: one more dimension than the space's shape is a batch."""
    from gymnasium import spaces

    if isinstance(space, spaces.Tuple):
        return _batch_size(space.spaces[0], obs[0])
    if isinstance(space, spaces.Dict):
        key = next(iter(space.spaces))
        return _batch_size(space.spaces[key], obs[key])
    shape = np.shape(obs)
    if len(shape) == len(space.shape or ()):
        return None
    if len(shape) == len(space.shape or ()) + 1:
        return shape[0]
    raise ValueError(
        f"an observation of {space!r} has shape {space.shape}, or (N, *{space.shape}) for a "
        f"batch; got shape {shape}"
    )


def observation_map(space: Any) -> ObservationMap:
    """The one map from a Gymnasium observation space to the policy's input.

    Raises:
        ValueError: a space with no fixed-size vector form (``Graph``, ``Text``, ``Sequence``),
            named in the message.
    """
    from gymnasium import spaces

    mask_key = None
    if isinstance(space, spaces.Dict) and MASK_KEY in space.spaces:
        mask_key = MASK_KEY
        space = spaces.Dict({k: v for k, v in space.spaces.items() if k != MASK_KEY})
    _check_flattenable(space, space)
    return ObservationMap(space, int(spaces.flatdim(space)), mask_key)


def obs_dim_for_space(space: Any) -> int:
    """Width of the policy's input for observations of ``space`` (see :func:`observation_map`).

    Raises:
        ValueError: an observation space that cannot be flattened, named in the message.
    """
    return observation_map(space).dim
