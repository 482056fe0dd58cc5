"""The multinomial eligibility, derived: n categorical draws."""

from __future__ import annotations

import numpy as np

from eligibility import api
from eligibility.explain import outline
from eligibility.explain.autograd import Case
from eligibility.explain.doc import Math, Section, equation, paragraph, table


def _multinomial(
    form: str,
    theta: dict[str, np.ndarray],
    xc: np.ndarray,
    n: int | None,
    h: np.ndarray | None,
    through: str,
) -> outline.Derived:
    assert n is not None
    t = theta[form]
    k = t.shape[-1]
    batch = tuple(np.broadcast_shapes(t.shape[:-1], xc.shape[:-1]))
    tb = np.broadcast_to(t, (*batch, k))
    xb = np.broadcast_to(xc.astype(np.float64), (*batch, k))
    lp = outline.as_float64(api.log_prob("multinomial", xb, total_count=n, **{form: tb}))
    e = outline.as_float64(api.score("multinomial", xb, total_count=n, **{form: tb})[form])
    hb = outline.row_features(h, batch)
    pi, z, w, e_other, other, extra = outline.softmax_views("multinomial", form, tb, xb, n)
    e_z = e_other if form == "probs" else e
    # x is a sum of n one-hot draws: add up the categorical eligibilities of the draws
    per_draw = np.stack(
        [outline.as_float64(api.score("categorical", i, **{form: tb})[form]) for i in range(k)],
        axis=-2,
    )
    summed = np.sum(xb[..., :, None] * per_draw, axis=-2)
    linear = None
    if hb is not None:
        linear, check = outline.linear_unit("multinomial", e_z, hb, {"logits": z}, xb, n)
        extra.append(check)
    rows = {
        "x": xb,
        "pi": pi,
        "lp": lp,
        "p": np.exp(lp),
        "e": e,
        "e_z": e_z,
        "e_w": e_other if form == "logits" else e,
        "z": z,
        "w": w,
        "summed": summed,
        "h": hb,
    }
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
        parts=outline.parts_by_row(
            batch, rows, lambda r: _multinomial_sections(r, k, n, form, through)
        ),
    )


def _multinomial_sections(
    r: dict[str, Any], k: int, n: int, form: str, through: str
) -> list[Section]:
    x, pi, e = r["x"], r["pi"], r["e"]
    xi = [int(c) for c in x]
    if form == "probs":
        w = r["w"]
        s = float(np.sum(w))
        fwd_eq = equation(Math("π = w / Σⱼ wⱼ"), "   with ", Math("Σⱼ wⱼ = "), s)
        fwd_tab = table(
            ["i", Math("wᵢ"), Math("πᵢ"), Math("xᵢ")],
            [[i, float(w[i]), float(pi[i]), xi[i]] for i in range(k)],
        )
        rule = equation(
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
        sym = Math("w")
    else:
        z = r["z"]
        fwd_eq = equation(Math("π = softmax(z)"))
        fwd_tab = table(
            ["i", Math("zᵢ"), Math("πᵢ"), Math("xᵢ")],
            [[i, float(z[i]), float(pi[i]), xi[i]] for i in range(k)],
        )
        rule = equation(
            Math("ln P(x) = const + Σᵢ xᵢ zᵢ − n ln Σⱼ exp zⱼ   ⇒   e = x − n softmax(z)")
        )
        tab = table(
            ["i", Math("xᵢ"), Math("n πᵢ"), Math("eᵢ")],
            [[i, xi[i], float(n * pi[i]), float(e[i])] for i in range(k)],
        )
        sym = Math("z")
    secs = [
        Section(
            "Forward pass",
            (
                fwd_eq,
                fwd_tab,
                equation(
                    Math("ln P(x) = ln n! − Σᵢ ln xᵢ! + Σᵢ xᵢ ln πᵢ = "),
                    r["lp"],
                    "   (log_prob)",
                ),
                equation(Math("P(x) = exp(ln P(x)) = "), r["p"], "   (prob)"),
            ),
        ),
        Section(
            f"The rule: the characteristic eligibility e = ∂ ln P(x)/∂{sym[0]}",
            (
                paragraph(
                    "Williams (1992) calls e = ∂ ln π/∂θ the characteristic eligibility; "
                    "REINFORCE moves θ by Δθ = α (r − baseline) e. The factorials do not depend "
                    "on the parameters, so only Σᵢ xᵢ ln πᵢ matters:"
                ),
                rule,
                paragraph(f"With the numbers (n = {n}), component by component:"),
                tab,
                equation(Math("e = "), e, "   " + outline.log_note(form)),
            ),
        ),
    ]
    if through != "log":
        secs.append(outline.exp_section(r, k, sym, outline.exp_note(form), Math("P(x)")))
    why: list[Any] = [
        paragraph(
            f"x is the sum of n = {n} one-hot categorical draws, and ln P(x) adds their "
            "log-probabilities, so e is the sum of their categorical eligibilities "
            "(Σᵢ xᵢ · e_categorical(i) = ",
            r["summed"],
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
                float(np.sum(r["w"] * e)),
                "; weights ×c give eligibilities ÷c.",
            )
        )
        why.append(
            paragraph(
                "The same unit in logits z = ln w: e_z = x − n softmax(z) = ", r["e_z"], " = w ⊙ e."
            )
        )
    else:
        why.append(paragraph("Shift invariance: Σᵢ eᵢ = ", float(np.sum(e)), "."))
        why.append(
            paragraph(
                "The same unit in relative weights w = exp(z − max z): "
                "eᵢ = xᵢ / wᵢ − n / Σⱼ wⱼ gives ",
                r["e_w"],
                " = e / w.",
            )
        )
    if r["h"] is not None:
        why += outline.linear_block(
            r["e_z"],
            r["h"],
            r["p"],
            through,
            ("z", "h", "a linear softmax unit (h, since x holds the counts)"),
            Math("ln P(x)"),
        )
    secs.append(Section("Why: n categorical draws", tuple(why)))
    return secs
