"""The categorical eligibility, derived: probs (relative weights) or logits."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from eligibility import api
from eligibility.explain import outline
from eligibility.explain.autograd import Case
from eligibility.explain.doc import Block, Math, Section, equation, paragraph, table

TORCH_PROBS_NOTE = (
    "The `probs` argument must be non-negative, finite and have a non-zero sum, and it will be "
    "normalized to sum to 1 along the last dimension."
)
"""torch's own statement that ``probs`` are relative weights: the docstring of
``torch.distributions.Categorical`` (:data:`TORCH_PROBS_SOURCE`), quoted word for word."""

TORCH_PROBS_SOURCE = "torch/distributions/categorical.py, torch 2.13.0"
"""Where :data:`TORCH_PROBS_NOTE` was read (a test holds it against the installed torch)."""


@dataclass(frozen=True)
class CategoricalRows:
    """The numbers of a categorical derivation, batch arrays (one row each inside the steps)."""

    action: np.ndarray
    pi: np.ndarray
    log_prob: np.ndarray
    prob: np.ndarray
    score: np.ndarray
    onehot: np.ndarray
    score_logits: np.ndarray
    """e_z = onehot(a) − softmax(z), whichever view was given."""
    logits: np.ndarray
    weights: np.ndarray
    features: np.ndarray | None
    through: str
    weight_sum: np.ndarray | None = None
    score_x100: np.ndarray | None = None
    """probs form: the eligibility with every weight ×100."""
    log_prob_x100: np.ndarray | None = None
    score_simplex: np.ndarray | None = None
    """probs form: the rule read at w = π (Σw = 1)."""
    score_weights: np.ndarray | None = None
    """logits form: the eligibility of the relative weights w = exp(z − max z)."""
    score_shifted: np.ndarray | None = None
    """logits form: the eligibility with every logit +100."""


def derive(g: outline.Given) -> outline.Derived:
    """The categorical derivation (a categorical has no total count)."""
    form = g.form
    t = g.theta[form]
    k = t.shape[-1]
    batch = tuple(np.broadcast_shapes(t.shape[:-1], g.value.shape))
    tb = np.broadcast_to(t, (*batch, k))
    ab = np.broadcast_to(g.value, batch).astype(np.int64)
    lp = outline.as_float64(api.log_prob("categorical", ab, **{form: tb}))
    e = outline.as_float64(api.score("categorical", ab, **{form: tb})[form])
    xb = outline.row_features(g.features, batch)
    pi, z, w, e_other, other, extra = outline.softmax_views("categorical", form, tb, ab, None)
    e_z = e_other if form == "probs" else e
    onehot = (np.arange(k) == ab[..., None]).astype(np.float64)
    rows = CategoricalRows(ab, pi, lp, np.exp(lp), e, onehot, e_z, z, w, xb, g.through)
    if form == "probs":
        rows = replace(
            rows,
            weight_sum=np.sum(w, axis=-1),
            score_x100=outline.as_float64(api.score("categorical", ab, probs=100.0 * w)["probs"]),
            log_prob_x100=outline.as_float64(api.log_prob("categorical", ab, probs=100.0 * w)),
            score_simplex=outline.as_float64(api.score("categorical", ab, probs=pi)["probs"]),
        )
        steps = _probs_steps
    else:
        shifted = api.score("categorical", ab, logits=z + 100.0)["logits"]
        rows = replace(rows, score_weights=e_other, score_shifted=outline.as_float64(shifted))
        steps = _logits_steps
    linear = outline.linear_unit("categorical", e_z, xb, {"logits": z}, ab, extra)
    what = f"action a = {int(ab[()])}" if batch == () else "one action per row"
    return outline.Derived(
        lp=lp,
        score={form: e},
        other_view=other,
        linear=linear,
        case=Case("categorical", {form: tb}, ab),
        extra=extra,
        title=outline.title("categorical", form, what, batch),
        parts=outline.parts_by_row(batch, rows, steps),
    )


def _exp(r: CategoricalRows, sym: str, form: str) -> Section | None:
    """∂πₐ/∂θ = πₐ e (None when only ln π is differentiated)."""
    if r.through == "log":
        return None
    return outline.exp_section(r.prob, r.score, r.action, sym, outline.exp_note(form))


def _forward(
    r: CategoricalRows, definition: Block, column: tuple[str, np.ndarray], log_prob: tuple[Any, ...]
) -> Section:
    """Forward pass: π's definition, (θᵢ, πᵢ) a row per category, ln πₐ = … and πₐ."""
    name, theta = column
    return Section(
        "Forward pass",
        (
            definition,
            table(
                ["i", Math(name), Math("πᵢ")],
                [[i, float(theta[i]), float(r.pi[i])] for i in range(theta.shape[-1])],
                mark=r.action,
            ),
            equation(*log_prob, Math(" = "), r.log_prob, "   (log_prob)"),
            equation(Math("πₐ = exp(ln πₐ) = "), r.prob, "   (prob)"),
        ),
    )


def _rule(
    r: CategoricalRows,
    form: str,
    why: str,
    rule: str,
    numbers: Block,
    components: tuple[list[object], list[list[object]]],
) -> Section:
    """The rule's section for the view ``form``: Williams' definition of e, the ``rule`` derived.

    Then ``numbers`` (what is put in), the ``components`` table (a header and a row per
    category, the action marked) and e itself.
    """
    theta = "w" if form == "probs" else "z"
    header, rows = components
    return Section(
        f"The rule: the characteristic eligibility e = ∂ ln πₐ/∂{theta}",
        (
            paragraph(
                "Williams (1992) calls e = ∂ ln πₐ/∂θ the characteristic eligibility of the "
                f"parameters θ; REINFORCE moves them by Δθ = α (r − baseline) e. Here θ = {theta}, "
                + why
            ),
            equation(Math(rule)),
            numbers,
            table(header, rows, mark=r.action),
            equation(Math("e = "), r.score, "   " + outline.log_note(form)),
        ),
    )


def _probs_steps(r: CategoricalRows) -> outline.Steps:
    """Forward pass, rule, exp, why not zero, and the logits view, for relative weights w."""
    k = r.weights.shape[-1]
    forward, rule = _probs_forward_and_rule(r, k)
    return outline.Steps(forward, rule, _exp(r, "w", "probs"), _probs_why(r), _logits_view(r, k))


def _probs_forward_and_rule(r: CategoricalRows, k: int) -> tuple[Section, Section]:
    """π = w / Σw, then eᵢ = δᵢₐ / wₐ − 1 / Σⱼ wⱼ with the numbers put in."""
    a, w, s, e = r.action, r.weights, r.weight_sum, r.score
    wa = float(w[a])
    forward = _forward(
        r,
        equation(Math("π = w / Σⱼ wⱼ"), "   with ", Math("Σⱼ wⱼ = "), s),
        ("wᵢ", w),
        (Math("ln πₐ = ln wₐ − ln Σⱼ wⱼ = ln "), wa, Math(" − ln "), s),
    )
    rule = _rule(
        r,
        "probs",
        "and ln πₐ depends on every weight through the normaliser:",
        "ln πₐ = ln wₐ − ln Σⱼ wⱼ   ⇒   eᵢ = ∂ ln πₐ/∂wᵢ = δᵢₐ / wₐ − 1 / Σⱼ wⱼ",
        paragraph(
            f"With the numbers (a = {a}, ",
            Math("wₐ = "),
            wa,
            ", ",
            Math("Σⱼ wⱼ = "),
            s,
            "), component by component:",
        ),
        (
            ["i", Math("δᵢₐ"), Math("δᵢₐ / wₐ"), Math("−1 / Σⱼ wⱼ"), Math("eᵢ")],
            [
                [i, int(r.onehot[i]), float(r.onehot[i] / wa), -1.0 / s, float(e[i])]
                for i in range(k)
            ],
        ),
    )
    return forward, rule


def _probs_why(r: CategoricalRows) -> Section:
    """Why e has entries for the weights not sampled (and why other models give zeros)."""
    a, w, s, e, through = r.action, r.weights, r.weight_sum, r.score, r.through
    wa = float(w[a])
    unnorm = r.onehot / wa
    simplex = r.score_simplex  # δᵢₐ/πₐ − 1: the same rule read at w = π, where Σw = 1
    proj = simplex - np.mean(simplex)
    why: list[Any] = [
        paragraph(
            "torch's probs are relative weights; its Categorical docstring says so "
            f"({TORCH_PROBS_SOURCE}): “{TORCH_PROBS_NOTE}”"
        ),
        paragraph(
            "The weights are relative: π = w / Σⱼ wⱼ, and every wⱼ sits in the normaliser, so "
            "raising any weight lowers πₐ. For i ≠ a only that term is left: eᵢ = −1 / Σⱼ wⱼ = ",
            -1.0 / s,
            *(() if through == "log" else (", and through exp πₐ · eᵢ = ", r.prob * (-1.0 / s))),
            ". Zeros for the unsampled entries belong to a different model:",
        ),
        paragraph(
            "• unnormalised, independent probabilities πᵢ = wᵢ (no renormalisation): "
            "ln πₐ = ln wₐ, so eᵢ = δᵢₐ / wₐ = ",
            unnorm,
            ";",
        ),
        paragraph(
            "• probabilities kept on the simplex (Σᵢ πᵢ = 1, so only changes δ with Σᵢ δᵢ = 0 "
            "are allowed): along those, ln πₐ changes by δₐ/πₐ, which fixes the gradient only up "
            "to adding c·1. The rule read at Σw = 1 gives eᵢ = δᵢₐ/πₐ − 1 = ",
            simplex,
            " (zero mean under π: Σᵢ πᵢ eᵢ = ",
            float(np.sum(r.pi * simplex)),
            "); its projection onto the tangent space Σᵢ δᵢ = 0 is eᵢ = δᵢₐ/πₐ − 1/(K πₐ) = ",
            proj,
            ". Both change ln πₐ the same way along the simplex.",
        ),
        paragraph(
            "Scale invariance: π(c w) = π(w) for every c > 0, so moving along w itself changes "
            "nothing: Σᵢ wᵢ eᵢ = ",
            float(np.sum(w * e)),
            ". Hence weights ×c give eligibilities ÷c. With the weights ×100, ln πₐ = ",
            r.log_prob_x100,
            " and πₐ = ",
            float(np.exp(r.log_prob_x100)),
            " are unchanged, but e = ",
            r.score_x100,
            *(
                ()
                if through == "log"
                else (" and ∂πₐ/∂w = ", float(np.exp(r.log_prob_x100)) * r.score_x100)
            ),
            " are 100× smaller.",
        ),
    ]
    return Section("Why the unsampled entries are not zero", tuple(why))


def _logits_view(r: CategoricalRows, k: int) -> Section:
    """The same unit with logits z = ln w, and the linear unit on top (probs form)."""
    through = r.through
    """The same unit with logits z = ln w, and the linear unit on top (probs form)."""
    a, e_z = r.action, r.score_logits
    header: list[object] = [
        "i",
        Math("zᵢ = ln wᵢ"),
        Math("δᵢₐ"),
        Math("πᵢ"),
        Math("e_z,ᵢ"),
    ]
    rows = [
        [i, float(r.logits[i]), int(r.onehot[i]), float(r.pi[i]), float(e_z[i])] for i in range(k)
    ]
    if through != "log":
        header.append(Math("πₐ · e_z,ᵢ"))
        for i in range(k):
            rows[i].append(r.prob * float(e_z[i]))
    blocks: list[Any] = [
        paragraph(
            "A policy network usually outputs logits. With z = ln w the unit is the same "
            "(π = softmax(z)), and its eligibility is"
        ),
        equation(Math("ln πₐ = zₐ − ln Σⱼ exp zⱼ   ⇒   e_z = ∂ ln πₐ/∂z = onehot(a) − softmax(z)")),
        table(header, rows, mark=a),
        paragraph(
            "Since ∂wᵢ/∂zᵢ = wᵢ, e_z = w ⊙ e: the two views agree (w ⊙ e = ",
            r.weights * r.score,
            "). The unsampled entries are −πᵢ, and Σᵢ e_z,ᵢ = ",
            float(np.sum(e_z)),
            " (adding a constant to every logit changes nothing). With K = 2 and logits (0, z) "
            "this is Williams' Bernoulli-logistic rule y − σ(z).",
        ),
    ]
    return Section("The same unit in logits", (*blocks, *_linear_unit(r, e_z)))


def _logits_steps(r: CategoricalRows) -> outline.Steps:
    """Forward pass, rule, exp, why not zero, and the weights view, for logits z."""
    k = r.logits.shape[-1]
    forward, rule = _logits_forward_and_rule(r, k)
    why = _logits_why(r)
    return outline.Steps(forward, rule, _exp(r, "z", "logits"), why, _weights_view(r))


def _logits_forward_and_rule(r: CategoricalRows, k: int) -> tuple[Section, Section]:
    """π = softmax(z), then e = onehot(a) − softmax(z) with the numbers put in."""
    a, z, e, pi = r.action, r.logits, r.score, r.pi
    za = float(z[a])
    lse = za - r.log_prob
    forward = _forward(
        r,
        equation(Math("π = softmax(z),   πᵢ = exp zᵢ / Σⱼ exp zⱼ")),
        ("zᵢ", z),
        (Math("ln πₐ = zₐ − ln Σⱼ exp zⱼ = "), za, Math(" − "), lse),
    )
    rule = _rule(
        r,
        "logits",
        "and every logit sits in the normaliser ln Σⱼ exp zⱼ, whose gradient is softmax(z):",
        "ln πₐ = zₐ − ln Σⱼ exp zⱼ   ⇒   e = ∂ ln πₐ/∂z = onehot(a) − softmax(z)",
        paragraph(f"With the numbers (a = {a}), component by component:"),
        (
            ["i", Math("δᵢₐ"), Math("πᵢ"), Math("eᵢ = δᵢₐ − πᵢ")],
            [[i, int(r.onehot[i]), float(pi[i]), float(e[i])] for i in range(k)],
        ),
    )
    return forward, rule


def _logits_why(r: CategoricalRows) -> Section:
    """Every logit sits in the normaliser: eᵢ = −πᵢ for i ≠ a."""
    return Section(
        "Why the unsampled entries are not zero",
        (
            paragraph(
                "Every logit sits in the normaliser, so raising zᵢ for i ≠ a takes probability "
                "from a: eᵢ = −πᵢ. Only a masked category (zᵢ = −∞, πᵢ = 0) gets exactly 0."
            ),
            paragraph(
                "Shift invariance: softmax(z + c) = softmax(z), so Σᵢ eᵢ = ",
                float(np.sum(r.score)),
                ", and with every logit +100 the eligibility is unchanged: e = ",
                r.score_shifted,
                ".",
            ),
        ),
    )


def _weights_view(r: CategoricalRows) -> Section:
    """The same unit in relative weights w = exp(z − max z), and the linear unit (logits form)."""
    view = paragraph(
        "The same unit with weights w = exp(z − max z) (relative weights, as torch's probs): "
        "the renormalisation rule eᵢ = δᵢₐ / wₐ − 1 / Σⱼ wⱼ gives e_w = ",
        r.score_weights,
        ", which is e / w (since ∂wᵢ/∂zᵢ = wᵢ).",
    )
    return Section("The same unit in relative weights", (view, *_linear_unit(r, r.score)))


def _linear_unit(r: CategoricalRows, e_z: np.ndarray) -> list[Any]:
    """e_z = ∂ ln πₐ/∂z carried into a linear softmax unit z = W x + b, or how to ask for it."""
    if r.features is not None:
        return outline.linear_block(
            e_z, r.features, r.prob, r.through, ("z", "x", "a linear softmax unit")
        )
    return [
        paragraph(
            "Give features x₁ … x_d to carry the rule into the weights of a linear "
            "softmax unit z = W x + b."
        )
    ]
