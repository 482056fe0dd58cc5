r"""Bandits whose objective J(θ) and gradient ∇J(θ) are known in closed form.

A bandit is a one-step episode: draw an action a ~ π(·; θ), receive a reward r(a) (plus
zero-mean noise, which changes no expectation). The objective is J(θ) = E_π[r(a)], and the
likelihood-ratio identity gives the gradient as an exact finite sum (or a closed form):

    ∇J(θ) = Σ_a π(a; θ) r(a) e(a; θ),   e(a; θ) = ∂ ln π(a; θ) / ∂θ

where e is the characteristic eligibility, taken from :mod:`eligibility.distributions` (the
math lives once). The Gaussian bandit has a quadratic reward, so both J and ∇J have closed
forms that owe nothing to the eligibility; the tests hold the two against each other.

All functions are pure, take NumPy arrays and trust their inputs (the :class:`~eligibility.lab.
problems.Problem` constructors check them).
"""

from __future__ import annotations

import itertools

import numpy as np

from eligibility.distributions import bernoulli, categorical

# categorical policy over K arms ------------------------------------------------------------


def categorical_pi(*, logits: np.ndarray | None = None, probs: np.ndarray | None = None):
    """π = softmax(z) for logits, π = w / Σw for probs (relative weights)."""
    if logits is not None:
        return categorical.softmax(np.asarray(logits, dtype=np.float64))
    return categorical.normalise(np.asarray(probs, dtype=np.float64))


def categorical_objective(
    r: np.ndarray, *, logits: np.ndarray | None = None, probs: np.ndarray | None = None
) -> float:
    """J = Σ_a π_a r_a, the expected reward of a K-armed bandit with mean rewards r."""
    return float(categorical_pi(logits=logits, probs=probs) @ np.asarray(r, dtype=np.float64))


def categorical_gradient(
    r: np.ndarray, *, logits: np.ndarray | None = None, probs: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """∇J = Σ_a π_a r_a e(a), with e(a) the categorical eligibility of the chosen form.

    logits: e(a) = onehot(a) − softmax(z), so ∇_z J = π ⊙ (r − J);
    probs:  e(a)ᵢ = δᵢₐ / w_a − 1 / Σw, so ∇_w J = (r − J) / Σw.

    Returns:
        ``{"logits": ∇_z J}`` or ``{"probs": ∇_w J}``, shape (K,).
    """
    form = "logits" if logits is not None else "probs"
    theta = np.asarray(logits if logits is not None else probs, dtype=np.float64)
    k = theta.shape[-1]
    pi = categorical_pi(logits=logits, probs=probs)
    a = np.arange(k)
    # e[a, :] is the eligibility of arm a, one row per arm (the kernel broadcasts over a).
    score = categorical.score_logits if form == "logits" else categorical.score_probs
    e = score(theta[None, :], a)
    return {form: (pi * np.asarray(r, dtype=np.float64)) @ e}


# independent Bernoulli units with a joint reward table ---------------------------------------


def _outcomes(n: int) -> np.ndarray:
    """Every y ∈ {0, 1}ⁿ, shape (2ⁿ, n), in the C order of a (2,)*n reward table."""
    return np.array(list(itertools.product((0.0, 1.0), repeat=n)))


def _joint_probs(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every outcome y ∈ {0, 1}ⁿ, (2ⁿ, n), and its probability P(y) = Πᵢ pᵢ^yᵢ (1 − pᵢ)^(1−yᵢ)."""
    y = _outcomes(p.shape[0])
    return y, np.prod(np.where(y > 0.5, p, 1.0 - p), axis=1)


def bernoulli_p(*, logits: np.ndarray | None = None, probs: np.ndarray | None = None):
    """The units' probabilities: p = σ(z) for logits, p = probs for probs."""
    if logits is not None:
        return bernoulli.sigmoid(np.asarray(logits, dtype=np.float64))
    return np.asarray(probs, dtype=np.float64)


def bernoulli_objective(
    table: np.ndarray, *, logits: np.ndarray | None = None, probs: np.ndarray | None = None
) -> float:
    """J = Σ_y P(y) R(y), P(y) = Πᵢ pᵢ^yᵢ (1 − pᵢ)^(1−yᵢ), over all y ∈ {0, 1}ⁿ.

    Args:
        table: R(y), shape (2,)*n: the mean reward of each joint outcome of the n units.
        logits: z, shape (n,), with p = σ(z); or
        probs: p, shape (n,).
    """
    _, prob_y = _joint_probs(bernoulli_p(logits=logits, probs=probs))
    return float(prob_y @ np.asarray(table, dtype=np.float64).reshape(-1))


def bernoulli_gradient(
    table: np.ndarray, *, logits: np.ndarray | None = None, probs: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """∇J = Σ_y P(y) R(y) e(y), eᵢ(y) = ∂ ln P(yᵢ)/∂θᵢ (the units are independent).

    logits: eᵢ = yᵢ − σ(zᵢ); probs: eᵢ = yᵢ/pᵢ − (1 − yᵢ)/(1 − pᵢ).

    Returns:
        ``{"logits": ∇_z J}`` or ``{"probs": ∇_p J}``, shape (n,).
    """
    form = "logits" if logits is not None else "probs"
    theta = np.asarray(logits if logits is not None else probs, dtype=np.float64)
    y, prob_y = _joint_probs(bernoulli_p(logits=logits, probs=probs))
    score = bernoulli.score_logits if form == "logits" else bernoulli.score_probs
    e = score(theta[None, :], y)
    return {form: (prob_y * np.asarray(table, dtype=np.float64).reshape(-1)) @ e}


# Gaussian policy, quadratic reward ----------------------------------------------------------


def gaussian_objective(c: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> float:
    """J = E[−‖a − c‖²] = −Σᵢ ((μᵢ − cᵢ)² + σᵢ²) for a ~ N(μ, diag σ²), reward r(a) = −‖a − c‖²."""
    mu, sigma, c = (np.asarray(x, dtype=np.float64) for x in (loc, scale, c))
    return float(-np.sum((mu - c) ** 2 + sigma**2))


def gaussian_gradient(c: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> dict[str, np.ndarray]:
    """∂J/∂μ = −2 (μ − c), ∂J/∂σ = −2σ, and ∂J/∂(ln σ) = σ ∂J/∂σ = −2σ².

    Returns:
        ``{"loc": ∂J/∂μ, "scale": ∂J/∂σ, "log_scale": ∂J/∂ ln σ}``, each of shape (d,).
    """
    mu, sigma, c = (np.asarray(x, dtype=np.float64) for x in (loc, scale, c))
    return {"loc": -2.0 * (mu - c), "scale": -2.0 * sigma, "log_scale": -2.0 * sigma**2}


__all__ = [
    "bernoulli_gradient",
    "bernoulli_objective",
    "bernoulli_p",
    "categorical_gradient",
    "categorical_objective",
    "categorical_pi",
    "gaussian_gradient",
    "gaussian_objective",
]
