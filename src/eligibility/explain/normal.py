"""The normal eligibility, derived: Williams' Gaussian unit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from eligibility import api
from eligibility.distributions import normal as normal_kernels
from eligibility.explain import outline
from eligibility.explain.autograd import Case
from eligibility.explain.doc import Math, Section, equation, paragraph


@dataclass(frozen=True)
class NormalRows:
    """The numbers of a normal derivation: units on the last axis, leading axes are rows."""

    loc: np.ndarray
    scale: np.ndarray
    value: np.ndarray
    log_prob: np.ndarray
    score_loc: np.ndarray
    score_scale: np.ndarray
    score_log_scale: np.ndarray
    """e_s = σ e_σ, the eligibility of s = ln σ."""
    features: np.ndarray | None
    through: str


def derive(g: outline.Given) -> outline.Derived:
    """The normal derivation (no total count), a layer of independent Gaussian units."""
    mu, sigma, yb = np.broadcast_arrays(
        g.theta["loc"], g.theta["scale"], g.value.astype(np.float64)
    )
    lp = outline.as_float64(api.log_prob("normal", yb, loc=mu, scale=sigma))
    sc = api.score("normal", yb, loc=mu, scale=sigma)
    e_mu, e_sigma = outline.as_float64(sc["loc"]), outline.as_float64(sc["scale"])
    e_s = outline.as_float64(normal_kernels.score_log_scale(mu, sigma, yb))
    # Units sit on the last axis (a row); leading axes are rows.
    units_shape = mu.shape if mu.shape else (1,)
    batch = units_shape[:-1]
    per_unit = [v.reshape(units_shape) for v in (mu, sigma, yb, lp, e_mu, e_sigma, e_s)]
    xb = outline.row_features(g.features, batch)
    rows = NormalRows(*per_unit, xb, g.through)
    extra: list[tuple[str, Case, dict[str, np.ndarray]]] = []
    params = {"loc": rows.loc, "scale": rows.scale}
    linear = outline.linear_unit("normal", rows.score_loc, xb, params, rows.value, extra, pre="loc")
    return outline.Derived(
        lp=lp,
        score={"loc": e_mu, "scale": e_sigma},
        other_view={"log_scale": np.log(sigma), "score": {"log_scale": e_s}},
        linear=linear,
        case=Case("normal", {"loc": mu, "scale": sigma}, yb),
        extra=extra,
        title=outline.title(
            "normal", g.form, "value y = " + " ".join(f"{v:g}" for v in np.ravel(yb)[:8]), batch
        ),
        parts=outline.parts_by_row(batch, rows, _steps),
        continuous=True,
    )


def _steps(r: NormalRows) -> outline.Steps:
    """Forward pass, Williams' Gaussian rule, exp (per unit), and reading the rule."""
    units = r.loc.shape[0]
    exp = None
    if r.through != "log":
        es = [("μ", r.score_loc), ("σ", r.score_scale)]
        exp = outline.unit_exp_section(units, es, np.exp(r.log_prob))
    forward, rule = _forward_and_rule(r)
    return outline.Steps(forward, rule, exp, None, _reading(r))


def _forward_and_rule(r: NormalRows) -> tuple[Section, Section]:
    """ln N per unit, then e_μ and e_σ with the numbers put in."""
    mu, sigma, y, lp = r.loc, r.scale, r.value, r.log_prob
    pu = np.exp(lp)
    d = y - mu
    forward = Section(
        "Forward pass",
        (
            equation(Math("ln N(y; μ, σ) = −(y − μ)² / (2σ²) − ln σ − ½ ln 2π")),
            outline.unit_table(
                (Math("μᵢ"), mu),
                (Math("σᵢ"), sigma),
                (Math("yᵢ"), y),
                (Math("ln N"), lp),
                (Math("N (density)"), pu),
            ),
        ),
    )
    rule = Section(
        "The rule: Williams' Gaussian unit",
        (
            paragraph(
                "Williams (1992) calls e = ∂ ln N/∂θ the characteristic eligibility; for a "
                "Gaussian unit with mean μ and standard deviation σ:"
            ),
            equation(
                Math("e_μ = ∂ ln N/∂μ = (y − μ) / σ²,   e_σ = ∂ ln N/∂σ = ((y − μ)² − σ²) / σ³")
            ),
            outline.unit_table(
                (Math("y − μ"), d),
                (Math("σ²"), sigma**2),
                (Math("e_μ"), r.score_loc),
                (Math("(y − μ)² − σ²"), d**2 - sigma**2),
                (Math("σ³"), sigma**3),
                (Math("e_σ"), r.score_scale),
            ),
            equation(
                Math("e_μ = "),
                r.score_loc,
                Math("   e_σ = "),
                r.score_scale,
                "   (loc.grad, scale.grad after log_prob.backward())",
            ),
        ),
    )
    return forward, rule


def _reading(r: NormalRows) -> Section:
    """No cross terms; the log-scale view; the linear unit on the mean."""
    notes: list[Any] = [
        paragraph(
            "Nothing is renormalised here, so there are no cross terms: e_μ pushes μ towards y, "
            "e_σ widens σ when |y − μ| > σ and narrows it otherwise."
        ),
        paragraph(
            "A policy network usually outputs s = ln σ; then e_s = σ e_σ = (y − μ)² / σ² − 1 = ",
            r.score_log_scale,
            ".",
        ),
    ]
    names = ("μ", "x", "a linear Gaussian unit's mean")
    notes += outline.units_linear_block(r, r.score_loc, names, "ln N")
    return Section("Reading the rule", tuple(notes))
