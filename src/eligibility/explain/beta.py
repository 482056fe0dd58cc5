"""The Beta eligibility, derived: a unit on (0, 1) with concentrations α and β (digamma rule)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from eligibility import api
from eligibility._array import digamma
from eligibility.distributions import beta as beta_kernels
from eligibility.explain import outline
from eligibility.explain.autograd import Case
from eligibility.explain.doc import Math, Section, equation, paragraph


@dataclass(frozen=True)
class BetaRows:
    """The numbers of a Beta derivation: units on the last axis, leading axes are rows."""

    alpha: np.ndarray
    beta: np.ndarray
    value: np.ndarray
    log_prob: np.ndarray
    log_beta_function: np.ndarray
    """ln B(α, β) = ln Γ(α) + ln Γ(β) − ln Γ(α + β), the normaliser."""
    score_alpha: np.ndarray
    score_beta: np.ndarray
    through: str


def derive(g: outline.Given) -> outline.Derived:
    """The Beta derivation (no total count), a layer of independent units on (0, 1)."""
    if g.features is not None:
        raise ValueError(
            "features: explain derives no linear unit for beta (its concentrations must stay "
            "positive, so a network feeds them through softplus or exp); leave out features"
        )
    alpha, beta, yb = np.broadcast_arrays(
        g.theta["concentration1"], g.theta["concentration0"], g.value.astype(np.float64)
    )
    params = {"concentration1": alpha, "concentration0": beta}
    lp = outline.as_float64(api.log_prob("beta", yb, **params))
    sc = api.score("beta", yb, **params)
    e_a, e_b = outline.as_float64(sc["concentration1"]), outline.as_float64(sc["concentration0"])
    log_b = outline.as_float64(beta_kernels.log_beta(alpha, beta))
    units_shape = alpha.shape if alpha.shape else (1,)
    per_unit = [v.reshape(units_shape) for v in (alpha, beta, yb, lp, log_b, e_a, e_b)]
    rows = BetaRows(*per_unit, g.through)
    return outline.Derived(
        lp=lp,
        score={"concentration1": e_a, "concentration0": e_b},
        other_view={
            "log_concentration1": np.log(alpha),
            "log_concentration0": np.log(beta),
            "score": {"log_concentration1": alpha * e_a, "log_concentration0": beta * e_b},
        },
        linear=None,
        case=Case("beta", params, yb),
        extra=[],
        title=outline.title(
            "beta",
            g.form,
            "value y = " + " ".join(f"{v:g}" for v in np.ravel(yb)[:8]),
            units_shape[:-1],
        ),
        parts=outline.parts_by_row(units_shape[:-1], rows, _steps),
        continuous=True,
    )


def _steps(r: BetaRows) -> outline.Steps:
    """Forward pass, the digamma rule, exp (per unit), and reading the rule."""
    exp = None
    if r.through != "log":
        es = [("α", r.score_alpha), ("β", r.score_beta)]
        exp = outline.unit_exp_section(r.alpha.shape[0], es, np.exp(r.log_prob))
    return outline.Steps(_forward(r), _rule(r), exp, None, _reading(r))


def _forward(r: BetaRows) -> Section:
    """ln Beta(y; α, β) per unit, with its normaliser ln B(α, β)."""
    return Section(
        "Forward pass",
        (
            equation(
                Math("ln Beta(y; α, β) = (α − 1) ln y + (β − 1) ln(1 − y) − ln B(α, β)"),
            ),
            equation(Math("ln B(α, β) = ln Γ(α) + ln Γ(β) − ln Γ(α + β)")),
            outline.unit_table(
                (Math("αᵢ"), r.alpha),
                (Math("βᵢ"), r.beta),
                (Math("yᵢ"), r.value),
                (Math("ln B(α, β)"), r.log_beta_function),
                (Math("ln Beta"), r.log_prob),
                (Math("Beta (density)"), np.exp(r.log_prob)),
            ),
        ),
    )


def _rule(r: BetaRows) -> Section:
    """e_α and e_β through the digamma function, with the numbers put in."""
    psi_a, psi_b = digamma(np, r.alpha), digamma(np, r.beta)
    psi_ab = digamma(np, r.alpha + r.beta)
    return Section(
        "The rule: the characteristic eligibility of a Beta unit",
        (
            paragraph(
                "Williams (1992) calls e = ∂ ln π/∂θ the characteristic eligibility; REINFORCE "
                "moves θ along (r − baseline) e. Both concentrations sit in the normaliser "
                "ln B(α, β), whose derivatives are digammas ψ = (ln Γ)′:"
            ),
            equation(Math("e_α = ∂ ln Beta/∂α = ln y − ψ(α) + ψ(α + β)")),
            equation(Math("e_β = ∂ ln Beta/∂β = ln(1 − y) − ψ(β) + ψ(α + β)")),
            outline.unit_table(
                (Math("ln y"), np.log(r.value)),
                (Math("ψ(α)"), psi_a),
                (Math("ψ(α + β)"), psi_ab),
                (Math("e_α"), r.score_alpha),
                (Math("ln(1 − y)"), np.log1p(-r.value)),
                (Math("ψ(β)"), psi_b),
                (Math("e_β"), r.score_beta),
            ),
            equation(
                Math("e_α = "),
                r.score_alpha,
                Math("   e_β = "),
                r.score_beta,
                "   (concentration1.grad, concentration0.grad after log_prob.backward())",
            ),
        ),
    )


def _reading(r: BetaRows) -> Section:
    """Zero mean under the policy; the log-concentration view a network outputs."""
    mean_log_y = digamma(np, r.alpha) - digamma(np, r.alpha + r.beta)
    blocks: list[Any] = [
        paragraph(
            "Under the policy E[ln y] = ψ(α) − ψ(α + β) = ",
            mean_log_y,
            ", so e_α = ln y − E[ln y] is positive exactly when y lands nearer 1 than usual "
            "(in log terms), and raising α moves mass towards 1; e_β mirrors it with ln(1 − y). "
            "Both have mean zero under the policy, as every eligibility does.",
        ),
        paragraph(
            "A bounded action low + (high − low) y never leaves its interval, so unlike a "
            "clipped normal the rule has no clipping bias at the bounds (Chou et al., 2017).",
        ),
        paragraph(
            "A policy network usually outputs s = ln α (or a softplus) to keep α > 0; then "
            "e_s = α e_α = ",
            r.alpha * r.score_alpha,
            " and, for t = ln β, e_t = β e_β = ",
            r.beta * r.score_beta,
            ".",
        ),
    ]
    return Section("Reading the rule", tuple(blocks))
