r"""Normal distribution: y ∈ ℝ with mean ``loc`` μ and standard deviation ``scale`` σ > 0.

    ln N(y; μ, σ) = −(y − μ)² / (2σ²) − ln σ − ½ ln 2π

Characteristic eligibility (Williams, 1992, §6, Gaussian units):

* e_μ = ∂ ln N / ∂μ = (y − μ) / σ²;
* e_σ = ∂ ln N / ∂σ = ((y − μ)² − σ²) / σ³;
* with a log-scale parameter s = ln σ (what a policy network usually outputs),
  e_s = σ e_σ = (y − μ)² / σ² − 1.

Kernels trust their inputs; checks live in :mod:`eligibility.api`.
"""

from __future__ import annotations

import math

import array_api_compat

from eligibility._array import Array

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


_xp = array_api_compat.array_namespace


def log_prob(mu: Array, sigma: Array, y: Array) -> Array:
    """Log-density ln N(y; μ, σ) = −(y − μ)² / (2σ²) − ln σ − ½ ln 2π."""
    xp = _xp(sigma)
    return -((y - mu) ** 2) / (2.0 * sigma**2) - xp.log(sigma) - _HALF_LOG_2PI


def score_loc(mu: Array, sigma: Array, y: Array) -> Array:
    """Eligibility of the mean, e_μ = (y − μ) / σ²."""
    return (y - mu) / sigma**2


def score_scale(mu: Array, sigma: Array, y: Array) -> Array:
    """Eligibility of the scale, e_σ = ((y − μ)² − σ²) / σ³."""
    return ((y - mu) ** 2 - sigma**2) / sigma**3


def score_log_scale(mu: Array, sigma: Array, y: Array) -> Array:
    """Eligibility of the log-scale, e_s = ∂ ln N / ∂(ln σ) = (y − μ)² / σ² − 1."""
    return (y - mu) ** 2 / sigma**2 - 1.0


def entropy(sigma: Array) -> Array:
    """Entropy H = ½ + ½ ln 2π + ln σ."""
    xp = _xp(sigma)
    return 0.5 + _HALF_LOG_2PI + xp.log(sigma)


def entropy_grad_scale(sigma: Array) -> Array:
    """Entropy gradient ∂H/∂σ = 1/σ (and ∂H/∂μ = 0)."""
    return 1.0 / sigma


def fisher(sigma: Array) -> Array:
    """Fisher information over (μ, σ), F = [[1/σ², 0], [0, 2/σ²]].

    Shape ``sigma.shape + (2, 2)``.
    """
    xp = _xp(sigma)
    inv = 1.0 / sigma**2
    zero = xp.zeros_like(sigma)
    row0 = xp.stack([inv, zero], axis=-1)
    row1 = xp.stack([zero, 2.0 * inv], axis=-1)
    return xp.stack([row0, row1], axis=-2)
