r"""Bernoulli distribution: y ∈ {0, 1}, Williams' original REINFORCE unit.

Two views, as in ``torch.distributions.Bernoulli``: ``probs`` p = P(y = 1) ∈ [0, 1], or
``logits`` z with p = σ(z) = 1 / (1 + e⁻ᶻ).

Characteristic eligibility (Williams, 1992, eq. 9 for a Bernoulli-logistic unit):

* probs:  ln P(y) = y ln p + (1 − y) ln(1 − p),
  so e = y/p − (1 − y)/(1 − p) = (y − p) / (p (1 − p));
* logits: e = y − σ(z).

Kernels trust their inputs; checks live in :mod:`eligibility.api`.
"""

from __future__ import annotations

import array_api_compat

from eligibility._array import Array, safe_log, xlogx

_xp = array_api_compat.array_namespace


def sigmoid(z: Array) -> Array:
    """Logistic σ(z) = 1 / (1 + e⁻ᶻ), through e^{−|z|} so that exp never overflows."""
    xp = _xp(z)
    e = xp.exp(-xp.abs(z))
    return xp.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def softplus(x: Array) -> Array:
    """Softplus ln(1 + eˣ) = max(x, 0) + ln(1 + e^{−|x|}), stable for any x."""
    xp = _xp(x)
    return xp.maximum(x, xp.zeros_like(x)) + xp.log1p(xp.exp(-xp.abs(x)))


def log_prob_probs(p: Array, y: Array) -> Array:
    """Log-probability ln P(y) = y ln p + (1 − y) ln(1 − p)."""
    xp = _xp(p)
    return xp.where(y > 0.5, safe_log(xp, p), safe_log(xp, 1.0 - p))


def score_probs(p: Array, y: Array) -> Array:
    """Eligibility e = ∂ ln P(y) / ∂p = y/p − (1 − y)/(1 − p) = (y − p) / (p (1 − p)).

    The first form is the one evaluated: it stays finite at p = 0 for y = 0 (e = −1) and at
    p = 1 for y = 1 (e = 1), where the second would read 0/0.
    """
    xp = _xp(p)
    one = xp.ones_like(p)
    return xp.where(y > 0.5, one / xp.where(p > 0, p, one), -one / xp.where(p < 1, 1.0 - p, one))


def log_prob_logits(z: Array, y: Array) -> Array:
    """Log-probability ln P(y) = y z − softplus(z) = −softplus((1 − 2y) z)."""
    return -softplus((1.0 - 2.0 * y) * z)


def score_logits(z: Array, y: Array) -> Array:
    """Eligibility e = ∂ ln P(y) / ∂z = y − σ(z).

    Evaluated as σ(−z) for y = 1 and −σ(z) for y = 0 (1 − σ(z) = σ(−z)): subtracting from 1
    would lose every digit of a small e when the unit is confident.
    """
    xp = _xp(z)
    u = xp.exp(-xp.abs(z))  # one exp gives both σ(|z|) = 1/(1 + u) and σ(−|z|) = u/(1 + u)
    hi, lo = 1.0 / (1.0 + u), u / (1.0 + u)
    sig_z, sig_minus_z = xp.where(z >= 0, hi, lo), xp.where(z >= 0, lo, hi)
    return xp.where(y > 0.5, sig_minus_z, -sig_z)


def entropy_probs(p: Array) -> Array:
    """Entropy H = −p ln p − (1 − p) ln(1 − p)."""
    xp = _xp(p)
    return -xlogx(xp, p) - xlogx(xp, 1.0 - p)


def entropy_grad_probs(p: Array) -> Array:
    """Entropy gradient ∂H/∂p = ln(1 − p) − ln p.

    Unbounded at p ∈ {0, 1}; checked at the boundary.
    """
    xp = _xp(p)
    return xp.log(1.0 - p) - xp.log(p)


def entropy_logits(z: Array) -> Array:
    """Entropy H = p softplus(−z) + (1 − p) softplus(z), p = σ(z)."""
    p = sigmoid(z)
    return p * softplus(-z) + (1.0 - p) * softplus(z)


def entropy_grad_logits(z: Array) -> Array:
    """Entropy gradient ∂H/∂z = −z σ(z) (1 − σ(z)), since ∂H/∂p = −z and ∂p/∂z = p (1 − p)."""
    p = sigmoid(z)
    return -z * p * (1.0 - p)


def fisher_probs(p: Array) -> Array:
    """Fisher information F = E[e²] = 1 / (p (1 − p)), elementwise (one 1×1 block per unit)."""
    return 1.0 / (p * (1.0 - p))


def fisher_logits(z: Array) -> Array:
    """Fisher information F = E[e²] = σ(z) (1 − σ(z)), elementwise."""
    p = sigmoid(z)
    return p * (1.0 - p)
