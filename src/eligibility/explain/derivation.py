r"""Build the derivation of an eligibility, step by step, from the core's numbers.

Every number shown is computed by :mod:`eligibility.api` (checked ``log_prob`` and ``score``)
or by a kernel of :mod:`eligibility.distributions`; what this module adds is the story: the
rule in symbols, the same rule with the numbers put in component by component, the chain rule
through ``exp`` that ``prob.backward()`` applies, why the entries of unsampled categories are
not zero, the other view of the same unit (probs ↔ logits), the rule one layer down in a
linear unit, and an autograd cross-check.

    >>> from eligibility.explain import explain
    >>> x = explain("categorical", 0, probs=[0.69, 0.1, 0.2, 0.01])
    >>> [round(v, 4) for v in x.score["probs"].tolist()]
    [0.4493, -1.0, -1.0, -1.0]
    >>> [round(v, 4) for v in x.prob_gradient["probs"].tolist()]
    [0.31, -0.69, -0.69, -0.69]
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eligibility import api
from eligibility._array import to_numpy
from eligibility.distributions import bernoulli, categorical, normal
from eligibility.explain.autograd import Autograd, Case, cross_check
from eligibility.explain.doc import Eq as _Eq
from eligibility.explain.doc import M, N, Para, Part, Piece, Section, Table, V, vec

THROUGH = ("both", "log", "exp")
"""What is differentiated: ln π (``log``), π = exp(ln π) (``exp``), or ``both``."""


# ---------------------------------------------------------------------------------------------
# building blocks


def L(*parts: object) -> tuple[Piece, ...]:
    """A line: ``(text, tex)`` tuples become math, floats numbers, arrays vectors, str prose."""
    out: list[Piece] = []
    for p in parts:
        if isinstance(p, tuple):
            out.append(M(*p))
        elif isinstance(p, np.ndarray):
            out.append(vec(p))
        elif isinstance(p, float | np.floating):
            out.append(N(float(p)))
        elif isinstance(p, M | N | V | str):
            out.append(p)
        else:
            raise TypeError(f"cannot place {p!r} in a line")
    return tuple(out)


def P(*parts: object) -> Para:
    """A paragraph (see :func:`L`)."""
    return Para(L(*parts))


def E(*parts: object) -> _Eq:
    """A displayed equation (see :func:`L`)."""
    return _Eq(L(*parts))


def T(header: list[object], rows: list[list[object]], mark: int | None = None) -> Table:
    """A table; integers are shown as integers, floats with the renderer's precision."""

    def cell(x: object) -> Piece:
        if isinstance(x, int | np.integer) and not isinstance(x, bool):
            return str(int(x))
        return L(x)[0]

    return Table(
        header=tuple(cell(h) for h in header),
        rows=tuple(tuple(cell(x) for x in r) for r in rows),
        mark=mark,
    )


def _np(x: object) -> np.ndarray:
    return np.asarray(to_numpy(x), dtype=np.float64)


def _int_or_float(x: np.ndarray) -> Any:
    """JSON-ready: integral arrays (actions, counts, 0/1) as ints, the rest as floats."""
    x = np.asarray(x)
    if x.dtype.kind in "iub" or (np.all(np.isfinite(x)) and np.all(x == np.round(x))):
        return np.asarray(x, dtype=np.int64).tolist()
    return np.asarray(x, dtype=np.float64).tolist()


def _floats(x: object) -> Any:
    """JSON-ready floats; ±∞ (a masked logit) as the strings "inf" / "-inf" (strict JSON)."""
    a = np.asarray(x, dtype=np.float64)
    if np.all(np.isfinite(a)):
        return a.tolist()
    return np.where(np.isfinite(a), a, np.where(a > 0, "inf", "-inf")).astype(object).tolist()


def _log_note(name: str) -> str:
    return f"({name}.grad after log_prob.backward())"


def _exp_note(name: str) -> str:
    return f"({name}.grad after prob.backward())"


# ---------------------------------------------------------------------------------------------
# the explanation object


@dataclass(frozen=True)
class Explanation:
    """A derived eligibility: the core's numbers and the derivation that connects them.

    Arrays are float64 NumPy arrays of the broadcast batch shape (the parameters as given).
    Render with :meth:`to_text`, :meth:`to_markdown`, :meth:`to_latex` or :meth:`to_json`.
    """

    dist: str
    form: str
    through: str
    parameters: dict[str, np.ndarray]
    total_count: int | None
    value: np.ndarray
    features: np.ndarray | None
    log_prob: np.ndarray
    prob: np.ndarray
    score: dict[str, np.ndarray]
    prob_gradient: dict[str, np.ndarray]
    other_view: dict[str, Any]
    linear: dict[str, np.ndarray] | None
    autograd: Autograd
    title: str
    parts: tuple[Part, ...]
    check_section: Section = field(repr=False, default=Section("", ()))

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract as a dict (full float precision; see :meth:`to_json`)."""
        out: dict[str, Any] = {
            "distribution": self.dist,
            "form": self.form,
            "through": self.through,
            "parameters": {k: _floats(v) for k, v in self.parameters.items()},
        }
        if self.total_count is not None:
            out["total_count"] = self.total_count
        out["value"] = _floats(self.value) if self.dist == "normal" else _int_or_float(self.value)
        out["log_prob"] = _floats(self.log_prob)
        out["prob"] = _floats(self.prob)
        out["score"] = {k: _floats(v) for k, v in self.score.items()}
        out["prob_gradient"] = {k: _floats(v) for k, v in self.prob_gradient.items()}
        out["upstream"] = {"log_prob.grad": _floats(self.prob), "prob.grad": 1.0}
        out["other_view"] = {
            k: ({kk: _floats(vv) for kk, vv in v.items()} if isinstance(v, dict) else _floats(v))
            for k, v in self.other_view.items()
        }
        out["linear"] = (
            None if self.linear is None else {k: _floats(v) for k, v in self.linear.items()}
        )
        out["autograd"] = {
            "available": self.autograd.available,
            "max_abs_diff": self.autograd.max_abs_diff,
            "torch_version": self.autograd.torch_version,
            "differences": self.autograd.differences,
            "reason": self.autograd.reason,
        }
        return out

    def to_json(self, indent: int | None = 2) -> str:
        """The JSON contract: distribution, parameters, value, log_prob, prob, score, ….

        Floats keep full precision (``--precision`` only shapes the human formats); an
        infinite entry (a masked logit) is the string ``"-inf"``, so the output is strict JSON.
        """
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)

    def to_text(self, precision: int = 4, width: int = 100, color: bool = False) -> str:
        """Aligned plain text with Unicode mathematics (ANSI colour only if ``color``)."""
        from eligibility.explain import render

        return render.text(self, precision=precision, width=width, color=color)

    def to_markdown(self, precision: int = 4) -> str:
        """Markdown: headings, paragraphs and tables, mathematics in Unicode."""
        from eligibility.explain import render

        return render.markdown(self, precision=precision)

    def to_latex(self, precision: int = 4) -> str:
        """A LaTeX fragment (needs ``amsmath``), pure ASCII."""
        from eligibility.explain import render

        return render.latex(self, precision=precision)

    def __str__(self) -> str:
        return self.to_text()


# ---------------------------------------------------------------------------------------------
# public entry point


def explain(
    dist: str,
    value: object,
    *,
    through: str = "both",
    features: object = None,
    **params: object,
) -> Explanation:
    """Derive e = ∂ ln π(value; θ)/∂θ for the given numbers and show every step.

    Args:
        dist: ``"bernoulli"``, ``"categorical"``, ``"multinomial"`` or ``"normal"``.
        value: the action taken (category index, 0/1, count vector or real number); leading
            axes are batch axes, explained row by row.
        through: ``"log"`` (differentiate ln π), ``"exp"`` (differentiate π = exp(ln π), as
            ``prob.backward()`` does) or ``"both"``.
        features: optional inputs x of a linear unit (z = W x + b for the logits, μ = W x + b
            for a normal's loc); carries the rule into W and b. Shape ``(d,)`` or batch + ``(d,)``.
        **params: the distribution's parameters with torch's names (``probs`` | ``logits``,
            ``total_count``, ``loc`` and ``scale``); NumPy, torch or lists.

    Returns:
        An :class:`Explanation` (float64 NumPy numbers; render it with ``to_text()`` …).

    Raises:
        ValueError: bad parameters or value (the core's checks), an unknown ``through``, or
            features whose batch shape does not match.
    """
    if through not in THROUGH:
        raise ValueError(f"through must be one of {', '.join(THROUGH)}, got {through!r}")
    c = api.check(dist, params)
    checked_value = api.check_value(c, value)
    theta = {k: _np(v) for k, v in c.params.items()}
    v = np.asarray(to_numpy(checked_value))
    x = None if features is None else _features(features)
    builder = {
        "categorical": _categorical,
        "multinomial": _multinomial,
        "bernoulli": _bernoulli,
        "normal": _normal,
    }[c.dist]
    d = builder(c.form, theta, v, c.total_count, x, through)
    return _finish(c, theta, v, x, through, d)


def _features(features: object) -> np.ndarray:
    try:
        x = np.asarray(to_numpy(features), dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"features must be numbers, got {features!r}") from err
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError("features must be a vector x₁ … x_d (d ≥ 1)")
    if not np.all(np.isfinite(x)):
        raise ValueError("features must be finite numbers")
    return x


def _rows(batch: tuple[int, ...]) -> list[tuple[tuple[int, ...], str | None]]:
    if batch == ():
        return [((), None)]
    out = []
    for idx in np.ndindex(batch):
        label = f"row {idx[0]}" if len(idx) == 1 else f"row {idx}"
        out.append((idx, label))
    return out


def _row_features(x: np.ndarray | None, batch: tuple[int, ...]) -> np.ndarray | None:
    if x is None:
        return None
    try:
        return np.broadcast_to(x, batch + x.shape[-1:])
    except ValueError:
        raise ValueError(
            f"features of shape {x.shape} do not match the batch shape {batch}; give one "
            "feature vector, or one per row"
        ) from None


def _autograd_section(ag: Autograd, through: str) -> Section:
    if not ag.available:
        return Section(
            "Autograd cross-check",
            (
                P(
                    "torch is not importable here, so the cross-check against "
                    "torch.distributions was skipped; the closed forms above come from the "
                    "eligibility core alone (install torch to run it)."
                ),
            ),
        )
    keep = {
        "log": lambda k: not k.startswith(("prob_gradient", "prob")) or k == "prob",
        "exp": lambda k: not k.startswith("score"),
        "both": lambda k: True,
    }[through]
    shown = {k: d for k, d in ag.differences.items() if keep(k)}
    rows = [[k, N(d, sci=True)] for k, d in shown.items()]
    return Section(
        "Autograd cross-check",
        (
            P(
                f"The same quantities from torch.distributions (torch {ag.torch_version}, "
                "float64) by autograd: log_prob.backward() for the eligibilities, "
                "prob.backward() for the gradients through exp, a linear unit at W = 0 for "
                "the rule one layer down."
            ),
            T(["quantity", "max |closed form − autograd|"], rows),
            P("Largest absolute difference: ", N(ag.max_abs_diff or 0.0, sci=True), "."),
        ),
    )


@dataclass(frozen=True)
class _Derived:
    """What a distribution's builder adds to the checked input: the core's numbers and the story.

    ``case`` replays the evaluation in torch; ``extra`` holds the other views to cross-check.
    """

    lp: np.ndarray
    score: dict[str, np.ndarray]
    other_view: dict[str, Any]
    linear: dict[str, np.ndarray] | None
    case: Case
    extra: list[tuple[str, Case, dict[str, np.ndarray]]]
    title: str
    parts: list[Part]


def _finish(
    c: api.Checked,
    theta: dict[str, np.ndarray],
    value: np.ndarray,
    features: np.ndarray | None,
    through: str,
    d: _Derived,
) -> Explanation:
    p = np.exp(d.lp)
    # ∂π/∂θ = π · ∂ ln π/∂θ: the chain rule through exp that prob.backward() applies.
    pk = p[..., None] if c.dist in ("categorical", "multinomial") else p
    grad = {k: pk * e for k, e in d.score.items()}
    ag = cross_check(d.case, d.lp, d.score, grad, d.extra)
    return Explanation(
        dist=c.dist,
        form=c.form,
        through=through,
        parameters=theta,
        total_count=c.total_count,
        value=value,
        features=features,
        log_prob=d.lp,
        prob=p,
        score=d.score,
        prob_gradient=grad,
        other_view=d.other_view,
        linear=d.linear,
        autograd=ag,
        title=d.title,
        parts=tuple(d.parts),
        check_section=_autograd_section(ag, through),
    )


def _title(dist: str, form: str, what: str, batch: tuple[int, ...]) -> str:
    views = {
        "probs": "probs w (relative weights)" if dist != "bernoulli" else "probs p",
        "logits": "logits z",
        "loc-scale": "loc μ, scale σ",
    }
    rows = "" if batch == () else f", {int(np.prod(batch))} rows"
    return f"{dist} with {views[form]}, {what}{rows}"


_TEX = {"μ": r"\mu", "z": "z", "x": "x", "h": "h"}


def _linear_block(
    e_pre: np.ndarray,
    x: np.ndarray,
    p_a: float,
    through: str,
    names: tuple[str, str, str],
    lp: tuple[str, str] = ("ln πₐ", r"\ln\pi_a"),
) -> list[Any]:
    """∂/∂W = e_pre xᵀ and ∂/∂b = e_pre for a linear unit pre = W x + b (one row)."""
    pre, xs, unit = names
    pre_tex, xs_tex = _TEX[pre], _TEX[xs]
    lpt, lptex = lp
    e_w = e_pre[:, None] * x[None, :]
    header: list[object] = [
        "i",
        (f"∂/∂bᵢ = e_{pre},ᵢ", rf"\partial/\partial b_i = e_{{{pre_tex},i}}"),
    ]
    sub = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
    header += [
        (f"∂/∂Wᵢ{str(j).translate(sub)}", rf"\partial/\partial W_{{i{j}}}")
        for j in range(x.shape[0])
    ]
    rows = [[i, float(e_pre[i]), *map(float, e_w[i])] for i in range(e_pre.shape[0])]
    blocks: list[Any] = [
        P(
            f"Carried one layer down into {unit} {pre} = W {xs} + b with features {xs} = ",
            x,
            ", the chain rule gives the backpropagation rule a REINFORCE network uses:",
        ),
        E(
            (
                f"∂ {lpt}/∂W = e_{pre} {xs}ᵀ,   ∂ {lpt}/∂b = e_{pre}",
                rf"\frac{{\partial {lptex}}}{{\partial W}} = e_{{{pre_tex}}}\,{xs_tex}^\top,\quad "
                rf"\frac{{\partial {lptex}}}{{\partial b}} = e_{{{pre_tex}}}",
            ),
        ),
        T(header, rows),
        P(
            f"The REINFORCE update is ΔW = α (r − baseline) ∂ {lpt}/∂W"
            + (
                ""
                if through == "log"
                else f"; through exp every entry is multiplied by {lpt[3:]} = "
            ),
            *(() if through == "log" else (p_a,)),
            ".",
        ),
    ]
    return blocks


def _linear(
    dist: str,
    e_pre: np.ndarray,
    x: np.ndarray,
    params: dict[str, np.ndarray],
    value: np.ndarray,
    n: int | None = None,
    pre: str = "logits",
) -> tuple[dict[str, np.ndarray], tuple[str, Case, dict[str, np.ndarray]]]:
    """∂/∂W = e_pre xᵀ, ∂/∂b = e_pre for the unit ``params[pre]`` = W x + b, and its cross-check."""
    linear = {"features": x, "W": e_pre[..., :, None] * x[..., None, :], "b": e_pre}
    case = Case(dist, params, value, n, features=x, linear=pre)
    return linear, ("linear", case, {"W": linear["W"], "b": linear["b"]})


def _parts(
    batch: tuple[int, ...],
    arrays: dict[str, Any],
    sections: Callable[[dict[str, Any]], list[Section]],
) -> list[Part]:
    """One part per row of ``batch``: ``sections`` of that row of every array (None stays None)."""
    return [
        Part(label, tuple(sections({k: None if a is None else a[idx] for k, a in arrays.items()})))
        for idx, label in _rows(batch)
    ]


def _softmax_views(
    dist: str, form: str, t: np.ndarray, v: np.ndarray, n: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any], list[Any]]:
    """A softmax unit (categorical, multinomial) in both views: weights w and logits z.

    Returns:
        π, z, w, the core's eligibility in the other view, ``other_view`` and its cross-check
        (the start of ``extra``).
    """
    if form == "probs":
        w = t
        pi = _np(categorical.normalise(w))
        with np.errstate(divide="ignore"):
            z = np.log(w)  # z = ln w gives softmax(z) = w / Σw: the same unit
        other, t_other = "logits", z
    else:
        z = t
        pi = _np(categorical.softmax(z))
        # exp(z − max z): weights of the same unit (π is scale-free), without overflow
        w = np.exp(z - np.max(z, axis=-1, keepdims=True))
        other, t_other = "probs", w
    kw: dict[str, Any] = {other: t_other} if n is None else {other: t_other, "total_count": n}
    e_other = _np(api.score(dist, v, **kw)[other])
    extra = [("other_view.score", Case(dist, {other: t_other}, v, n), {other: e_other})]
    return pi, z, w, e_other, {other: t_other, "score": {other: e_other}}, extra


# ---------------------------------------------------------------------------------------------
# categorical


def _categorical(
    form: str,
    theta: dict[str, np.ndarray],
    a: np.ndarray,
    n: int | None,
    x: np.ndarray | None,
    through: str,
) -> _Derived:
    t = theta[form]
    k = t.shape[-1]
    batch = tuple(np.broadcast_shapes(t.shape[:-1], a.shape))
    tb = np.broadcast_to(t, (*batch, k))
    ab = np.broadcast_to(a, batch).astype(np.int64)
    lp = _np(api.log_prob("categorical", ab, **{form: tb}))
    e = _np(api.score("categorical", ab, **{form: tb})[form])
    xb = _row_features(x, batch)
    pi, z, w, e_other, other, extra = _softmax_views("categorical", form, tb, ab, None)
    e_z = e_other if form == "probs" else e
    rows: dict[str, Any] = {
        "a": ab,
        "pi": pi,
        "lp": lp,
        "p": np.exp(lp),
        "e": e,
        "onehot": _np(categorical.onehot(ab, k, tb)),
        "e_z": e_z,
        "z": z,
        "w": w,
        "x": xb,
    }
    if form == "probs":
        rows.update(
            s=np.sum(w, axis=-1),
            e100=_np(api.score("categorical", ab, probs=100.0 * w)["probs"]),
            lp100=_np(api.log_prob("categorical", ab, probs=100.0 * w)),
            e_simplex=_np(api.score("categorical", ab, probs=pi)["probs"]),
        )
        sections = _cat_probs_sections
    else:
        rows.update(
            e_w=e_other, e_shift=_np(api.score("categorical", ab, logits=z + 100.0)["logits"])
        )
        sections = _cat_logits_sections
    linear = None
    if xb is not None:
        linear, check = _linear("categorical", e_z, xb, {"logits": z}, ab)
        extra.append(check)
    what = f"action a = {int(ab[()])}" if batch == () else "one action per row"
    return _Derived(
        lp=lp,
        score={form: e},
        other_view=other,
        linear=linear,
        case=Case("categorical", {form: tb}, ab),
        extra=extra,
        title=_title("categorical", form, what, batch),
        parts=_parts(batch, rows, lambda r: sections(r, k, through)),
    )


def _exp_section(
    r: dict[str, Any],
    k: int,
    sym: tuple[str, str],
    note: str,
    prob: tuple[str, str] = ("πₐ", r"\pi_a"),
) -> Section:
    """∂π/∂θ = π · e, component by component (sym: the parameter's symbol, prob: π's)."""
    th, tex = sym
    pt, ptex = prob
    ga = r["p"] * r["e"]
    return Section(
        "Chain rule through exp",
        (
            P(
                f"The snippet differentiates prob = exp(log_prob), so the rule above is multiplied "
                f"by the derivative of exp at ln {pt}, which is {pt} itself:"
            ),
            E(
                (
                    f"{pt} = exp(ln {pt})   ⇒   ∂{pt}/∂{th}ᵢ = (∂{pt}/∂ ln {pt}) · eᵢ = {pt} · eᵢ",
                    rf"{ptex} = \exp(\ln {ptex}) \;\Rightarrow\; \frac{{\partial {ptex}}}"
                    rf"{{\partial {tex}_i}} = \frac{{\partial {ptex}}}{{\partial\ln {ptex}}}\,e_i"
                    rf" = {ptex}\,e_i",
                ),
            ),
            P(
                "Upstream gradients: prob.grad = ",
                (
                    f"∂{pt}/∂{pt}",
                    rf"\partial {ptex}/\partial "
                    rf"{ptex}",
                ),
                " = ",
                1.0,
                " and log_prob.grad = ",
                (f"∂{pt}/∂ ln {pt} = {pt}", rf"\partial {ptex}/\partial\ln {ptex} = {ptex}"),
                " = ",
                r["p"],
                ".",
            ),
            T(
                ["i", ("eᵢ", "e_i"), (f"{pt} · eᵢ", rf"{ptex}\,e_i")],
                [[i, float(r["e"][i]), float(ga[i])] for i in range(k)],
                mark=r.get("a"),
            ),
            E((f"∂{pt}/∂{th} = ", rf"\partial {ptex}/\partial {tex} = "), ga, "   " + note),
        ),
    )


def _cat_probs_sections(r: dict[str, Any], k: int, through: str) -> list[Section]:
    a, w, s, e = r["a"], r["w"], r["s"], r["e"]
    wa = float(w[a])
    secs = [
        Section(
            "Forward pass",
            (
                E(
                    ("π = w / Σⱼ wⱼ", r"\pi = w / \textstyle\sum_j w_j"),
                    "   with ",
                    ("Σⱼ wⱼ = ", r"\sum_j w_j = "),
                    s,
                ),
                T(
                    ["i", ("wᵢ", "w_i"), ("πᵢ", r"\pi_i")],
                    [[i, float(w[i]), float(r["pi"][i])] for i in range(k)],
                    mark=a,
                ),
                E(
                    (
                        "ln πₐ = ln wₐ − ln Σⱼ wⱼ = ln ",
                        r"\ln\pi_a = \ln w_a - \ln\sum_j w_j = \ln ",
                    ),
                    wa,
                    (" − ln ", r" - \ln "),
                    s,
                    (" = ", " = "),
                    r["lp"],
                    "   (log_prob)",
                ),
                E(("πₐ = exp(ln πₐ) = ", r"\pi_a = \exp(\ln\pi_a) = "), r["p"], "   (prob)"),
            ),
        ),
        Section(
            "The rule: the characteristic eligibility e = ∂ ln πₐ/∂w",
            (
                P(
                    "Williams (1992) calls e = ∂ ln πₐ/∂θ the characteristic eligibility of the "
                    "parameters θ; REINFORCE moves them by Δθ = α (r − baseline) e. Here θ = w, "
                    "and ln πₐ depends on every weight through the normaliser:"
                ),
                E(
                    (
                        "ln πₐ = ln wₐ − ln Σⱼ wⱼ   ⇒   eᵢ = ∂ ln πₐ/∂wᵢ = δᵢₐ / wₐ − 1 / Σⱼ wⱼ",
                        r"\ln\pi_a = \ln w_a - \ln\sum_j w_j \;\Rightarrow\; e_i = \frac{\partial"
                        r"\ln\pi_a}{\partial w_i} = \frac{\delta_{ia}}{w_a} - \frac{1}{\sum_j w_j}",
                    )
                ),
                P(
                    f"With the numbers (a = {a}, ",
                    ("wₐ = ", "w_a = "),
                    wa,
                    ", ",
                    ("Σⱼ wⱼ = ", r"\sum_j w_j = "),
                    s,
                    "), component by component:",
                ),
                T(
                    [
                        "i",
                        ("δᵢₐ", r"\delta_{ia}"),
                        ("δᵢₐ / wₐ", r"\delta_{ia}/w_a"),
                        ("−1 / Σⱼ wⱼ", r"-1/\sum_j w_j"),
                        ("eᵢ", "e_i"),
                    ],
                    [
                        [i, int(r["onehot"][i]), float(r["onehot"][i] / wa), -1.0 / s, float(e[i])]
                        for i in range(k)
                    ],
                    mark=a,
                ),
                E(("e = ", "e = "), e, "   " + _log_note("probs")),
            ),
        ),
    ]
    if through != "log":
        secs.append(_exp_section(r, k, ("w", "w"), _exp_note("probs")))
    unnorm = r["onehot"] / wa
    simplex = r["e_simplex"]  # δᵢₐ/πₐ − 1: the same rule read at w = π, where Σw = 1
    proj = simplex - np.mean(simplex)
    why: list[Any] = [
        P(
            "The weights are relative: π = w / Σⱼ wⱼ, and every wⱼ sits in the normaliser, so "
            "raising any weight lowers πₐ. For i ≠ a only that term is left: eᵢ = −1 / Σⱼ wⱼ = ",
            -1.0 / s,
            *(() if through == "log" else (", and through exp πₐ · eᵢ = ", r["p"] * (-1.0 / s))),
            ". Zeros for the unsampled entries belong to a different model:",
        ),
        P(
            "• unnormalised, independent probabilities πᵢ = wᵢ (no renormalisation): "
            "ln πₐ = ln wₐ, so eᵢ = δᵢₐ / wₐ = ",
            unnorm,
            ";",
        ),
        P(
            "• probabilities kept on the simplex (Σᵢ πᵢ = 1, so only changes δ with Σᵢ δᵢ = 0 "
            "are allowed): along those, ln πₐ changes by δₐ/πₐ, which fixes the gradient only up "
            "to adding c·1. The rule read at Σw = 1 gives eᵢ = δᵢₐ/πₐ − 1 = ",
            simplex,
            " (zero mean under π: Σᵢ πᵢ eᵢ = ",
            float(np.sum(r["pi"] * simplex)),
            "); its projection onto the tangent space Σᵢ δᵢ = 0 is eᵢ = δᵢₐ/πₐ − 1/(K πₐ) = ",
            proj,
            ". Both change ln πₐ the same way along the simplex.",
        ),
        P(
            "Scale invariance: π(c w) = π(w) for every c > 0, so moving along w itself changes "
            "nothing: Σᵢ wᵢ eᵢ = ",
            float(np.sum(w * e)),
            ". Hence weights ×c give eligibilities ÷c. With the weights ×100, ln πₐ = ",
            r["lp100"],
            " and πₐ = ",
            float(np.exp(r["lp100"])),
            " are unchanged, but e = ",
            r["e100"],
            *(
                ()
                if through == "log"
                else (" and ∂πₐ/∂w = ", float(np.exp(r["lp100"])) * r["e100"])
            ),
            " are 100× smaller.",
        ),
    ]
    secs.append(Section("Why the unsampled entries are not zero", tuple(why)))
    secs.append(_cat_other_logits(r, k, through))
    return secs


def _cat_other_logits(r: dict[str, Any], k: int, through: str) -> Section:
    """The same unit with logits z = ln w, and the linear unit on top (probs form)."""
    a, e_z = r["a"], r["e_z"]
    header: list[object] = [
        "i",
        ("zᵢ = ln wᵢ", r"z_i = \ln w_i"),
        ("δᵢₐ", r"\delta_{ia}"),
        ("πᵢ", r"\pi_i"),
        ("e_z,ᵢ", r"e_{z,i}"),
    ]
    rows = [
        [i, float(r["z"][i]), int(r["onehot"][i]), float(r["pi"][i]), float(e_z[i])]
        for i in range(k)
    ]
    if through != "log":
        header.append(("πₐ · e_z,ᵢ", r"\pi_a e_{z,i}"))
        for i in range(k):
            rows[i].append(r["p"] * float(e_z[i]))
    blocks: list[Any] = [
        P(
            "A policy network usually outputs logits. With z = ln w the unit is the same "
            "(π = softmax(z)), and its eligibility is"
        ),
        E(
            (
                "ln πₐ = zₐ − ln Σⱼ exp zⱼ   ⇒   e_z = ∂ ln πₐ/∂z = onehot(a) − softmax(z)",
                r"\ln\pi_a = z_a - \ln\sum_j e^{z_j} \;\Rightarrow\; e_z = \frac{\partial\ln\pi_a}"
                r"{\partial z} = \mathrm{onehot}(a) - \mathrm{softmax}(z)",
            )
        ),
        T(header, rows, mark=a),
        P(
            "Since ∂wᵢ/∂zᵢ = wᵢ, e_z = w ⊙ e: the two views agree (w ⊙ e = ",
            r["w"] * r["e"],
            "). The unsampled entries are −πᵢ, and Σᵢ e_z,ᵢ = ",
            float(np.sum(e_z)),
            " (adding a constant to every logit changes nothing). With K = 2 and logits (0, z) "
            "this is Williams' Bernoulli-logistic rule y − σ(z).",
        ),
    ]
    if r["x"] is not None:
        blocks += _linear_block(e_z, r["x"], r["p"], through, ("z", "x", "a linear softmax unit"))
    else:
        blocks.append(
            P(
                "Give features x₁ … x_d to carry the rule into the weights of a linear "
                "softmax unit z = W x + b."
            )
        )
    return Section("The same unit in logits", tuple(blocks))


def _cat_logits_sections(r: dict[str, Any], k: int, through: str) -> list[Section]:
    a, z, e, pi = r["a"], r["z"], r["e"], r["pi"]
    za = float(z[a])
    lse = za - r["lp"]
    secs = [
        Section(
            "Forward pass",
            (
                E(
                    (
                        "π = softmax(z),   πᵢ = exp zᵢ / Σⱼ exp zⱼ",
                        r"\pi = \mathrm{softmax}(z),\quad \pi_i = e^{z_i}/\sum_j e^{z_j}",
                    )
                ),
                T(
                    ["i", ("zᵢ", "z_i"), ("πᵢ", r"\pi_i")],
                    [[i, float(z[i]), float(pi[i])] for i in range(k)],
                    mark=a,
                ),
                E(
                    ("ln πₐ = zₐ − ln Σⱼ exp zⱼ = ", r"\ln\pi_a = z_a - \ln\sum_j e^{z_j} = "),
                    za,
                    (" − ", " - "),
                    lse,
                    (" = ", " = "),
                    r["lp"],
                    "   (log_prob)",
                ),
                E(("πₐ = exp(ln πₐ) = ", r"\pi_a = \exp(\ln\pi_a) = "), r["p"], "   (prob)"),
            ),
        ),
        Section(
            "The rule: the characteristic eligibility e = ∂ ln πₐ/∂z",
            (
                P(
                    "Williams (1992) calls e = ∂ ln πₐ/∂θ the characteristic eligibility of the "
                    "parameters θ; REINFORCE moves them by Δθ = α (r − baseline) e. Here θ = z, "
                    "and every logit sits in the normaliser ln Σⱼ exp zⱼ, whose gradient is "
                    "softmax(z):"
                ),
                E(
                    (
                        "ln πₐ = zₐ − ln Σⱼ exp zⱼ   ⇒   e = ∂ ln πₐ/∂z = onehot(a) − softmax(z)",
                        r"\ln\pi_a = z_a - \ln\sum_j e^{z_j} \;\Rightarrow\; e = \frac{\partial"
                        r"\ln\pi_a}{\partial z} = \mathrm{onehot}(a) - \mathrm{softmax}(z)",
                    )
                ),
                P(f"With the numbers (a = {a}), component by component:"),
                T(
                    [
                        "i",
                        ("δᵢₐ", r"\delta_{ia}"),
                        ("πᵢ", r"\pi_i"),
                        ("eᵢ = δᵢₐ − πᵢ", r"e_i = \delta_{ia} - \pi_i"),
                    ],
                    [[i, int(r["onehot"][i]), float(pi[i]), float(e[i])] for i in range(k)],
                    mark=a,
                ),
                E(("e = ", "e = "), e, "   " + _log_note("logits")),
            ),
        ),
    ]
    if through != "log":
        secs.append(_exp_section(r, k, ("z", "z"), _exp_note("logits")))
    secs.append(
        Section(
            "Why the unsampled entries are not zero",
            (
                P(
                    "Every logit sits in the normaliser, so raising zᵢ for i ≠ a takes probability "
                    "from a: eᵢ = −πᵢ. Only a masked category (zᵢ = −∞, πᵢ = 0) gets exactly 0."
                ),
                P(
                    "Shift invariance: softmax(z + c) = softmax(z), so Σᵢ eᵢ = ",
                    float(np.sum(e)),
                    ", and with every logit +100 the eligibility is unchanged: e = ",
                    r["e_shift"],
                    ".",
                ),
            ),
        )
    )
    e_w = r["e_w"]
    blocks: list[Any] = [
        P(
            "The same unit with weights w = exp(z − max z) (relative weights, as torch's probs): "
            "the renormalisation rule eᵢ = δᵢₐ / wₐ − 1 / Σⱼ wⱼ gives e_w = ",
            e_w,
            ", which is e / w (since ∂wᵢ/∂zᵢ = wᵢ).",
        ),
    ]
    if r["x"] is not None:
        blocks += _linear_block(e, r["x"], r["p"], through, ("z", "x", "a linear softmax unit"))
    else:
        blocks.append(
            P(
                "Give features x₁ … x_d to carry the rule into the weights of a linear "
                "softmax unit z = W x + b."
            )
        )
    secs.append(Section("The same unit in relative weights", tuple(blocks)))
    return secs


# ---------------------------------------------------------------------------------------------
# multinomial


def _multinomial(
    form: str,
    theta: dict[str, np.ndarray],
    xc: np.ndarray,
    n: int | None,
    h: np.ndarray | None,
    through: str,
) -> _Derived:
    assert n is not None
    t = theta[form]
    k = t.shape[-1]
    batch = tuple(np.broadcast_shapes(t.shape[:-1], xc.shape[:-1]))
    tb = np.broadcast_to(t, (*batch, k))
    xb = np.broadcast_to(xc.astype(np.float64), (*batch, k))
    lp = _np(api.log_prob("multinomial", xb, total_count=n, **{form: tb}))
    e = _np(api.score("multinomial", xb, total_count=n, **{form: tb})[form])
    hb = _row_features(h, batch)
    pi, z, w, e_other, other, extra = _softmax_views("multinomial", form, tb, xb, n)
    e_z = e_other if form == "probs" else e
    # x is a sum of n one-hot draws: add up the categorical eligibilities of the draws
    per_draw = np.stack(
        [_np(api.score("categorical", i, **{form: tb})[form]) for i in range(k)], axis=-2
    )
    summed = np.sum(xb[..., :, None] * per_draw, axis=-2)
    linear = None
    if hb is not None:
        linear, check = _linear("multinomial", e_z, hb, {"logits": z}, xb, n)
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
    return _Derived(
        lp=lp,
        score={form: e},
        other_view=other,
        linear=linear,
        case=Case("multinomial", {form: tb}, xb, n),
        extra=extra,
        title=_title(
            "multinomial", form, f"n = {n}, " + what if batch == () else f"n = {n}", batch
        ),
        parts=_parts(batch, rows, lambda r: _multinomial_sections(r, k, n, form, through)),
    )


def _multinomial_sections(
    r: dict[str, Any], k: int, n: int, form: str, through: str
) -> list[Section]:
    x, pi, e = r["x"], r["pi"], r["e"]
    xi = [int(c) for c in x]
    if form == "probs":
        w = r["w"]
        s = float(np.sum(w))
        fwd_eq = E(
            ("π = w / Σⱼ wⱼ", r"\pi = w/\sum_j w_j"), "   with ", ("Σⱼ wⱼ = ", r"\sum_j w_j = "), s
        )
        fwd_tab = T(
            ["i", ("wᵢ", "w_i"), ("πᵢ", r"\pi_i"), ("xᵢ", "x_i")],
            [[i, float(w[i]), float(pi[i]), xi[i]] for i in range(k)],
        )
        rule = E(
            (
                "ln P(x) = const + Σᵢ xᵢ ln wᵢ − n ln Σⱼ wⱼ   ⇒   eᵢ = xᵢ / wᵢ − n / Σⱼ wⱼ",
                r"\ln P(x) = \mathrm{const} + \sum_i x_i \ln w_i - n\ln\sum_j w_j \;\Rightarrow"
                r"\; e_i = \frac{x_i}{w_i} - \frac{n}{\sum_j w_j}",
            )
        )
        ratio = np.where(x > 0, x / np.where(w > 0, w, 1.0), 0.0)
        tab = T(
            [
                "i",
                ("xᵢ", "x_i"),
                ("xᵢ / wᵢ", "x_i/w_i"),
                ("−n / Σⱼ wⱼ", r"-n/\sum_j w_j"),
                ("eᵢ", "e_i"),
            ],
            [[i, xi[i], float(ratio[i]), -n / s, float(e[i])] for i in range(k)],
        )
        sym = ("w", "w")
    else:
        z = r["z"]
        fwd_eq = E(("π = softmax(z)", r"\pi = \mathrm{softmax}(z)"))
        fwd_tab = T(
            ["i", ("zᵢ", "z_i"), ("πᵢ", r"\pi_i"), ("xᵢ", "x_i")],
            [[i, float(z[i]), float(pi[i]), xi[i]] for i in range(k)],
        )
        rule = E(
            (
                "ln P(x) = const + Σᵢ xᵢ zᵢ − n ln Σⱼ exp zⱼ   ⇒   e = x − n softmax(z)",
                r"\ln P(x) = \mathrm{const} + \sum_i x_i z_i - n\ln\sum_j e^{z_j} \;\Rightarrow"
                r"\; e = x - n\,\mathrm{softmax}(z)",
            )
        )
        tab = T(
            ["i", ("xᵢ", "x_i"), ("n πᵢ", r"n\pi_i"), ("eᵢ", "e_i")],
            [[i, xi[i], float(n * pi[i]), float(e[i])] for i in range(k)],
        )
        sym = ("z", "z")
    secs = [
        Section(
            "Forward pass",
            (
                fwd_eq,
                fwd_tab,
                E(
                    (
                        "ln P(x) = ln n! − Σᵢ ln xᵢ! + Σᵢ xᵢ ln πᵢ = ",
                        r"\ln P(x) = \ln n! - \sum_i \ln x_i! + \sum_i x_i\ln\pi_i = ",
                    ),
                    r["lp"],
                    "   (log_prob)",
                ),
                E(("P(x) = exp(ln P(x)) = ", r"P(x) = \exp(\ln P(x)) = "), r["p"], "   (prob)"),
            ),
        ),
        Section(
            f"The rule: the characteristic eligibility e = ∂ ln P(x)/∂{sym[0]}",
            (
                P(
                    "Williams (1992) calls e = ∂ ln π/∂θ the characteristic eligibility; "
                    "REINFORCE moves θ by Δθ = α (r − baseline) e. The factorials do not depend "
                    "on the parameters, so only Σᵢ xᵢ ln πᵢ matters:"
                ),
                rule,
                P(f"With the numbers (n = {n}), component by component:"),
                tab,
                E(("e = ", "e = "), e, "   " + _log_note(form)),
            ),
        ),
    ]
    if through != "log":
        secs.append(_exp_section(r, k, sym, _exp_note(form), ("P(x)", "P(x)")))
    why: list[Any] = [
        P(
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
            P(
                "Scale invariance: Σᵢ wᵢ eᵢ = ",
                float(np.sum(r["w"] * e)),
                "; weights ×c give eligibilities ÷c.",
            )
        )
        why.append(
            P("The same unit in logits z = ln w: e_z = x − n softmax(z) = ", r["e_z"], " = w ⊙ e.")
        )
    else:
        why.append(P("Shift invariance: Σᵢ eᵢ = ", float(np.sum(e)), "."))
        why.append(
            P(
                "The same unit in relative weights w = exp(z − max z): "
                "eᵢ = xᵢ / wᵢ − n / Σⱼ wⱼ gives ",
                r["e_w"],
                " = e / w.",
            )
        )
    if r["h"] is not None:
        why += _linear_block(
            r["e_z"],
            r["h"],
            r["p"],
            through,
            ("z", "h", "a linear softmax unit (h, since x holds the counts)"),
            ("ln P(x)", r"\ln P(x)"),
        )
    secs.append(Section("Why: n categorical draws", tuple(why)))
    return secs


# ---------------------------------------------------------------------------------------------
# bernoulli


def _bernoulli(
    form: str,
    theta: dict[str, np.ndarray],
    y: np.ndarray,
    n: int | None,
    x: np.ndarray | None,
    through: str,
) -> _Derived:
    t = theta[form]
    shape = tuple(np.broadcast_shapes(t.shape, y.shape))
    tb = np.broadcast_to(t, shape)
    yb = np.broadcast_to(y.astype(np.float64), shape)
    lp = _np(api.log_prob("bernoulli", yb, **{form: tb}))
    e = _np(api.score("bernoulli", yb, **{form: tb})[form])
    extra: list[tuple[str, Case, dict[str, np.ndarray]]] = []
    if form == "probs":
        pb = tb
        with np.errstate(divide="ignore"):
            z = np.log(pb) - np.log1p(-pb)
        other, t_other = "logits", z
        missing = "p ∈ {0, 1} has infinite logits, so the logits view is not shown."
    else:
        z = tb
        pb = _np(bernoulli.sigmoid(z))
        other, t_other = "probs", pb
        missing = "σ(z) rounds to 0 or 1 here, so the probs view is not shown."
    note = None
    try:
        e_other = _np(api.score("bernoulli", yb, **{other: t_other})[other])
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
    e_cat = _np(api.score("categorical", yb.astype(np.int64), probs=two)["probs"])
    # Units sit on the last axis (a row); leading axes are rows.
    units_shape = shape if shape else (1,)
    batch = units_shape[:-1]
    rows = {
        k: None if v is None else v.reshape(units_shape)
        for k, v in {"y": yb, "p": pb, "lp": lp, "e": e, "z": z, "e_z": e_z, "e_p": e_p}.items()
    }
    rows["e_cat"] = e_cat.reshape((*units_shape, 2))
    rows["x"] = xb = _row_features(x, batch)
    linear = None
    if xb is not None:
        if rows["e_z"] is None:
            raise ValueError("features need finite logits; p ∈ {0, 1} has none (use 0 < p < 1)")
        linear, check = _linear("bernoulli", rows["e_z"], xb, {"logits": rows["z"]}, rows["y"])
        extra.append(check)
    return _Derived(
        lp=lp,
        score={form: e},
        other_view=other_view,
        linear=linear,
        case=Case("bernoulli", {form: tb}, yb),
        extra=extra,
        title=_title(
            "bernoulli", form, "y = " + " ".join(str(int(v)) for v in np.ravel(yb)[:8]), batch
        ),
        parts=_parts(batch, rows, lambda r: _bernoulli_sections(r, form, through, note)),
    )


def _unit_exp_section(units: int, es: list[tuple[str, str, np.ndarray]], pu: np.ndarray) -> Section:
    """∂P/∂θ = P · e for independent units (each its own P)."""
    header: list[object] = ["unit", ("P", "P")]
    for name, tex, _ in es:
        header += [(f"e_{name}", f"e_{{{tex}}}"), (f"P · e_{name}", rf"P\,e_{{{tex}}}")]
    rows = []
    for u in range(units):
        row: list[object] = [u, float(pu[u])]
        for _, _, ev in es:
            row += [float(ev[u]), float(pu[u] * ev[u])]
        rows.append(row)
    return Section(
        "Chain rule through exp",
        (
            P(
                "prob = exp(log_prob), so each unit's rule is multiplied by the derivative of exp "
                "at ln P, which is P itself (prob.grad = 1, log_prob.grad = P):"
            ),
            E(
                (
                    "∂P/∂θ = (∂P/∂ ln P) · ∂ ln P/∂θ = P · e",
                    r"\frac{\partial P}{\partial\theta} = \frac{\partial P}{\partial\ln P}\,"
                    r"\frac{\partial\ln P}{\partial\theta} = P\,e",
                )
            ),
            T(header, rows),
        ),
    )


def _bernoulli_sections(
    r: dict[str, Any], form: str, through: str, note: str | None
) -> list[Section]:
    y, p, e, lp = r["y"], r["p"], r["e"], r["lp"]
    units = y.shape[0]
    pu = np.exp(lp)
    yi = [int(v) for v in y]
    if form == "probs":
        fwd = T(
            [
                "unit",
                ("pᵢ", "p_i"),
                ("yᵢ", "y_i"),
                ("ln P(yᵢ)", r"\ln P(y_i)"),
                ("P(yᵢ)", "P(y_i)"),
            ],
            [[u, float(p[u]), yi[u], float(lp[u]), float(pu[u])] for u in range(units)],
        )
        eq = E(
            (
                "P(y) = pʸ (1 − p)¹⁻ʸ,   ln P(y) = y ln p + (1 − y) ln(1 − p)",
                r"P(y) = p^y (1-p)^{1-y},\quad \ln P(y) = y\ln p + (1-y)\ln(1-p)",
            )
        )
        rule = E(
            (
                "e = ∂ ln P/∂p = y/p − (1 − y)/(1 − p) = (y − p) / (p (1 − p))",
                r"e = \frac{\partial\ln P}{\partial p} = \frac{y}{p} - \frac{1-y}{1-p} = "
                r"\frac{y-p}{p(1-p)}",
            )
        )
        tab = T(
            [
                "unit",
                ("yᵢ", "y_i"),
                ("yᵢ − pᵢ", "y_i - p_i"),
                ("pᵢ (1 − pᵢ)", "p_i(1-p_i)"),
                ("eᵢ", "e_i"),
            ],
            [
                [u, yi[u], float(y[u] - p[u]), float(p[u] * (1 - p[u])), float(e[u])]
                for u in range(units)
            ],
        )
    else:
        z = r["z"]
        fwd = T(
            [
                "unit",
                ("zᵢ", "z_i"),
                ("pᵢ = σ(zᵢ)", r"p_i = \sigma(z_i)"),
                ("yᵢ", "y_i"),
                ("ln P(yᵢ)", r"\ln P(y_i)"),
                ("P(yᵢ)", "P(y_i)"),
            ],
            [
                [u, float(z[u]), float(p[u]), yi[u], float(lp[u]), float(pu[u])]
                for u in range(units)
            ],
        )
        eq = E(
            (
                "p = σ(z) = 1 / (1 + e⁻ᶻ),   ln P(y) = y z − ln(1 + eᶻ)",
                r"p = \sigma(z) = \frac{1}{1+e^{-z}},\quad \ln P(y) = y z - \ln(1+e^z)",
            )
        )
        rule = E(
            (
                "e = ∂ ln P/∂z = y − σ(z)",
                r"e = \frac{\partial\ln P}{\partial z} = y - "
                r"\sigma(z)",
            )
        )
        tab = T(
            ["unit", ("yᵢ", "y_i"), ("σ(zᵢ)", r"\sigma(z_i)"), ("eᵢ", "e_i")],
            [[u, yi[u], float(p[u]), float(e[u])] for u in range(units)],
        )
    secs = [
        Section("Forward pass", (eq, fwd)),
        Section(
            "The rule: Williams' Bernoulli unit",
            (
                P(
                    "Williams (1992) calls e = ∂ ln P/∂θ the characteristic eligibility; for a "
                    "Bernoulli unit it is the rule of his paper, and REINFORCE moves θ by "
                    "Δθ = α (r − baseline) e. Each unit is independent:"
                ),
                rule,
                tab,
                E(("e = ", "e = "), e, "   " + _log_note(form)),
            ),
        ),
    ]
    sym = "p" if form == "probs" else "z"
    if through != "log":
        secs.append(_unit_exp_section(units, [(sym, sym, e)], pu))
    e_cat = r["e_cat"]
    link: list[Any] = [
        P(
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
        link.append(P(note))
    elif form == "probs":
        link.append(
            P(
                "The same unit in logits z = ln(p / (1 − p)): e_z = y − σ(z) = ",
                r["e_z"],
                " = p (1 − p) e_p (Williams' Bernoulli-logistic unit).",
            )
        )
    else:
        link.append(
            P(
                "The same unit in probs p = σ(z): e_p = (y − p) / (p (1 − p)) = ",
                r["e_p"],
                " = e_z / (p (1 − p)).",
            )
        )
    if r["x"] is not None:
        link += _linear_block(
            r["e_z"],
            r["x"],
            float(np.prod(pu)),
            through,
            ("z", "x", "a layer of Bernoulli-logistic units"),
            ("ln P", r"\ln P"),
        )
    secs.append(Section("From Bernoulli to categorical", tuple(link)))
    return secs


# ---------------------------------------------------------------------------------------------
# normal


def _normal(
    form: str,
    theta: dict[str, np.ndarray],
    y: np.ndarray,
    n: int | None,
    x: np.ndarray | None,
    through: str,
) -> _Derived:
    mu, sigma, yb = np.broadcast_arrays(theta["loc"], theta["scale"], y.astype(np.float64))
    lp = _np(api.log_prob("normal", yb, loc=mu, scale=sigma))
    sc = api.score("normal", yb, loc=mu, scale=sigma)
    e_mu, e_sigma = _np(sc["loc"]), _np(sc["scale"])
    e_s = _np(normal.score_log_scale(mu, sigma, yb))
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
    rows["x"] = xb = _row_features(x, batch)
    extra: list[tuple[str, Case, dict[str, np.ndarray]]] = []
    linear = None
    if xb is not None:
        params = {"loc": rows["mu"], "scale": rows["sigma"]}
        linear, check = _linear("normal", rows["e_mu"], xb, params, rows["y"], pre="loc")
        extra.append(check)
    return _Derived(
        lp=lp,
        score={"loc": e_mu, "scale": e_sigma},
        other_view={"log_scale": np.log(sigma), "score": {"log_scale": e_s}},
        linear=linear,
        case=Case("normal", {"loc": mu, "scale": sigma}, yb),
        extra=extra,
        title=_title(
            "normal", form, "value y = " + " ".join(f"{v:g}" for v in np.ravel(yb)[:8]), batch
        ),
        parts=_parts(batch, rows, lambda r: _normal_sections(r, through)),
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
                E(
                    (
                        "ln N(y; μ, σ) = −(y − μ)² / (2σ²) − ln σ − ½ ln 2π",
                        r"\ln\mathcal{N}(y;\mu,\sigma) = -\frac{(y-\mu)^2}{2\sigma^2}"
                        r" - \ln\sigma - \tfrac12\ln 2\pi",
                    )
                ),
                T(
                    [
                        "unit",
                        ("μᵢ", r"\mu_i"),
                        ("σᵢ", r"\sigma_i"),
                        ("yᵢ", "y_i"),
                        ("ln N", r"\ln\mathcal{N}"),
                        ("N (density)", r"\mathcal{N}"),
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
                P(
                    "Williams (1992) calls e = ∂ ln N/∂θ the characteristic eligibility; for a "
                    "Gaussian unit with mean μ and standard deviation σ:"
                ),
                E(
                    (
                        "e_μ = ∂ ln N/∂μ = (y − μ) / σ²,   e_σ = ∂ ln N/∂σ = ((y − μ)² − σ²) / σ³",
                        r"e_\mu = \frac{y-\mu}{\sigma^2},\quad e_\sigma = \frac{(y-\mu)^2-\sigma^2}"
                        r"{\sigma^3}",
                    )
                ),
                T(
                    [
                        "unit",
                        ("y − μ", r"y-\mu"),
                        ("σ²", r"\sigma^2"),
                        ("e_μ", r"e_\mu"),
                        ("(y − μ)² − σ²", r"(y-\mu)^2-\sigma^2"),
                        ("σ³", r"\sigma^3"),
                        ("e_σ", r"e_\sigma"),
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
                E(
                    ("e_μ = ", r"e_\mu = "),
                    r["e_mu"],
                    ("   e_σ = ", r"\quad e_\sigma = "),
                    r["e_sigma"],
                    "   (loc.grad, scale.grad after log_prob.backward())",
                ),
            ),
        ),
    ]
    if through != "log":
        secs.append(
            _unit_exp_section(units, [("μ", r"\mu", r["e_mu"]), ("σ", r"\sigma", r["e_sigma"])], pu)
        )
    notes: list[Any] = [
        P(
            "Nothing is renormalised here, so there are no cross terms: e_μ pushes μ towards y, "
            "e_σ widens σ when |y − μ| > σ and narrows it otherwise."
        ),
        P(
            "A policy network usually outputs s = ln σ; then e_s = σ e_σ = (y − μ)² / σ² − 1 = ",
            r["e_s"],
            ".",
        ),
    ]
    if r["x"] is not None:
        notes += _linear_block(
            r["e_mu"],
            r["x"],
            float(np.prod(pu)),
            through,
            ("μ", "x", "a linear Gaussian unit's mean"),
            ("ln N", r"\ln\mathcal{N}"),
        )
    secs.append(Section("Reading the rule", tuple(notes)))
    return secs
