r"""Beta distribution: y ∈ (0, 1), for bounded continuous actions (Chou et al., 2017).

Parametrised like ``torch.distributions.Beta``: ``concentration1`` α > 0 and
``concentration0`` β > 0 (α pulls mass towards 1, β towards 0).

    ln Beta(y; α, β) = (α − 1) ln y + (β − 1) ln(1 − y) − ln B(α, β),
    ln B(α, β) = ln Γ(α) + ln Γ(β) − ln Γ(α + β)

Characteristic eligibility, with ψ the digamma function (ψ = (ln Γ)′):

* e_α = ∂ ln Beta / ∂α = ln y − ψ(α) + ψ(α + β);
* e_β = ∂ ln Beta / ∂β = ln(1 − y) − ψ(β) + ψ(α + β).

A policy on a bounded interval [low, high] draws y and acts low + (high − low) y; unlike a
clipped normal it puts no mass outside the bounds, so the gradient has no clipping bias.

Kernels trust their inputs; the spec at the bottom declares the checks the dispatcher runs.
"""

from __future__ import annotations

from eligibility._array import Array, array_namespace, digamma, lgamma, matrix_2x2, trigamma
from eligibility.distributions._spec import (
    CheckedLike,
    DistributionSpec,
    Flag,
    Form,
    all_of,
    check_positive_finite,
    reject,
)

_xp = array_namespace


def log_beta(a: Array, b: Array) -> Array:
    """Log of the Beta function, ln B(α, β) = ln Γ(α) + ln Γ(β) − ln Γ(α + β)."""
    xp = _xp(a)
    return lgamma(xp, a) + lgamma(xp, b) - lgamma(xp, a + b)


def log_prob(a: Array, b: Array, y: Array) -> Array:
    """Log-density ln Beta(y; α, β) = (α − 1) ln y + (β − 1) ln(1 − y) − ln B(α, β).

    ln(1 − y) is taken as log1p(−y), exact for y near 0.
    """
    xp = _xp(a)
    return (a - 1.0) * xp.log(y) + (b - 1.0) * xp.log1p(-y) - log_beta(a, b)


def score(a: Array, b: Array, y: Array) -> tuple[Array, Array]:
    """Eligibilities (e_α, e_β) = (ln y − ψ(α) + ψ(α + β), ln(1 − y) − ψ(β) + ψ(α + β))."""
    xp = _xp(a)
    psi_ab = digamma(xp, a + b)
    return xp.log(y) - digamma(xp, a) + psi_ab, xp.log1p(-y) - digamma(xp, b) + psi_ab


def entropy(a: Array, b: Array) -> Array:
    """Entropy H = ln B(α, β) − (α − 1) ψ(α) − (β − 1) ψ(β) + (α + β − 2) ψ(α + β)."""
    xp = _xp(a)
    return (
        log_beta(a, b)
        - (a - 1.0) * digamma(xp, a)
        - (b - 1.0) * digamma(xp, b)
        + (a + b - 2.0) * digamma(xp, a + b)
    )


def entropy_grad(a: Array, b: Array) -> tuple[Array, Array]:
    """Entropy gradient ∂H/∂α = −(α − 1) ψ′(α) + (α + β − 2) ψ′(α + β), and likewise for β.

    ψ′ is the trigamma function; the ψ terms of ∂ ln B cancel those of the product rule.
    """
    xp = _xp(a)
    common = (a + b - 2.0) * trigamma(xp, a + b)
    return common - (a - 1.0) * trigamma(xp, a), common - (b - 1.0) * trigamma(xp, b)


def fisher(a: Array, b: Array) -> Array:
    """Fisher information F = [[ψ′(α) − ψ′(α+β), −ψ′(α+β)], [−ψ′(α+β), ψ′(β) − ψ′(α+β)]].

    Over (α, β), with ψ′ the trigamma function.

    The score is ln y (or ln(1 − y)) plus constants, so F = −E[∂²ln Beta] needs only ψ′.
    Shape ``broadcast(α, β).shape + (2, 2)``.
    """
    xp = _xp(a)
    t_ab = trigamma(xp, a + b)
    return matrix_2x2(xp, trigamma(xp, a) - t_ab, -t_ab, -t_ab, trigamma(xp, b) - t_ab)


def _check_value(c: CheckedLike, v: Array) -> Array:
    xp = c.xp
    y = xp.astype(v, c.compute_dtype)
    reject(
        xp,
        ~((y > 0) & (y < 1)),
        xp.astype(v, xp.float64) if v.dtype != y.dtype else v,
        lambda i, x: (
            f"value: {x} at index {i} is outside (0, 1); a Beta value lies strictly "
            f"between 0 and 1 (in {c.compute_dtype})"
        ),
    )
    return y


SPEC = DistributionSpec(
    name="beta",
    parameters=("concentration1", "concentration0"),
    forms={
        "concentration": Form(
            params=("concentration1", "concentration0"),
            log_prob=log_prob,
            score=score,
            entropy=entropy,
            entropy_grad=entropy_grad,
            fisher=fisher,
            view="concentration1 α, concentration0 β",
        )
    },
    choose_form=all_of("beta", ("concentration1", "concentration0"), "concentration"),
    param_event_dims=0,
    value_event_dims=0,
    support="y ∈ (0, 1)",
    check_params=lambda xp, arrs, form: check_positive_finite(
        xp, arrs, ("concentration1", "concentration0")
    ),
    check_value=_check_value,
    flags={
        "concentration1": Flag("ALPHA", "the concentration α > 0 (of the value)"),
        "concentration0": Flag("BETA", "the concentration β > 0 (of 1 − value)"),
    },
    torch_name="Beta",
    examples=("--concentration1 2 --concentration0 3 --value 0.3",),
)
