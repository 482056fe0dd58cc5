r"""Normal distribution: y ∈ ℝ with mean ``loc`` μ and standard deviation ``scale`` σ > 0.

    ln N(y; μ, σ) = −(y − μ)² / (2σ²) − ln σ − ½ ln 2π

Characteristic eligibility (Williams, 1992, §6, Gaussian units):

* e_μ = ∂ ln N / ∂μ = (y − μ) / σ²;
* e_σ = ∂ ln N / ∂σ = ((y − μ)² − σ²) / σ³;
* with a log-scale parameter s = ln σ (what a policy network usually outputs),
  e_s = σ e_σ = (y − μ)² / σ² − 1.

Every form is evaluated through the standardised residual r = (y − μ)/σ, so that σ² never
appears: with σ = 1e-200, σ² underflows to 0 and (y − μ)²/σ² would read 0/0.

Kernels trust their inputs; the spec at the bottom declares the checks the dispatcher runs.
"""

from __future__ import annotations

import math
from typing import Any

from eligibility._array import Array, array_namespace, matrix_2x2
from eligibility.distributions._spec import (
    CheckedLike,
    DistributionSpec,
    Flag,
    Form,
    all_of,
    reject,
)

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


_xp = array_namespace


def log_prob(mu: Array, sigma: Array, y: Array) -> Array:
    """Log-density ln N(y; μ, σ) = −(y − μ)² / (2σ²) − ln σ − ½ ln 2π."""
    xp = _xp(sigma)
    r = (y - mu) / sigma
    return -0.5 * r * r - xp.log(sigma) - _HALF_LOG_2PI


def score_loc(mu: Array, sigma: Array, y: Array) -> Array:
    """Eligibility of the mean, e_μ = (y − μ) / σ²."""
    return (y - mu) / sigma / sigma


def score_scale(mu: Array, sigma: Array, y: Array) -> Array:
    """Eligibility of the scale, e_σ = ((y − μ)² − σ²) / σ³."""
    r = (y - mu) / sigma
    return (r * r - 1.0) / sigma


def score_log_scale(mu: Array, sigma: Array, y: Array) -> Array:
    """Eligibility of the log-scale, e_s = ∂ ln N / ∂(ln σ) = (y − μ)² / σ² − 1."""
    r = (y - mu) / sigma
    return r * r - 1.0


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
    inv = 1.0 / sigma / sigma
    zero = xp.zeros_like(sigma)
    return matrix_2x2(xp, inv, zero, zero, 2.0 * inv)


# the spec: (μ, σ) broadcast against each other before these are called ----------------------


def score(mu: Array, sigma: Array, y: Array) -> tuple[Array, Array]:
    """Eligibilities (e_μ, e_σ) of one value."""
    return score_loc(mu, sigma, y), score_scale(mu, sigma, y)


def entropy_grad(mu: Array, sigma: Array) -> tuple[Array, Array]:
    """Entropy gradient (∂H/∂μ, ∂H/∂σ) = (0, 1/σ)."""
    return _xp(sigma).zeros_like(sigma), entropy_grad_scale(sigma)


def _check_params(xp: Any, arrs: dict[str, Array], form: str) -> None:
    mu, sigma = arrs["loc"], arrs["scale"]
    reject(xp, xp.isinf(mu), mu, lambda i, v: f"loc: {v} at index {i}; loc must be finite")
    reject(
        xp,
        ~(sigma > 0) | xp.isinf(sigma),
        sigma,
        lambda i, v: f"scale: {v} at index {i}; scale must be finite and > 0",
    )


def _check_value(c: CheckedLike, v: Array) -> Array:
    return c.xp.astype(v, c.compute_dtype)


SPEC = DistributionSpec(
    name="normal",
    parameters=("loc", "scale"),
    forms={
        "loc-scale": Form(
            params=("loc", "scale"),
            log_prob=log_prob,
            score=score,
            entropy=lambda mu, sigma: entropy(sigma),
            entropy_grad=entropy_grad,
            fisher=lambda mu, sigma: fisher(sigma),
            view="loc μ, scale σ",
        )
    },
    choose_form=all_of("normal", ("loc", "scale"), "loc-scale"),
    param_event_dims=0,
    value_event_dims=0,
    support="y ∈ ℝ",
    check_params=_check_params,
    check_value=_check_value,
    flags={"loc": Flag("MU", "the mean μ"), "scale": Flag("SIGMA", "the std σ > 0")},
    torch_name="Normal",
    tex={"N": r"\mathcal{N}"},
    examples=("--loc 0.5 --scale 2 --value 1.2",),
)
