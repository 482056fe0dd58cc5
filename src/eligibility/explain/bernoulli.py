"""The Bernoulli eligibility, derived: Williams' Bernoulli(-logistic) unit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from eligibility import api
from eligibility.distributions import bernoulli as bernoulli_kernels
from eligibility.explain import outline
from eligibility.explain.autograd import Case
from eligibility.explain.doc import Equation, Math, Section, Table, equation, paragraph


@dataclass(frozen=True)
class BernoulliRows:
    """The numbers of a Bernoulli derivation: units on the last axis, leading axes are rows."""

    value: np.ndarray
    p: np.ndarray
    log_prob: np.ndarray
    score: np.ndarray
    logits: np.ndarray
    score_logits: np.ndarray | None
    """e_z = y − σ(z) (None where p ∈ {0, 1} has no finite logit)."""
    score_probs: np.ndarray | None
    """e_p = (y − p) / (p (1 − p)) (None where σ(z) rounds to 0 or 1)."""
    score_categorical: np.ndarray
    """(e₀, e₁) of the same unit as a categorical over {0, 1} with weights (1 − p, p)."""
    features: np.ndarray | None
    form: str
    through: str
    note: str | None
    """Why the other view is missing, if it is."""


def derive(g: outline.Given) -> outline.Derived:
    """The Bernoulli derivation (no total count), a layer of independent units."""
    form = g.form
    t = g.theta[form]
    shape = tuple(np.broadcast_shapes(t.shape, g.value.shape))
    tb = np.broadcast_to(t, shape)
    yb = np.broadcast_to(g.value.astype(np.float64), shape)
    lp = outline.as_float64(api.log_prob("bernoulli", yb, **{form: tb}))
    e = outline.as_float64(api.score("bernoulli", yb, **{form: tb})[form])
    extra: list[tuple[str, Case, dict[str, np.ndarray]]] = []
    if form == "probs":
        pb = tb
        with np.errstate(divide="ignore"):
            z = np.log(pb) - np.log1p(-pb)
        other, t_other = "logits", z
        missing = "p ∈ {0, 1} has infinite logits, so the logits view is not shown."
    else:
        z = tb
        pb = outline.as_float64(bernoulli_kernels.sigmoid(z))
        other, t_other = "probs", pb
        missing = "σ(z) rounds to 0 or 1 here, so the probs view is not shown."
    note = None
    try:
        e_other = outline.as_float64(api.score("bernoulli", yb, **{other: t_other})[other])
    except ValueError:
        e_other, note = None, missing
        other_view: dict[str, Any] = {}
    else:
        other_view = {other: t_other, "score": {other: e_other}}
        extra.append(
            ("other_view.score", Case("bernoulli", {other: t_other}, yb), {other: e_other})
        )
    e_z, e_p = (e_other, e) if form == "probs" else (e, e_other)
    # A Bernoulli unit is a categorical over {0, 1} with weights (1 − p, p) / logits (0, z).
    two = np.stack([1.0 - pb, pb], axis=-1)
    e_cat = outline.as_float64(api.score("categorical", yb.astype(np.int64), probs=two)["probs"])
    # Units sit on the last axis (a row); leading axes are rows.
    units_shape = shape if shape else (1,)
    batch = units_shape[:-1]
    per_unit = [None if v is None else v.reshape(units_shape) for v in (yb, pb, lp, e, z, e_z, e_p)]
    xb = outline.row_features(g.features, batch)
    e_cat = e_cat.reshape((*units_shape, 2))
    rows = BernoulliRows(*per_unit, e_cat, xb, form, g.through, note)  # type: ignore[arg-type]
    if xb is not None and rows.score_logits is None:
        raise ValueError("features need finite logits; p ∈ {0, 1} has none (use 0 < p < 1)")
    linear = outline.linear_unit(
        "bernoulli", rows.score_logits, xb, {"logits": rows.logits}, rows.value, extra
    )
    return outline.Derived(
        lp=lp,
        score={form: e},
        other_view=other_view,
        linear=linear,
        case=Case("bernoulli", {form: tb}, yb),
        extra=extra,
        title=outline.title(
            "bernoulli", form, "y = " + " ".join(str(int(v)) for v in np.ravel(yb)[:8]), batch
        ),
        parts=outline.parts_by_row(batch, rows, _steps),
    )


def _steps(r: BernoulliRows) -> outline.Steps:
    """Forward pass, rule, exp (per unit), and the unit as a categorical over {0, 1}."""
    units = r.value.shape[0]
    pu = np.exp(r.log_prob)
    sym = "p" if r.form == "probs" else "z"
    exp = None if r.through == "log" else outline.unit_exp_section(units, [(sym, r.score)], pu)
    forward, rule = _forward_and_rule(r)
    return outline.Steps(forward, rule, exp, None, _as_categorical(r))


def _forward_and_rule(r: BernoulliRows) -> tuple[Section, Section]:
    """P(y) and ln P(y) per unit, then Williams' rule with the numbers put in."""
    eq, fwd, rule_eq, tab = _view(r)
    forward = Section("Forward pass", (eq, fwd))
    rule = Section(
        "The rule: Williams' Bernoulli unit",
        (
            paragraph(
                "Williams (1992) calls e = ∂ ln P/∂θ the characteristic eligibility; for a "
                "Bernoulli unit it is the rule of his paper, and REINFORCE moves θ by "
                "Δθ = α (r − baseline) e. Each unit is independent:"
            ),
            rule_eq,
            tab,
            equation(Math("e = "), r.score, "   " + outline.log_note(r.form)),
        ),
    )
    return forward, rule


def _view(r: BernoulliRows) -> tuple[Equation, Table, Equation, Table]:
    """The view's forward equation and table, its rule and its substituted table."""
    form = r.form
    y, p, e, lp = r.value, r.p, r.score, r.log_prob
    pu = np.exp(lp)
    yi = [int(v) for v in y]
    if form == "probs":
        fwd = outline.unit_table(
            (Math("pᵢ"), p), (Math("yᵢ"), yi), (Math("ln P(yᵢ)"), lp), (Math("P(yᵢ)"), pu)
        )
        eq = equation(Math("P(y) = pʸ (1 − p)¹⁻ʸ,   ln P(y) = y ln p + (1 − y) ln(1 − p)"))
        rule_eq = equation(Math("e = ∂ ln P/∂p = y/p − (1 − y)/(1 − p) = (y − p) / (p (1 − p))"))
        tab = outline.unit_table(
            (Math("yᵢ"), yi),
            (Math("yᵢ − pᵢ"), y - p),
            (Math("pᵢ (1 − pᵢ)"), p * (1 - p)),
            (Math("eᵢ"), e),
        )
    else:
        z = r.logits
        fwd = outline.unit_table(
            (Math("zᵢ"), z),
            (Math("pᵢ = σ(zᵢ)"), p),
            (Math("yᵢ"), yi),
            (Math("ln P(yᵢ)"), lp),
            (Math("P(yᵢ)"), pu),
        )
        eq = equation(Math("p = σ(z) = 1 / (1 + e⁻ᶻ),   ln P(y) = y z − ln(1 + eᶻ)"))
        rule_eq = equation(Math("e = ∂ ln P/∂z = y − σ(z)"))
        tab = outline.unit_table((Math("yᵢ"), yi), (Math("σ(zᵢ)"), p), (Math("eᵢ"), e))
    return eq, fwd, rule_eq, tab


def _as_categorical(r: BernoulliRows) -> Section:
    """A Bernoulli unit is a categorical over {0, 1}; the other view (probs ↔ logits)."""
    form, note, units = r.form, r.note, r.value.shape[0]
    e_cat = r.score_categorical
    link: list[Any] = [
        paragraph(
            "A Bernoulli unit is a categorical over {0, 1} with relative weights (1 − p, p). The "
            "categorical rule eⱼ = [j = y] / w_y − 1 / Σw gives, per unit, (e₀, e₁) = ",
            *[piece for u in range(units) for piece in ((", " if u else ""), e_cat[u])],
            "; the Bernoulli p moves w₁ up and w₀ down, so e_p = e₁ − e₀ = ",
            e_cat[:, 1] - e_cat[:, 0],
            ". That is how Williams' Bernoulli rule generalises: "
            "K categories give K entries, each through the normaliser.",
        ),
    ]
    if note is not None:
        link.append(paragraph(note))
    elif form == "probs":
        link.append(
            paragraph(
                "The same unit in logits z = ln(p / (1 − p)): e_z = y − σ(z) = ",
                r.score_logits,
                " = p (1 − p) e_p (Williams' Bernoulli-logistic unit).",
            )
        )
    else:
        link.append(
            paragraph(
                "The same unit in probs p = σ(z): e_p = (y − p) / (p (1 − p)) = ",
                r.score_probs,
                " = e_z / (p (1 − p)).",
            )
        )
    names = ("z", "x", "a layer of Bernoulli-logistic units")
    link += outline.units_linear_block(r, r.score_logits, names, "ln P")
    return Section("From Bernoulli to categorical", tuple(link))
