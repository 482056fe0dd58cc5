"""The multinomial eligibility, derived: n categorical draws."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from eligibility import api
from eligibility.explain import outline
from eligibility.explain.autograd import Case
from eligibility.explain.doc import Equation, Math, Section, Table, equation, paragraph, table


@dataclass(frozen=True)
class MultinomialRows:
    """The numbers of a multinomial derivation, batch arrays (one row each inside the steps)."""

    counts: np.ndarray
    pi: np.ndarray
    log_prob: np.ndarray
    prob: np.ndarray
    score: np.ndarray
    score_logits: np.ndarray
    """e_z = x − n softmax(z), whichever view was given."""
    score_weights: np.ndarray
    """e_w = x / w − n / Σw, whichever view was given."""
    logits: np.ndarray
    weights: np.ndarray
    summed_draws: np.ndarray
    """Σᵢ xᵢ · e_categorical(i): the eligibilities of the n draws, added up."""
    features: np.ndarray | None
    total_count: int
    form: str
    through: str


def derive(g: outline.Given) -> outline.Derived:
    """The multinomial derivation: x is a sum of ``n`` one-hot categorical draws."""
    form, xc, n, through = g.form, g.value, g.total_count, g.through
    assert n is not None
    t = g.theta[form]
    k = t.shape[-1]
    batch = tuple(np.broadcast_shapes(t.shape[:-1], xc.shape[:-1]))
    tb = np.broadcast_to(t, (*batch, k))
    xb = np.broadcast_to(xc.astype(np.float64), (*batch, k))
    lp = outline.as_float64(api.log_prob("multinomial", xb, total_count=n, **{form: tb}))
    e = outline.as_float64(api.score("multinomial", xb, total_count=n, **{form: tb})[form])
    hb = outline.row_features(g.features, batch)
    pi, z, w, e_other, other, extra = outline.softmax_views("multinomial", form, tb, xb, n)
    e_z = e_other if form == "probs" else e
    # x is a sum of n one-hot draws: add up the categorical eligibilities of the draws
    per_draw = np.stack(
        [outline.as_float64(api.score("categorical", i, **{form: tb})[form]) for i in range(k)],
        axis=-2,
    )
    summed = np.sum(xb[..., :, None] * per_draw, axis=-2)
    linear = outline.linear_unit("multinomial", e_z, hb, {"logits": z}, xb, extra, n)
    e_w = e_other if form == "logits" else e
    rows = MultinomialRows(xb, pi, lp, np.exp(lp), e, e_z, e_w, z, w, summed, hb, n, form, through)
    what = "counts x = " + " ".join(str(int(c)) for c in xb.reshape(-1, k)[0])
    return outline.Derived(
        lp=lp,
        score={form: e},
        other_view=other,
        linear=linear,
        case=Case("multinomial", {form: tb}, xb, n),
        extra=extra,
        title=outline.title(
            "multinomial", form, f"n = {n}, " + what if batch == () else f"n = {n}", batch
        ),
        parts=outline.parts_by_row(batch, rows, _steps),
    )


def _steps(r: MultinomialRows) -> outline.Steps:
    """Forward pass, rule, exp, and why: n categorical draws (other views inside)."""
    forward, rule = _forward_and_rule(r)
    through_exp = None
    if r.through != "log":
        sym = "w" if r.form == "probs" else "z"
        note = outline.exp_note(r.form)
        through_exp = outline.exp_section(r.prob, r.score, None, sym, note, "P(x)")
    return outline.Steps(forward, rule, through_exp, _why(r))


def _forward_and_rule(r: MultinomialRows) -> tuple[Section, Section]:
    """The forward pass and the rule, in the view given (weights w or logits z)."""
    n, form, e = r.total_count, r.form, r.score
    fwd_eq, fwd_tab, rule_eq, tab, sym = _view(r)
    forward = Section(
        "Forward pass",
        (
            fwd_eq,
            fwd_tab,
            equation(
                Math("ln P(x) = ln n! − Σᵢ ln xᵢ! + Σᵢ xᵢ ln πᵢ = "), r.log_prob, "   (log_prob)"
            ),
            equation(Math("P(x) = exp(ln P(x)) = "), r.prob, "   (prob)"),
        ),
    )
    rule = Section(
        f"The rule: the characteristic eligibility e = ∂ ln P(x)/∂{sym}",
        (
            paragraph(
                "Williams (1992) calls e = ∂ ln π/∂θ the characteristic eligibility; "
                "REINFORCE moves θ by Δθ = α (r − baseline) e. The factorials do not depend "
                "on the parameters, so only Σᵢ xᵢ ln πᵢ matters:"
            ),
            rule_eq,
            paragraph(f"With the numbers (n = {n}), component by component:"),
            tab,
            equation(Math("e = "), e, "   " + outline.log_note(form)),
        ),
    )
    return forward, rule


def _view(r: MultinomialRows) -> tuple[Equation, Table, Equation, Table, str]:
    """The view's forward equation and table, its rule and its substituted table, its symbol."""
    k, n = r.counts.shape[-1], r.total_count
    x, pi, e = r.counts, r.pi, r.score
    xi = [int(c) for c in x]
    if r.form == "probs":
        w = r.weights
        s = float(np.sum(w))
        fwd_eq = equation(Math("π = w / Σⱼ wⱼ"), "   with ", Math("Σⱼ wⱼ = "), s)
        fwd_tab = table(
            ["i", Math("wᵢ"), Math("πᵢ"), Math("xᵢ")],
            [[i, float(w[i]), float(pi[i]), xi[i]] for i in range(k)],
        )
        rule_eq = equation(
            Math("ln P(x) = const + Σᵢ xᵢ ln wᵢ − n ln Σⱼ wⱼ   ⇒   eᵢ = xᵢ / wᵢ − n / Σⱼ wⱼ")
        )
        ratio = np.where(x > 0, x / np.where(w > 0, w, 1.0), 0.0)
        tab = table(
            [
                "i",
                Math("xᵢ"),
                Math("xᵢ / wᵢ"),
                Math("−n / Σⱼ wⱼ"),
                Math("eᵢ"),
            ],
            [[i, xi[i], float(ratio[i]), -n / s, float(e[i])] for i in range(k)],
        )
        sym = "w"
    else:
        z = r.logits
        fwd_eq = equation(Math("π = softmax(z)"))
        fwd_tab = table(
            ["i", Math("zᵢ"), Math("πᵢ"), Math("xᵢ")],
            [[i, float(z[i]), float(pi[i]), xi[i]] for i in range(k)],
        )
        rule_eq = equation(
            Math("ln P(x) = const + Σᵢ xᵢ zᵢ − n ln Σⱼ exp zⱼ   ⇒   e = x − n softmax(z)")
        )
        tab = table(
            ["i", Math("xᵢ"), Math("n πᵢ"), Math("eᵢ")],
            [[i, xi[i], float(n * pi[i]), float(e[i])] for i in range(k)],
        )
        sym = "z"
    return fwd_eq, fwd_tab, rule_eq, tab, sym


def _why(r: MultinomialRows) -> Section:
    """x is n one-hot draws: e is the sum of their categorical eligibilities; other views."""
    n, form, e, through = r.total_count, r.form, r.score, r.through
    why: list[Any] = [
        paragraph(
            f"x is the sum of n = {n} one-hot categorical draws, and ln P(x) adds their "
            "log-probabilities, so e is the sum of their categorical eligibilities "
            "(Σᵢ xᵢ · e_categorical(i) = ",
            r.summed_draws,
            "). With n = 1 it is the categorical "
            "rule; categories never drawn (xᵢ = 0) still get "
            + (
                "−n / Σⱼ wⱼ, through the normaliser."
                if form == "probs"
                else "−n πᵢ, through the normaliser."
            ),
        ),
    ]
    if form == "probs":
        why.append(
            paragraph(
                "Scale invariance: Σᵢ wᵢ eᵢ = ",
                float(np.sum(r.weights * e)),
                "; weights ×c give eligibilities ÷c.",
            )
        )
        why.append(
            paragraph(
                "The same unit in logits z = ln w: e_z = x − n softmax(z) = ",
                r.score_logits,
                " = w ⊙ e.",
            )
        )
    else:
        why.append(paragraph("Shift invariance: Σᵢ eᵢ = ", float(np.sum(e)), "."))
        why.append(
            paragraph(
                "The same unit in relative weights w = exp(z − max z): "
                "eᵢ = xᵢ / wᵢ − n / Σⱼ wⱼ gives ",
                r.score_weights,
                " = e / w.",
            )
        )
    if r.features is not None:
        why += outline.linear_block(
            r.score_logits,
            r.features,
            r.prob,
            through,
            ("z", "h", "a linear softmax unit (h, since x holds the counts)"),
            "ln P(x)",
        )
    return Section("Why: n categorical draws", tuple(why))
