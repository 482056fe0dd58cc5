"""The normal eligibility, derived: Williams' Gaussian unit."""

from __future__ import annotations

import numpy as np

from eligibility import api
from eligibility.explain import outline
from eligibility.explain.autograd import Case
from eligibility.explain.doc import Math, Section, equation, paragraph, table


def _normal(
    form: str,
    theta: dict[str, np.ndarray],
    y: np.ndarray,
    n: int | None,
    x: np.ndarray | None,
    through: str,
) -> outline.Derived:
    mu, sigma, yb = np.broadcast_arrays(theta["loc"], theta["scale"], y.astype(np.float64))
    lp = outline.as_float64(api.log_prob("normal", yb, loc=mu, scale=sigma))
    sc = api.score("normal", yb, loc=mu, scale=sigma)
    e_mu, e_sigma = outline.as_float64(sc["loc"]), outline.as_float64(sc["scale"])
    e_s = outline.as_float64(normal.score_log_scale(mu, sigma, yb))
    # Units sit on the last axis (a row); leading axes are rows.
    units_shape = mu.shape if mu.shape else (1,)
    batch = units_shape[:-1]
    arrs = {
        "mu": mu,
        "sigma": sigma,
        "y": yb,
        "lp": lp,
        "e_mu": e_mu,
        "e_sigma": e_sigma,
        "e_s": e_s,
    }
    rows: dict[str, Any] = {k: v.reshape(units_shape) for k, v in arrs.items()}
    rows["x"] = xb = outline.row_features(x, batch)
    extra: list[tuple[str, Case, dict[str, np.ndarray]]] = []
    linear = None
    if xb is not None:
        params = {"loc": rows["mu"], "scale": rows["sigma"]}
        linear, check = outline.linear_unit(
            "normal", rows["e_mu"], xb, params, rows["y"], pre="loc"
        )
        extra.append(check)
    return outline.Derived(
        lp=lp,
        score={"loc": e_mu, "scale": e_sigma},
        other_view={"log_scale": np.log(sigma), "score": {"log_scale": e_s}},
        linear=linear,
        case=Case("normal", {"loc": mu, "scale": sigma}, yb),
        extra=extra,
        title=outline.title(
            "normal", form, "value y = " + " ".join(f"{v:g}" for v in np.ravel(yb)[:8]), batch
        ),
        parts=outline.parts_by_row(batch, rows, lambda r: _normal_sections(r, through)),
    )


def _normal_sections(r: dict[str, Any], through: str) -> list[Section]:
    mu, sigma, y, lp = r["mu"], r["sigma"], r["y"], r["lp"]
    units = mu.shape[0]
    pu = np.exp(lp)
    d = y - mu
    secs = [
        Section(
            "Forward pass",
            (
                equation(Math("ln Num(y; μ, σ) = −(y − μ)² / (2σ²) − ln σ − ½ ln 2π")),
                table(
                    [
                        "unit",
                        Math("μᵢ"),
                        Math("σᵢ"),
                        Math("yᵢ"),
                        Math("ln N"),
                        Math("N (density)"),
                    ],
                    [
                        [u, float(mu[u]), float(sigma[u]), float(y[u]), float(lp[u]), float(pu[u])]
                        for u in range(units)
                    ],
                ),
            ),
        ),
        Section(
            "The rule: Williams' Gaussian unit",
            (
                paragraph(
                    "Williams (1992) calls e = ∂ ln N/∂θ the characteristic eligibility; for a "
                    "Gaussian unit with mean μ and standard deviation σ:"
                ),
                equation(
                    Math("e_μ = ∂ ln N/∂μ = (y − μ) / σ²,   e_σ = ∂ ln N/∂σ = ((y − μ)² − σ²) / σ³")
                ),
                table(
                    [
                        "unit",
                        Math("y − μ"),
                        Math("σ²"),
                        Math("e_μ"),
                        Math("(y − μ)² − σ²"),
                        Math("σ³"),
                        Math("e_σ"),
                    ],
                    [
                        [
                            u,
                            float(d[u]),
                            float(sigma[u] ** 2),
                            float(r["e_mu"][u]),
                            float(d[u] ** 2 - sigma[u] ** 2),
                            float(sigma[u] ** 3),
                            float(r["e_sigma"][u]),
                        ]
                        for u in range(units)
                    ],
                ),
                equation(
                    Math("e_μ = "),
                    r["e_mu"],
                    Math("   e_σ = "),
                    r["e_sigma"],
                    "   (loc.grad, scale.grad after log_prob.backward())",
                ),
            ),
        ),
    ]
    if through != "log":
        secs.append(
            outline.unit_exp_section(
                units, [("μ", r"\mu", r["e_mu"]), ("σ", r"\sigma", r["e_sigma"])], pu
            )
        )
    notes: list[Any] = [
        paragraph(
            "Nothing is renormalised here, so there are no cross terms: e_μ pushes μ towards y, "
            "e_σ widens σ when |y − μ| > σ and narrows it otherwise."
        ),
        paragraph(
            "A policy network usually outputs s = ln σ; then e_s = σ e_σ = (y − μ)² / σ² − 1 = ",
            r["e_s"],
            ".",
        ),
    ]
    if r["x"] is not None:
        notes += outline.linear_block(
            r["e_mu"],
            r["x"],
            float(np.prod(pu)),
            through,
            ("μ", "x", "a linear Gaussian unit's mean"),
            "ln N",
        )
    secs.append(Section("Reading the rule", tuple(notes)))
    return secs
