"""The outline every derivation shares, and the steps it reuses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, Protocol, TypeVar

import numpy as np

from eligibility import api
from eligibility._array import to_numpy
from eligibility.distributions import REGISTRY, categorical
from eligibility.explain.autograd import NOT_ASKED, Autograd, Case, cross_check
from eligibility.explain.doc import Math, Num, Part, Section, Table, equation, paragraph, table
from eligibility.explain.explanation import Explanation

THROUGH = ("both", "log", "exp")


def as_float64(x: object) -> np.ndarray:
    """``x`` (NumPy, torch, list) as a float64 NumPy array."""
    return np.asarray(to_numpy(x), dtype=np.float64)


def log_note(name: str) -> str:
    """Where autograd puts e: the parameter's ``.grad`` after ``log_prob.backward()``."""
    return f"({name}.grad after log_prob.backward())"


def exp_note(name: str) -> str:
    """Where autograd puts π e: the parameter's ``.grad`` after ``prob.backward()``."""
    return f"({name}.grad after prob.backward())"


def checked_features(features: object) -> np.ndarray:
    """The features x of a linear unit as float64, or a ValueError naming what is wrong."""
    try:
        x = np.asarray(to_numpy(features), dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"features must be numbers, got {features!r}") from err
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError("features must be a vector x₁ … x_d (d ≥ 1)")
    if not np.all(np.isfinite(x)):
        raise ValueError("features must be finite numbers")
    return x


def batch_rows(batch: tuple[int, ...]) -> list[tuple[tuple[int, ...], str | None]]:
    """(index, label) of every row of ``batch``; one unlabelled row when there is no batch."""
    if batch == ():
        return [((), None)]
    out = []
    for idx in np.ndindex(batch):
        label = f"row {idx[0]}" if len(idx) == 1 else f"row {idx}"
        out.append((idx, label))
    return out


def row_features(x: np.ndarray | None, batch: tuple[int, ...]) -> np.ndarray | None:
    """The features broadcast to one vector per row, or a ValueError naming the shapes."""
    if x is None:
        return None
    try:
        return np.broadcast_to(x, batch + x.shape[-1:])
    except ValueError:
        raise ValueError(
            f"features of shape {x.shape} do not match the batch shape {batch}; give one "
            "feature vector, or one per row"
        ) from None


def autograd_section(ag: Autograd, through: str) -> Section:
    """The closing step: the closed forms against torch autograd (or why it was skipped)."""
    if not ag.available:
        return Section("Autograd cross-check", (paragraph(ag.reason or ""),))
    keep = {
        "log": lambda k: not k.startswith(("prob_gradient", "prob")) or k == "prob",
        "exp": lambda k: not k.startswith("score"),
        "both": lambda k: True,
    }[through]
    shown = {k: d for k, d in ag.differences.items() if keep(k)}
    rows = [[k, Num(d, sci=True)] for k, d in shown.items()]
    return Section(
        "Autograd cross-check",
        (
            paragraph(
                f"The same quantities from torch.distributions (torch {ag.torch_version}, "
                "float64) by autograd: log_prob.backward() for the eligibilities, "
                "prob.backward() for the gradients through exp, a linear unit at W = 0 for "
                "the rule one layer down."
            ),
            table(["quantity", "max |closed form − autograd|"], rows),
            paragraph("Largest absolute difference: ", Num(ag.max_abs_diff or 0.0, sci=True), "."),
        ),
    )


@dataclass(frozen=True)
class Steps:
    """The outline every derivation follows, one :class:`Section` per step.

    The forward pass, the rule (the characteristic eligibility in symbols and with the numbers
    put in), the chain rule through exp (absent with ``through="log"``), why the entries of the
    parameters not sampled are not zero, and the other views of the same unit; the autograd
    cross-check closes the document (:func:`autograd_section`).
    """

    forward: Section
    rule: Section
    through_exp: Section | None
    why_not_zero: Section | None = None
    other_views: Section | None = None

    def sections(self) -> tuple[Section, ...]:
        """The steps present, in order."""
        steps = (self.forward, self.rule, self.through_exp, self.why_not_zero, self.other_views)
        return tuple(s for s in steps if s is not None)


@dataclass(frozen=True)
class Derived:
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
    continuous: bool = False


@dataclass(frozen=True)
class Given:
    """The checked input every derivation starts from, float64 NumPy throughout."""

    form: str
    """The view the parameters were given in (``"probs"``, ``"logits"``, ``"loc"``, …)."""
    theta: dict[str, np.ndarray]
    """The parameters by torch's names."""
    value: np.ndarray
    """The action taken; leading axes are rows."""
    total_count: int | None
    """A multinomial's n (None for every other distribution)."""
    features: np.ndarray | None
    """The inputs x of a linear unit, if given."""
    through: str
    """``"log"``, ``"exp"`` or ``"both"``."""


Derive = Callable[[Given], Derived]
"""A distribution's derivation: the checked input in, the core's numbers and the story out."""


def finish(
    c: api.Checked,
    theta: dict[str, np.ndarray],
    value: np.ndarray,
    features: np.ndarray | None,
    through: str,
    d: Derived,
    autograd: bool,
) -> Explanation:
    """The Explanation: ∂π/∂θ = π e (the chain rule through exp), the autograd check if asked."""
    p = np.exp(d.lp)
    # ∂π/∂θ = π · ∂ ln π/∂θ: the chain rule through exp that prob.backward() applies; π has
    # the batch shape, each eligibility the parameter's (a vector per row for a softmax unit).
    pk = p.reshape(p.shape + (1,) * c.spec.param_event_dims)
    grad = {k: pk * e for k, e in d.score.items()}
    ag = cross_check(d.case, d.lp, d.score, grad, d.extra) if autograd else NOT_ASKED
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
        check_section=autograd_section(ag, through),
        continuous=d.continuous,
    )


def title(dist: str, form: str, what: str, batch: tuple[int, ...]) -> str:
    """The document's title: the distribution, its view, the value, the number of rows."""
    rows = "" if batch == () else f", {int(np.prod(batch))} rows"
    return f"{dist} with {REGISTRY[dist].forms[form].view}, {what}{rows}"


def linear_block(
    e_pre: np.ndarray,
    x: np.ndarray,
    p_a: float,
    through: str,
    names: tuple[str, str, str],
    lp: str = "ln πₐ",
) -> list[Any]:
    """∂/∂W = e_pre xᵀ and ∂/∂b = e_pre for a linear unit pre = W x + b (one row)."""
    pre, xs, unit = names
    lpt = lp
    e_w = e_pre[:, None] * x[None, :]
    header: list[object] = [
        "i",
        Math(f"∂/∂bᵢ = e_{pre},ᵢ"),
    ]
    sub = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
    header += [Math(f"∂/∂Wᵢ{str(j).translate(sub)}") for j in range(x.shape[0])]
    rows = [[i, float(e_pre[i]), *map(float, e_w[i])] for i in range(e_pre.shape[0])]
    blocks: list[Any] = [
        paragraph(
            f"Carried one layer down into {unit} {pre} = W {xs} + b with features {xs} = ",
            x,
            ", the chain rule gives the backpropagation rule a REINFORCE network uses:",
        ),
        equation(
            Math(f"∂ {lpt}/∂W = e_{pre} {xs}ᵀ,   ∂ {lpt}/∂b = e_{pre}"),
        ),
        table(header, rows),
        paragraph(
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


class UnitRows(Protocol):
    """A row of a layer of independent units: its features, ln p of each unit, ``through``."""

    features: np.ndarray | None
    log_prob: np.ndarray
    through: str


def units_linear_block(
    r: UnitRows, e_pre: np.ndarray, names: tuple[str, str, str], lp: str
) -> list[Any]:
    """:func:`linear_block` for a layer of independent units, P = Πᵤ pᵤ; none without features."""
    if r.features is None:
        return []
    p_a = float(np.prod(np.exp(r.log_prob)))
    return linear_block(e_pre, r.features, p_a, r.through, names, lp)


def linear_unit(
    dist: str,
    e_pre: np.ndarray,
    x: np.ndarray | None,
    params: dict[str, np.ndarray],
    value: np.ndarray,
    extra: list[tuple[str, Case, dict[str, np.ndarray]]],
    n: int | None = None,
    pre: str = "logits",
) -> dict[str, np.ndarray] | None:
    """∂/∂W = e_pre xᵀ, ∂/∂b = e_pre for the unit ``params[pre]`` = W x + b; None without x.

    Its cross-check against autograd is appended to ``extra``.
    """
    if x is None:
        return None
    linear = {"features": x, "W": e_pre[..., :, None] * x[..., None, :], "b": e_pre}
    case = Case(dist, params, value, n, features=x, linear=pre)
    extra.append(("linear", case, {"W": linear["W"], "b": linear["b"]}))
    return linear


Row = TypeVar("Row")


def _at(a: Any, idx: tuple[int, ...]) -> Any:
    """``a`` at row ``idx`` if it is an array of the batch, else ``a`` itself."""
    return a[idx] if isinstance(a, np.ndarray) else a


def parts_by_row(batch: tuple[int, ...], whole: Row, steps: Callable[[Row], Steps]) -> list[Part]:
    """One part per row of ``batch``: the ``steps`` of that row of ``whole``.

    ``whole`` is a dataclass of batch arrays; every array field is taken at the row, None and
    plain values stay as they are.
    """
    out = []
    for idx, label in batch_rows(batch):
        at_row = {f.name: _at(getattr(whole, f.name), idx) for f in fields(whole)}  # type: ignore[arg-type]
        row = replace(whole, **at_row)  # type: ignore[type-var]
        out.append(Part(label, steps(row).sections()))
    return out


def softmax_views(
    dist: str, form: str, t: np.ndarray, v: np.ndarray, n: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any], list[Any]]:
    """A softmax unit (categorical, multinomial) in both views: weights w and logits z.

    Returns:
        π, z, w, the core's eligibility in the other view, ``other_view`` and its cross-check
        (the start of ``extra``).
    """
    if form == "probs":
        w = t
        pi = as_float64(categorical.normalise(w))
        with np.errstate(divide="ignore"):
            z = np.log(w)  # z = ln w gives softmax(z) = w / Σw: the same unit
        other, t_other = "logits", z
    else:
        z = t
        pi = as_float64(categorical.softmax(z))
        # exp(z − max z): weights of the same unit (π is scale-free), without overflow
        w = np.exp(z - np.max(z, axis=-1, keepdims=True))
        other, t_other = "probs", w
    kw: dict[str, Any] = {other: t_other} if n is None else {other: t_other, "total_count": n}
    try:
        e_other = as_float64(api.score(dist, v, **kw)[other])
    except ValueError:
        if form == "probs":
            raise
        raise ValueError(
            "logits: a sampled category's logit lies more than about 745 below the largest, so "
            "its weight exp(zᵢ − max z) underflows to 0 in float64 and the weights view "
            "δᵢₐ / wₐ that explain shows beside the logits cannot be written; bring the logits "
            "closer together"
        ) from None
    extra = [("other_view.score", Case(dist, {other: t_other}, v, n), {other: e_other})]
    return pi, z, w, e_other, {other: t_other, "score": {other: e_other}}, extra


def exp_section(
    p: float,
    e: np.ndarray,
    mark: int | None,
    sym: str,
    note: str,
    prob: str = "πₐ",
) -> Section:
    """∂π/∂θ = π · e, component by component (sym: the parameter's symbol, prob: π's)."""
    th, pt, k = sym, prob, e.shape[-1]
    ga = p * e
    return Section(
        "Chain rule through exp",
        (
            paragraph(
                f"The snippet differentiates prob = exp(log_prob), so the rule above is multiplied "
                f"by the derivative of exp at ln {pt}, which is {pt} itself:"
            ),
            equation(
                Math(
                    f"{pt} = exp(ln {pt})   ⇒   ∂{pt}/∂{th}ᵢ = (∂{pt}/∂ ln {pt}) · eᵢ = {pt} · eᵢ"
                ),
            ),
            paragraph(
                "Upstream gradients: prob.grad = ",
                Math(f"∂{pt}/∂{pt}"),
                " = ",
                1.0,
                " and log_prob.grad = ",
                Math(f"∂{pt}/∂ ln {pt} = {pt}"),
                " = ",
                p,
                ".",
            ),
            table(
                ["i", Math("eᵢ"), Math(f"{pt} · eᵢ")],
                [[i, float(e[i]), float(ga[i])] for i in range(k)],
                mark=mark,
            ),
            equation(Math(f"∂{pt}/∂{th} = "), ga, "   " + note),
        ),
    )


def unit_table(*columns: tuple[object, Any]) -> Table:
    """A layer of units' table: a row per unit, its index, then each column's value at it.

    A column is (header, its values by unit); integer values show as integers.
    """
    return table(
        ["unit", *(header for header, _ in columns)],
        [[u, *(np.asarray(v)[u].item() for _, v in columns)] for u in range(len(columns[0][1]))],
    )


def unit_exp_section(units: int, es: list[tuple[str, np.ndarray]], pu: np.ndarray) -> Section:
    """∂P/∂θ = P · e for independent units (each its own P)."""
    header: list[object] = ["unit", Math("P")]
    for name, _ in es:
        header += [Math(f"e_{name}"), Math(f"P · e_{name}")]
    rows = []
    for u in range(units):
        row: list[object] = [u, float(pu[u])]
        for _, ev in es:
            row += [float(ev[u]), float(pu[u] * ev[u])]
        rows.append(row)
    return Section(
        "Chain rule through exp",
        (
            paragraph(
                "prob = exp(log_prob), so each unit's rule is multiplied by the derivative of exp "
                "at ln P, which is P itself (prob.grad = 1, log_prob.grad = P):"
            ),
            equation(Math("∂P/∂θ = (∂P/∂ ln P) · ∂ ln P/∂θ = P · e")),
            table(header, rows),
        ),
    )
