r"""Bernoulli distribution: y ∈ {0, 1}, Williams' original REINFORCE unit.

Two views, as in ``torch.distributions.Bernoulli``: ``probs`` p = P(y = 1) ∈ [0, 1], or
``logits`` z with p = σ(z) = 1 / (1 + e⁻ᶻ).

Characteristic eligibility (Williams, 1992, eq. 9 for a Bernoulli-logistic unit):

* probs:  ln P(y) = y ln p + (1 − y) ln(1 − p),
  so e = y/p − (1 − y)/(1 − p) = (y − p) / (p (1 − p));
* logits: e = y − σ(z).

1 − p is never formed by subtraction where it can be small: it is log1p(−p) in ln(1 − p), and
σ(−z) for logits (at z = 40, 1 − σ(z) in float64 is 0 but σ(−z) is 4.25e-18).

Kernels trust their inputs; the spec at the bottom declares the checks the dispatcher runs.
"""

from __future__ import annotations

from typing import Any

from eligibility._array import Array, array_namespace, safe_log
from eligibility.distributions._spec import (
    CheckedLike,
    DistributionSpec,
    Flag,
    check_integral,
    one_of,
    probs_and_logits,
    reject,
)

_xp = array_namespace


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
    """Log-probability ln P(y) = y ln p + (1 − y) ln(1 − p), ln(1 − p) as log1p(−p)."""
    xp = _xp(p)
    return xp.where(y > 0.5, safe_log(xp, p), _log1m(xp, p))


def _log1m(xp: Any, p: Array) -> Array:
    """ln(1 − p) as log1p(−p) where p < 1, and 0 at p = 1 (where a zero factor follows)."""
    return xp.log1p(-xp.where(p < 1, p, xp.zeros_like(p)))


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
    """Entropy H = −p ln p − (1 − p) ln(1 − p), ln(1 − p) as log1p(−p)."""
    xp = _xp(p)
    return -p * safe_log(xp, p) - (1.0 - p) * _log1m(xp, p)


def entropy_grad_probs(p: Array) -> Array:
    """Entropy gradient ∂H/∂p = ln(1 − p) − ln p.

    Unbounded at p ∈ {0, 1}; checked at the boundary.
    """
    xp = _xp(p)
    return xp.log1p(-p) - xp.log(p)


def entropy_logits(z: Array) -> Array:
    """Entropy H = σ(z) softplus(−z) + σ(−z) softplus(z) (1 − σ(z) taken as σ(−z))."""
    return sigmoid(z) * softplus(-z) + sigmoid(-z) * softplus(z)


def entropy_grad_logits(z: Array) -> Array:
    """Entropy gradient ∂H/∂z = −z σ(z) σ(−z), since ∂H/∂p = −z and ∂p/∂z = p (1 − p)."""
    return -z * sigmoid(z) * sigmoid(-z)


def fisher_probs(p: Array) -> Array:
    """Fisher information F = E[e²] = 1 / (p (1 − p)), elementwise (one 1×1 block per unit)."""
    return 1.0 / (p * (1.0 - p))


def fisher_logits(z: Array) -> Array:
    """Fisher information F = E[e²] = σ(z) σ(−z) = σ(z) (1 − σ(z)), elementwise."""
    return sigmoid(z) * sigmoid(-z)


# the spec -----------------------------------------------------------------------------------


def _check_params(xp: Any, arrs: dict[str, Array], form: str) -> None:
    a = arrs[form]
    if form == "probs":
        reject(
            xp,
            (a < 0) | (a > 1),
            a,
            lambda i, v: (
                f"probs: {v} at index {i} is outside [0, 1]; a Bernoulli probability "
                "must lie in [0, 1]"
            ),
        )
    else:
        reject(
            xp,
            xp.isinf(a),
            a,
            lambda i, v: (
                f"logits: {v} at index {i}; Bernoulli logits must be finite (use "
                "probs=0 or 1 for a deterministic unit)"
            ),
        )


def _check_open_probs(what: str) -> Any:
    def check(xp: Any, arrs: dict[str, Array], form: str) -> None:
        if form == "probs":
            a = arrs["probs"]
            reject(
                xp,
                (a <= 0) | (a >= 1),
                a,
                lambda i, v: (
                    f"probs: {v} at index {i}; {what} is unbounded at p = 0 or 1 (use logits)"
                ),
            )

    return check


def _check_value(c: CheckedLike, v: Array) -> Array:
    xp = c.xp
    reject(
        xp,
        (v != 0) & (v != 1),
        v,
        lambda i, x: f"value: {x} at index {i} is not 0 or 1; a Bernoulli value is 0 or 1",
    )
    y = xp.astype(check_integral(xp, v, "0 or 1"), c.compute_dtype)
    if c.form == "probs":
        pr = c.params["probs"]
        zero = ((y == 1) & (pr <= 0)) | ((y == 0) & (pr >= 1))
        reject(
            xp,
            zero,
            xp.broadcast_to(y, zero.shape),
            lambda i, x: (
                f"value: {x} at index {i} has probability zero (probs is "
                f"{1 - int(float(x))} there), so its eligibility does not exist"
            ),
        )
    return y


SPEC = DistributionSpec(
    name="bernoulli",
    parameters=("probs", "logits"),
    forms=probs_and_logits(
        (log_prob_probs, score_probs, entropy_probs, entropy_grad_probs, fisher_probs),
        (log_prob_logits, score_logits, entropy_logits, entropy_grad_logits, fisher_logits),
        views=("probs p", "logits z"),
    ),
    choose_form=one_of("bernoulli", ("probs", "logits")),
    param_event_dims=0,
    value_event_dims=0,
    support="y ∈ {0, 1}",
    check_params=_check_params,
    check_value=_check_value,
    check_entropy_grad=_check_open_probs("the entropy gradient"),
    check_fisher=_check_open_probs("the Fisher information 1/(p(1−p))"),
    flags={
        "probs": Flag("P", "the probability p = P(y = 1) of each unit"),
        "logits": Flag("Z", "logits z, p = σ(z) (instead of --probs)"),
    },
    torch_name="Bernoulli",
    examples=("--probs 0.3 --value 1", "--logits 0.4 -1.0 --value 1 0      # two units"),
)
