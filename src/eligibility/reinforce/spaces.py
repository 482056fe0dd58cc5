r"""Action spaces → policy distributions: one explicit map, one head per distribution.

A *head* turns the network's output z (one row per state) into a distribution over actions and
answers the questions REINFORCE asks of it: sample, mode, ln π(a | s), the characteristic
eligibility e = ∂ ln π(a | s) / ∂(z, s_σ), entropy H and ∂H/∂(z, s_σ). Every formula is the
core's kernel (:mod:`eligibility.distributions`), called, not re-derived.

=====================  ===========================================  =========================
space                  distribution                                  network output z
=====================  ===========================================  =========================
``Discrete(n)``        categorical, π = softmax(z)                   n logits
``MultiDiscrete(k)``   independent categoricals, one per entry       Σ kᵢ logits
``MultiBinary(n)``     independent Bernoullis, p = σ(z)              n logits
``Box(d)``             diagonal normal N(μ = z, σ = e^{s_σ})         d means; s_σ = ln σ is a
                                                                     state-independent parameter
=====================  ===========================================  =========================

Box actions: the sample y ~ N(μ, σ²) is what the eligibility is computed at; the env receives
``clip(y, low, high)``. Clipping is part of the environment, so ln π and its gradient stay those
of the unclipped Gaussian (the estimator remains unbiased for the clipped env's return).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from eligibility.distributions import bernoulli, categorical, normal

HeadKind = Literal["categorical", "multi-categorical", "bernoulli", "normal"]


@dataclass(frozen=True)
class Head:
    """A distribution over one action space, parametrised by the network output z.

    Attributes:
        kind: which distribution.
        n_out: width of z (the network's last layer).
        action_shape: shape of one action as the env expects it.
        nvec: category counts (categorical: ``(n,)``; multi-categorical: one per entry).
        start: offset added to category indices before they reach the env (``Discrete.start``).
        low: lower bounds for Box actions (flattened), else ``None``.
        high: upper bounds for Box actions (flattened), else ``None``.
    """

    kind: HeadKind
    n_out: int
    action_shape: tuple[int, ...]
    nvec: tuple[int, ...] = ()
    start: tuple[int, ...] = ()
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None

    @property
    def has_log_std(self) -> bool:
        """True for the normal head, whose s_σ = ln σ is a parameter of the policy."""
        return self.kind == "normal"

    # -- sampling ---------------------------------------------------------------------------

    def sample(self, z: np.ndarray, log_std: np.ndarray | None, rng: np.random.Generator):
        """a ~ π(· | z), one row per state (Gumbel-max per categorical, u < σ(z), μ + σ ε)."""
        if self.kind == "categorical":
            return _sample_categorical(z, rng)
        if self.kind == "multi-categorical":
            cols = [_sample_categorical(z[:, lo:hi], rng) for lo, hi in self.segments]
            return np.stack(cols, axis=1)
        if self.kind == "bernoulli":
            return (rng.random(z.shape) < bernoulli.sigmoid(z)).astype(np.int8)
        assert log_std is not None
        return z + np.exp(log_std) * rng.standard_normal(z.shape)

    def mode(self, z: np.ndarray, log_std: np.ndarray | None = None):
        """The most probable action: argmax per categorical, [z > 0] per Bernoulli, μ for normal."""
        if self.kind == "categorical":
            return np.argmax(z, axis=1)
        if self.kind == "multi-categorical":
            return np.stack([np.argmax(z[:, lo:hi], axis=1) for lo, hi in self.segments], 1)
        if self.kind == "bernoulli":
            return (z > 0).astype(np.int8)
        return z.copy()

    def to_env(self, a: np.ndarray) -> np.ndarray:
        """The action as the env takes it: category + start, Bernoulli reshaped, Box clipped."""
        n = a.shape[0]
        if self.kind == "categorical":
            return a + self.start[0] if self.start[0] else a
        if self.kind == "multi-categorical":
            out = a + np.asarray(self.start, dtype=a.dtype) if any(self.start) else a
            return out.reshape((n, *self.action_shape))
        if self.kind == "bernoulli":
            return a.reshape((n, *self.action_shape))
        return np.clip(a, self.low, self.high).reshape((n, *self.action_shape))

    # -- the eligibility and friends --------------------------------------------------------

    def log_prob(self, z: np.ndarray, log_std: np.ndarray | None, a: np.ndarray) -> np.ndarray:
        """ln π(a | z), one value per row (a sum over independent units)."""
        if self.kind == "categorical":
            return categorical.log_prob_logits(z, a)
        if self.kind == "multi-categorical":
            return sum(
                categorical.log_prob_logits(z[:, lo:hi], a[:, i])
                for i, (lo, hi) in enumerate(self.segments)
            )
        if self.kind == "bernoulli":
            return np.sum(bernoulli.log_prob_logits(z, a.astype(z.dtype)), axis=1)
        assert log_std is not None
        return np.sum(normal.log_prob(z, np.exp(log_std), a), axis=1)

    def score(
        self, z: np.ndarray, log_std: np.ndarray | None, a: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The characteristic eligibility at the head: (∂ ln π/∂z, ∂ ln π/∂s_σ per row or None).

        categorical: e = onehot(a) − softmax(z); Bernoulli: e = a − σ(z);
        normal: e_μ = (a − μ)/σ², e_s = (a − μ)²/σ² − 1.
        """
        if self.kind == "categorical":
            return categorical.score_logits(z, a), None
        if self.kind == "multi-categorical":
            parts = [
                categorical.score_logits(z[:, lo:hi], a[:, i])
                for i, (lo, hi) in enumerate(self.segments)
            ]
            return np.concatenate(parts, axis=1), None
        if self.kind == "bernoulli":
            return bernoulli.score_logits(z, a.astype(z.dtype)), None
        assert log_std is not None
        sigma = np.exp(log_std)
        return normal.score_loc(z, sigma, a), normal.score_log_scale(z, sigma, a)

    def entropy(self, z: np.ndarray, log_std: np.ndarray | None) -> np.ndarray:
        """H(π(· | z)), one value per row (a sum over independent units)."""
        if self.kind == "categorical":
            return categorical.entropy_logits(z)
        if self.kind == "multi-categorical":
            return sum(categorical.entropy_logits(z[:, lo:hi]) for lo, hi in self.segments)
        if self.kind == "bernoulli":
            return np.sum(bernoulli.entropy_logits(z), axis=1)
        assert log_std is not None
        h = np.sum(normal.entropy(np.exp(log_std)))
        return np.full(z.shape[0], h)

    def entropy_grad(
        self, z: np.ndarray, log_std: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(∂H/∂z, ∂H/∂s_σ per row or None); the normal's H does not depend on μ."""
        if self.kind == "categorical":
            return categorical.entropy_grad_logits(z), None
        if self.kind == "multi-categorical":
            parts = [categorical.entropy_grad_logits(z[:, lo:hi]) for lo, hi in self.segments]
            return np.concatenate(parts, axis=1), None
        if self.kind == "bernoulli":
            return bernoulli.entropy_grad_logits(z), None
        assert log_std is not None
        sigma = np.exp(log_std)
        # ∂H/∂s_σ = σ ∂H/∂σ (= 1): the chain rule through σ = e^{s_σ}.
        d_s = sigma * normal.entropy_grad_scale(sigma)
        return np.zeros_like(z), np.broadcast_to(d_s, z.shape).copy()

    @functools.cached_property
    def segments(self) -> tuple[tuple[int, int], ...]:
        """The columns [lo, hi) of z that belong to each categorical (computed once per head)."""
        edges = np.concatenate([[0], np.cumsum(self.nvec)]).tolist()
        return tuple(itertools.pairwise(edges))


def _sample_categorical(z: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Gumbel-max: a = argmaxᵢ (zᵢ + gᵢ), gᵢ ~ Gumbel(0, 1), is a draw from softmax(z).

    No softmax to normalise (P(argmax = i) = e^{zᵢ} / Σⱼ e^{zⱼ}); one pass over the logits.
    """
    return np.argmax(z + rng.gumbel(size=z.shape), axis=1)


def head_for_space(space: Any) -> Head:
    """The one map from a Gymnasium action space to the policy distribution used for it.

    ``Discrete`` → categorical (logits); ``MultiDiscrete`` → independent categoricals;
    ``MultiBinary`` → independent Bernoullis (logits); ``Box`` → diagonal normal with a
    state-independent log standard deviation, actions clipped to the bounds at the env.

    Raises:
        ValueError: any other space (``Dict``, ``Tuple``, ``Text``, ...), named in the message.
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return Head(
            "categorical", int(space.n), (), nvec=(int(space.n),), start=(int(space.start),)
        )
    if isinstance(space, spaces.MultiDiscrete):
        nvec = tuple(int(k) for k in np.ravel(space.nvec))
        start = tuple(int(s) for s in np.ravel(space.start))
        return Head("multi-categorical", sum(nvec), tuple(space.shape), nvec=nvec, start=start)
    if isinstance(space, spaces.MultiBinary):
        n = int(np.prod(space.shape))
        return Head("bernoulli", n, tuple(space.shape))
    if isinstance(space, spaces.Box):
        if not np.issubdtype(space.dtype, np.floating):
            raise ValueError(f"unsupported action space {space!r}: Box actions must be floating")
        d = int(np.prod(space.shape))
        low = tuple(float(x) for x in np.ravel(space.low))
        high = tuple(float(x) for x in np.ravel(space.high))
        return Head("normal", d, tuple(space.shape), low=low, high=high)
    raise ValueError(
        f"unsupported action space {space!r}: REINFORCE here supports Discrete, MultiDiscrete, "
        "MultiBinary and Box"
    )


def obs_dim_for_space(space: Any) -> int:
    """Width of the flattened observation; only ``Box`` observations are supported.

    Raises:
        ValueError: a non-Box observation space, named in the message.
    """
    from gymnasium import spaces

    if not isinstance(space, spaces.Box):
        raise ValueError(
            f"unsupported observation space {space!r}: the MLP policy takes Box observations"
        )
    return math.prod(space.shape)
