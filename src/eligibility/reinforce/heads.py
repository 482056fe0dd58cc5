r"""Policy heads: one small class per action distribution, parametrised by the network output z.

A *head* turns z (one row per state) into a distribution over actions and answers the questions
REINFORCE asks of it: sample, mode, ln π(a | s), the characteristic eligibility
e = ∂ ln π(a | s) / ∂(z, s_σ), entropy H and ∂H/∂(z, s_σ), and the torch loss whose backward is
that eligibility. Every formula is the core's kernel (:mod:`eligibility.distributions`,
:mod:`eligibility.torch`), called, not re-derived. Which head a space gets is decided in one
place, :func:`eligibility.reinforce.spaces.head_for_space` (one table, ``spaces._head_table``), and
a ``Box`` space's head by name from :data:`BOX_HEADS`; to add a policy distribution, write its
class here and add one line to the table that chooses it.

Action masks (categorical heads): the logits of invalid actions are set to −∞ before anything is
asked of the head, zᵢ ← −∞ where mᵢ = 0, so π(i) = 0, they are never sampled nor the mode, and
the core's rule gives them an eligibility of exactly zero.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from eligibility.distributions import bernoulli, beta, categorical, normal

Array = np.ndarray


def _sample_categorical(z: Array, rng: np.random.Generator) -> Array:
    """Gumbel-max: a = argmaxᵢ (zᵢ + gᵢ), gᵢ ~ Gumbel(0, 1), is a draw from softmax(z).

    No softmax to normalise (P(argmax = i) = e^{zᵢ} / Σⱼ e^{zⱼ}); one pass over the logits.
    """
    return np.argmax(z + rng.gumbel(size=z.shape), axis=1)


@dataclass(frozen=True)
class Head:
    """What every head shares: the width of z and the shape of one action.

    Attributes:
        n_out: width of z (the network's last layer).
        action_shape: shape of one action as the env expects it.
    """

    kind: ClassVar[str] = ""
    has_log_std: ClassVar[bool] = False
    """True for heads whose s_σ = ln σ is a state-independent parameter of the policy."""
    maskable: ClassVar[bool] = False

    n_out: int
    action_shape: tuple[int, ...]

    def masked(self, z: Array, mask: Array | None) -> Array:
        """z with zᵢ = −∞ where ``mask`` is False (categorical heads); z itself when no mask."""
        if mask is None:
            return z
        if not self.maskable:
            raise ValueError(
                f"action masks are for Discrete action spaces; this env's head is {self.kind}"
            )
        return masked_logits(z, mask)

    def to_env(self, a: Array) -> Array:
        """The action as the env takes it (one row per state)."""
        return a.reshape((a.shape[0], *self.action_shape))


def masked_logits(z: Any, mask: Any) -> Any:
    """zᵢ where mᵢ, −∞ elsewhere (NumPy or torch): π(i) = 0 for a masked action."""
    if isinstance(z, np.ndarray):
        return np.where(np.asarray(mask, dtype=bool), z, -np.inf)
    import torch

    return torch.where(torch.as_tensor(mask, dtype=torch.bool), z, float("-inf"))


@dataclass(frozen=True)
class CategoricalHead(Head):
    """π = softmax(z) over n actions (``Discrete(n, start)``); e = onehot(a) − softmax(z)."""

    kind: ClassVar[str] = "categorical"
    maskable: ClassVar[bool] = True
    start: int = 0

    @property
    def nvec(self) -> tuple[int, ...]:
        """The category count, as a one-entry tuple."""
        return (self.n_out,)

    def sample(self, z: Array, log_std: Array | None, rng: np.random.Generator) -> Array:
        """a ~ softmax(z), one per row (Gumbel-max)."""
        return _sample_categorical(z, rng)

    def mode(self, z: Array, log_std: Array | None = None) -> Array:
        """argmaxᵢ zᵢ."""
        return np.argmax(z, axis=1)

    def to_env(self, a: Array) -> Array:
        """Category + ``start``."""
        return a + self.start if self.start else a

    def log_prob(self, z: Array, log_std: Array | None, a: Array) -> Array:
        """ln π(a | z) = z_a − ln Σ e^{z}."""
        return categorical.log_prob_logits(z, a)

    def score(self, z: Array, log_std: Array | None, a: Array) -> tuple[Array, None]:
        """(e = onehot(a) − softmax(z), None)."""
        return categorical.score_logits(z, a), None

    def entropy(self, z: Array, log_std: Array | None) -> Array:
        """H = −Σ πᵢ ln πᵢ per row."""
        return categorical.entropy_logits(z)

    def entropy_grad(self, z: Array, log_std: Array | None) -> tuple[Array, None]:
        """(∂H/∂z, None)."""
        return categorical.entropy_grad_logits(z), None

    def torch_loss(self, z: Any, a: Array, adv: Any, beta: float, log_std: Any = None) -> Any:
        """−Σᵢ ψᵢ ln π(aᵢ) − β Σᵢ Hᵢ (:func:`eligibility.torch.reinforce_loss`)."""
        import torch

        from eligibility.torch import reinforce_loss

        a_t = torch.as_tensor(a, dtype=torch.int64)
        return reinforce_loss(z, a_t, adv, reduction="sum", entropy_coef=beta)


@dataclass(frozen=True)
class MultiCategoricalHead(Head):
    """Independent categoricals, one per entry of ``MultiDiscrete(nvec, start)``."""

    kind: ClassVar[str] = "multi-categorical"
    nvec: tuple[int, ...] = ()
    start: tuple[int, ...] = ()

    @functools.cached_property
    def segments(self) -> tuple[tuple[int, int], ...]:
        """The columns [lo, hi) of z that belong to each categorical."""
        edges = np.concatenate([[0], np.cumsum(self.nvec)]).tolist()
        return tuple(itertools.pairwise(edges))

    def sample(self, z: Array, log_std: Array | None, rng: np.random.Generator) -> Array:
        """One Gumbel-max draw per categorical."""
        return np.stack([_sample_categorical(z[:, lo:hi], rng) for lo, hi in self.segments], 1)

    def mode(self, z: Array, log_std: Array | None = None) -> Array:
        """argmax per categorical."""
        return np.stack([np.argmax(z[:, lo:hi], axis=1) for lo, hi in self.segments], 1)

    def to_env(self, a: Array) -> Array:
        """Categories + ``start``, reshaped to the space's shape."""
        out = a + np.asarray(self.start, dtype=a.dtype) if any(self.start) else a
        return out.reshape((a.shape[0], *self.action_shape))

    def log_prob(self, z: Array, log_std: Array | None, a: Array) -> Array:
        """Σₖ ln πₖ(aₖ | z)."""
        return sum(
            categorical.log_prob_logits(z[:, lo:hi], a[:, i])
            for i, (lo, hi) in enumerate(self.segments)
        )

    def score(self, z: Array, log_std: Array | None, a: Array) -> tuple[Array, None]:
        """(onehot(aₖ) − softmax(zₖ) for each k, concatenated; None)."""
        parts = [
            categorical.score_logits(z[:, lo:hi], a[:, i])
            for i, (lo, hi) in enumerate(self.segments)
        ]
        return np.concatenate(parts, axis=1), None

    def entropy(self, z: Array, log_std: Array | None) -> Array:
        """Σₖ Hₖ."""
        return sum(categorical.entropy_logits(z[:, lo:hi]) for lo, hi in self.segments)

    def entropy_grad(self, z: Array, log_std: Array | None) -> tuple[Array, None]:
        """(∂H/∂z, None)."""
        parts = [categorical.entropy_grad_logits(z[:, lo:hi]) for lo, hi in self.segments]
        return np.concatenate(parts, axis=1), None

    def torch_loss(self, z: Any, a: Array, adv: Any, beta: float, log_std: Any = None) -> Any:
        """Σₖ of the categorical loss of each entry."""
        import torch

        from eligibility.torch import reinforce_loss

        a_t = torch.as_tensor(a, dtype=torch.int64)
        parts = [
            reinforce_loss(z[:, lo:hi], a_t[:, i], adv, reduction="sum", entropy_coef=beta)
            for i, (lo, hi) in enumerate(self.segments)
        ]
        return torch.stack(parts).sum()


@dataclass(frozen=True)
class BernoulliHead(Head):
    """Independent Bernoullis p = σ(z) (``MultiBinary``); e = a − σ(z)."""

    kind: ClassVar[str] = "bernoulli"

    def sample(self, z: Array, log_std: Array | None, rng: np.random.Generator) -> Array:
        """aᵢ = [uᵢ < σ(zᵢ)]."""
        return (rng.random(z.shape) < bernoulli.sigmoid(z)).astype(np.int8)

    def mode(self, z: Array, log_std: Array | None = None) -> Array:
        """[z > 0]."""
        return (z > 0).astype(np.int8)

    def log_prob(self, z: Array, log_std: Array | None, a: Array) -> Array:
        """Σᵢ ln p(aᵢ | zᵢ)."""
        return np.sum(bernoulli.log_prob_logits(z, a.astype(z.dtype)), axis=1)

    def score(self, z: Array, log_std: Array | None, a: Array) -> tuple[Array, None]:
        """(a − σ(z), None)."""
        return bernoulli.score_logits(z, a.astype(z.dtype)), None

    def entropy(self, z: Array, log_std: Array | None) -> Array:
        """Σᵢ Hᵢ."""
        return np.sum(bernoulli.entropy_logits(z), axis=1)

    def entropy_grad(self, z: Array, log_std: Array | None) -> tuple[Array, None]:
        """(∂H/∂z, None)."""
        return bernoulli.entropy_grad_logits(z), None

    def torch_loss(self, z: Any, a: Array, adv: Any, beta: float, log_std: Any = None) -> Any:
        """:func:`eligibility.torch.bernoulli_reinforce_loss` over the units of a row."""
        import torch

        from eligibility.torch import bernoulli_reinforce_loss

        y = torch.as_tensor(a, dtype=z.dtype)
        return bernoulli_reinforce_loss(z, y, adv, reduction="sum", entropy_coef=beta, event_dims=1)


@dataclass(frozen=True)
class NormalHead(Head):
    r"""Diagonal normal N(μ = z, σ = e^{s_σ}) (``Box``), s_σ a state-independent parameter.

    The sample y ~ N(μ, σ²) is what the eligibility is computed at; the env receives
    ``clip(y, low, high)``. Clipping is part of the environment, so ln π and its gradient stay
    those of the unclipped Gaussian (the estimator remains unbiased for the clipped env's return).
    """

    kind: ClassVar[str] = "normal"
    has_log_std: ClassVar[bool] = True
    outputs_per_dim: ClassVar[int] = 1
    """Width of z per action dimension (μ)."""
    bounded: ClassVar[bool] = False
    """Whether it needs finite action bounds."""
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()

    def sample(self, z: Array, log_std: Array | None, rng: np.random.Generator) -> Array:
        """y = μ + σ ε, ε ~ N(0, I)."""
        assert log_std is not None
        return z + np.exp(log_std) * rng.standard_normal(z.shape)

    def mode(self, z: Array, log_std: Array | None = None) -> Array:
        """μ."""
        return z.copy()

    def to_env(self, a: Array) -> Array:
        """clip(y, low, high), reshaped to the space's shape."""
        return np.clip(a, self.low, self.high).reshape((a.shape[0], *self.action_shape))

    def log_prob(self, z: Array, log_std: Array | None, a: Array) -> Array:
        """Σᵢ ln N(aᵢ; μᵢ, σᵢ²)."""
        assert log_std is not None
        return np.sum(normal.log_prob(z, np.exp(log_std), a), axis=1)

    def score(self, z: Array, log_std: Array | None, a: Array) -> tuple[Array, Array]:
        """(e_μ = (a − μ)/σ², e_s = (a − μ)²/σ² − 1)."""
        assert log_std is not None
        sigma = np.exp(log_std)
        return normal.score_loc(z, sigma, a), normal.score_log_scale(z, sigma, a)

    def entropy(self, z: Array, log_std: Array | None) -> Array:
        """Σᵢ Hᵢ, the same for every row."""
        assert log_std is not None
        return np.full(z.shape[0], np.sum(normal.entropy(np.exp(log_std))))

    def entropy_grad(self, z: Array, log_std: Array | None) -> tuple[Array, Array]:
        """(0, ∂H/∂s_σ): the normal's H does not depend on μ."""
        assert log_std is not None
        sigma = np.exp(log_std)
        # ∂H/∂s_σ = σ ∂H/∂σ (= 1): the chain rule through σ = e^{s_σ}.
        d_s = sigma * normal.entropy_grad_scale(sigma)
        return np.zeros_like(z), np.broadcast_to(d_s, z.shape).copy()

    def torch_loss(self, z: Any, a: Array, adv: Any, beta: float, log_std: Any = None) -> Any:
        """:func:`eligibility.torch.normal_reinforce_loss` with s_σ as ``log_scale``."""
        import torch

        from eligibility.torch import normal_reinforce_loss

        y = torch.as_tensor(a, dtype=z.dtype)
        return normal_reinforce_loss(
            z, y, adv, log_scale=log_std, reduction="sum", entropy_coef=beta, event_dims=1
        )


@dataclass(frozen=True)
class BetaHead(Head):
    r"""Beta policy on a bounded ``Box`` (Chou, Maturana & Scherer, ICML 2017).

    z = (z_α, z_β), 2d outputs; α = 1 + softplus(z_α), β = 1 + softplus(z_β) (both > 1: a
    unimodal density). y ~ Beta(α, β) on (0, 1) per dimension, and the env receives
    low + (high − low) y: the support is the action bounds themselves, so nothing is clipped
    and ln π and its gradient are those of the action actually taken (the normal head's clip
    at the bounds is part of the env instead). The eligibility with respect to z is the core's
    (e_α, e_β) (:func:`eligibility.distributions.beta.score`) times σ(z), softplus' derivative.
    """

    kind: ClassVar[str] = "beta"
    outputs_per_dim: ClassVar[int] = 2
    """Width of z per action dimension (z_α, z_β)."""
    bounded: ClassVar[bool] = True
    """Whether it needs finite action bounds (its support is the bounds)."""
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()

    EPS: ClassVar[float] = 1e-9
    """Draws are kept in [ε, 1 − ε]: a float64 Beta draw can round to 0 or 1, where ln π = −∞."""

    def _ab(self, z: Array) -> tuple[Array, Array]:
        d = z.shape[1] // 2
        return 1.0 + bernoulli.softplus(z[:, :d]), 1.0 + bernoulli.softplus(z[:, d:])

    def sample(self, z: Array, log_std: Array | None, rng: np.random.Generator) -> Array:
        """y ~ Beta(α, β) per dimension."""
        a, b = self._ab(z)
        return np.clip(rng.beta(a, b), self.EPS, 1.0 - self.EPS)

    def mode(self, z: Array, log_std: Array | None = None) -> Array:
        """(α − 1) / (α + β − 2), the density's peak (α, β > 1)."""
        a, b = self._ab(z)
        return np.clip((a - 1.0) / (a + b - 2.0), self.EPS, 1.0 - self.EPS)

    def to_env(self, a: Array) -> Array:
        """low + (high − low) y, reshaped to the space's shape."""
        low, high = np.asarray(self.low), np.asarray(self.high)
        return (low + (high - low) * a).reshape((a.shape[0], *self.action_shape))

    def log_prob(self, z: Array, log_std: Array | None, a: Array) -> Array:
        """Σᵢ ln Beta(yᵢ; αᵢ, βᵢ) (the density of y; the map to the bounds adds a constant)."""
        al, be = self._ab(z)
        return np.sum(beta.log_prob(al, be, a), axis=1)

    def score(self, z: Array, log_std: Array | None, a: Array) -> tuple[Array, None]:
        """(e_α σ(z_α), e_β σ(z_β)): the core's eligibility through α = 1 + softplus(z_α)."""
        al, be = self._ab(z)
        e_a, e_b = beta.score(al, be, a)
        d = z.shape[1] // 2
        return np.concatenate(
            [e_a * bernoulli.sigmoid(z[:, :d]), e_b * bernoulli.sigmoid(z[:, d:])], axis=1
        ), None

    def entropy(self, z: Array, log_std: Array | None) -> Array:
        """Σᵢ H(Beta(αᵢ, βᵢ))."""
        al, be = self._ab(z)
        return np.sum(beta.entropy(al, be), axis=1)

    def entropy_grad(self, z: Array, log_std: Array | None) -> tuple[Array, None]:
        """(∂H/∂α σ(z_α), ∂H/∂β σ(z_β))."""
        al, be = self._ab(z)
        h_a, h_b = beta.entropy_grad(al, be)
        d = z.shape[1] // 2
        return np.concatenate(
            [h_a * bernoulli.sigmoid(z[:, :d]), h_b * bernoulli.sigmoid(z[:, d:])], axis=1
        ), None

    def torch_loss(self, z: Any, a: Array, adv: Any, beta_: float, log_std: Any = None) -> Any:
        """−Σ A ln Beta(y; α, β) − β Σ H, by torch autograd through softplus (no analytic loss)."""
        import torch
        from torch.nn.functional import softplus

        d = z.shape[1] // 2
        dist = torch.distributions.Beta(1.0 + softplus(z[:, :d]), 1.0 + softplus(z[:, d:]))
        y = torch.as_tensor(a, dtype=z.dtype)
        loss = -(adv * dist.log_prob(y).sum(-1)).sum()
        if beta_:
            loss = loss - beta_ * dist.entropy().sum()
        return loss


BOX_HEADS: dict[str, type[NormalHead] | type[BetaHead]] = {"normal": NormalHead, "beta": BetaHead}
"""The heads of a ``Box`` action space, by the name ``--continuous-head`` takes."""
