"""The rule as a picture: ``eligibility explain … --plot FILE``.

Which picture a distribution draws is its spec's to say (``DistributionSpec.picture``, one of
:data:`PICTURES`). ``categories`` (the categorical): one figure of three panels over the
categories i: the normalised probabilities π, the gradient of the chosen quantity (ln πₐ, πₐ or
both) with respect to the relative weights w (torch's ``probs``), and with respect to the
logits z; the sampled action is marked in each. On the w panel, the dashed line is the part c·1
of each gradient along (1, …, 1): a change δ of the weights with Σᵢ δᵢ = 0 does not see it, and
Σᵢ wᵢ eᵢ = 0 (scaling every weight changes nothing), which is why the uniform −0.69 of the
question is not a mistake. ``score-curves`` (the other distributions): one panel per parameter
(per component of a vector parameter): the score ∂ ln P/∂θ as θ moves around the given point,
other parameters fixed, the given point marked.

Every number drawn is one the text shows (the same :class:`Explanation`) or one the core
computes at a nearby parameter (:func:`eligibility.api.score`); each series carries a label,
so a test reads the numbers back from the figure's artists, not its pixels. matplotlib is
imported here only, when a figure is drawn.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from eligibility import _io, api
from eligibility.distributions import REGISTRY, categorical
from eligibility.explain.explanation import Explanation

MAX_PANELS = 9
"""At most this many parameter components are drawn (a wider vector: its first ones)."""

GRID = 161
"""Points of each score curve."""

_COLOURS = {"log": "#1f77b4", "exp": "#d62728", "pi": "#7f7f7f", "mark": "#2ca02c"}


def figure(x: Explanation) -> Any:
    """The figure for ``x`` (a ``matplotlib.figure.Figure``); one row of parameters only.

    Raises:
        ValueError: ``x`` holds a batch of rows (draw one row at a time); a row of independent
            units (``--loc 0 1``) is one row.
    """
    if np.ndim(x.log_prob) > (0 if REGISTRY[x.dist].param_event_dims else 1):
        raise ValueError(
            "--plot draws one row of parameters; give a single row (not a batch of rows)"
        )
    fig = PICTURES[REGISTRY[x.dist].picture](x)
    fig.suptitle(x.title)
    return fig


def _new_figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def save(x: Explanation, path: str | os.PathLike[str]) -> Path:
    """Draw ``x`` and write it to ``path`` (PNG, SVG or PDF by the suffix), atomically."""
    _io.figure_file(path, option="--plot")  # a bad name fails before the drawing
    return _io.save_figure(figure(x), path, option="--plot", dpi=110)


# categorical ---------------------------------------------------------------------------------


def categorical_numbers(x: Explanation) -> dict[str, np.ndarray]:
    """What the categorical figure draws: π, w, z and the gradients w.r.t. w and z.

    ``e_w``/``g_w`` are ∂ ln πₐ/∂w and ∂πₐ/∂w for the relative weights (the given ``probs``,
    or w = exp(z − max z) for given logits); ``e_z``/``g_z`` the same for the logits.
    """
    p = float(x.prob)
    if x.form == "probs":
        w, z = x.parameters["probs"], x.other_view["logits"]
        e_w, e_z = x.score["probs"], x.other_view["score"]["logits"]
        pi = np.asarray(categorical.normalise(w), dtype=np.float64)
    else:
        w, z = x.other_view["probs"], x.parameters["logits"]
        e_w, e_z = x.other_view["score"]["probs"], x.score["logits"]
        pi = np.asarray(categorical.softmax(z), dtype=np.float64)
    return {"pi": pi, "w": w, "z": z, "e_w": e_w, "g_w": p * e_w, "e_z": e_z, "g_z": p * e_z}


def _series(x: Explanation, n: dict[str, np.ndarray], view: str) -> list[tuple[str, np.ndarray]]:
    """(label, values) of the chosen quantities' gradients for one view (``w`` or ``z``)."""
    out = []
    if x.through in ("log", "both"):
        out.append((f"∂ ln πₐ/∂{view}  (log_prob.backward())", n[f"e_{view}"]))
    if x.through in ("exp", "both"):
        out.append((f"∂πₐ/∂{view}  (prob.backward())", n[f"g_{view}"]))
    return out


def _categories(x: Explanation) -> Any:
    """π; the gradient w.r.t. the weights with its c·1 part; the gradient w.r.t. the logits."""
    fig = _new_figure(13.5, 5.0)
    n = categorical_numbers(x)
    a, k = int(x.value), n["pi"].shape[-1]
    idx = np.arange(k)
    ax_pi, ax_w, ax_z = fig.subplots(1, 3)
    colours = [_COLOURS["mark"] if i == a else _COLOURS["pi"] for i in idx]
    bars = ax_pi.bar(idx, n["pi"], color=colours, label="π = w / Σⱼ wⱼ (green: sampled a)")
    ax_pi.bar_label(bars, fmt="%.4g", fontsize=7)
    ax_pi.set_title(f"normalised probabilities π (sampled a = {a})", fontsize=10)
    ax_pi.set_ylim(0, 1.08)
    ax_pi.set_xlabel("category i")
    notes = {
        "w": "dashed: each gradient's part c·1 along (1, …, 1); a change δ that keeps\n"
        "Σᵢ wᵢ (Σᵢ δᵢ = 0, the sum-to-one direction) does not see it.\n"
        f"Σᵢ wᵢ eᵢ = {np.sum(n['w'] * n['e_w']):.2g}: scaling every weight changes nothing "
        "(w×c gives e÷c)",
        "z": f"Σᵢ eᵢ = {np.sum(n['e_z']):.2g}: adding c to every logit changes nothing",
    }
    for ax, view, title in (
        (
            ax_w,
            "w",
            "gradient w.r.t. the weights w (torch's probs)"
            + ("" if x.form == "probs" else ",\nw = exp(z − max z)"),
        ),
        (ax_z, "z", "gradient w.r.t. the logits z"),
    ):
        series = _series(x, n, view)
        width = 0.8 / len(series)
        for j, (label, ys) in enumerate(series):
            colour = _COLOURS["log" if label.startswith("∂ ln") else "exp"]
            bars = ax.bar(idx + (j - (len(series) - 1) / 2) * width, ys, width, label=label)
            ax.bar_label(bars, fmt="%.4g", fontsize=7)
            for i, b in enumerate(bars):
                b.set_facecolor(colour)
                b.set_edgecolor("black" if i == a else colour)
                b.set_linewidth(2.0 if i == a else 0.5)
            if view == "w":
                c = float(np.mean(ys))
                ax.axhline(c, color=colour, ls="--", lw=1, label=f"c·1 part: c = {c:.4g}")
        ax.axhline(0, color="black", lw=0.6)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("category i\n" + notes[view], fontsize=8)
        ax.margins(y=0.12)
    handles, labels = [], []
    for ax in (ax_pi, ax_w, ax_z):
        ax.set_xticks(idx, [f"{i} (a)" if i == a else str(i) for i in idx])
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    fig.legend(handles, labels, loc="outside lower center", ncol=4, fontsize=8)
    return fig


# the other distributions: the score around the given point -----------------------------------


def _grid(theta: float, positive: bool) -> np.ndarray:
    """Parameter values around ``theta``: ±½|θ| for a positive parameter, ±max(1, |θ|) else."""
    half = abs(theta) / 2 if positive and theta != 0 else max(1.0, abs(theta))
    return np.linspace(theta - half, theta + half, GRID)


def score_curve(
    x: Explanation, name: str, i: int | None
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The score ∂ ln P/∂θ for θ = ``x.parameters[name]`` (component ``i``) moved on a grid.

    The whole grid is one batched call of the core (the grid on a leading batch axis of the
    parameter): the same numbers as a call a point (``tests/test_explain_plot.py`` holds them
    against that loop), a fraction of the time. Where a point is outside the domain, the call
    raises, and the points are asked one by one.

    Returns:
        (grid, score on it, θ at the given point, the score there). Grid points outside the
        parameter's domain (where the core raises) are left out.
    """
    params = {k: np.asarray(v, dtype=np.float64) for k, v in x.parameters.items()}
    if x.total_count is not None:
        params_n: dict[str, Any] = {REGISTRY[x.dist].count_param or "": x.total_count}
    else:
        params_n = {}
    theta = float(params[name] if i is None else params[name][i])
    positive = bool(np.all(params[name] >= 0))
    at = np.asarray(x.score[name], dtype=np.float64)
    points = _grid(theta, positive)
    batched = np.repeat(params[name][np.newaxis], len(points), axis=0)
    if i is None:
        batched[...] = points.reshape(-1, *([1] * params[name].ndim))
    else:
        batched[:, i] = points
    try:
        e = api.score(x.dist, x.value, **{**params, name: batched}, **params_n)[name]
    except ValueError:
        pass  # a point outside the domain: each point on its own, below
    else:
        e = np.asarray(e, dtype=np.float64)
        return points, e if i is None else e[:, i], theta, float(at if i is None else at[i])
    grid, ys = [], []
    for t in points:
        moved = dict(params)
        if i is None:
            moved[name] = np.float64(t)
        else:
            moved[name] = params[name].copy()
            moved[name][i] = t
        try:
            e = api.score(x.dist, x.value, **moved, **params_n)[name]
        except ValueError:
            continue
        grid.append(t)
        ys.append(float(np.asarray(e, dtype=np.float64)[() if i is None else i]))
    return np.array(grid), np.array(ys), theta, float(at if i is None else at[i])


def _score_curves(x: Explanation) -> Any:
    """One panel per parameter (per component of a vector one): the score around the point."""
    panels = _score_panels(x)
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig = _new_figure(4.6 * cols, 3.6 * rows)
    for k, (name, i, grid, curve, at) in enumerate(panels):
        _score_panel(fig.add_subplot(rows, cols, k + 1), x, name, i, grid, curve, at)
    return fig


def _score_panels(x: Explanation) -> list[tuple[str, int | None, np.ndarray, np.ndarray, Any]]:
    panels = []
    for name, v in x.parameters.items():
        comps: list[int | None] = [None] if np.ndim(v) == 0 else list(range(np.shape(v)[0]))
        for i in comps[:MAX_PANELS]:
            grid, ys, theta, e = score_curve(x, name, i)
            panels.append((name, i, grid, ys, (theta, e)))
    return panels[:MAX_PANELS]


def _score_panel(
    ax: Any, x: Explanation, name: str, i: int | None, grid: Any, ys: Any, at: Any
) -> None:
    sym = name if i is None else f"{name}[{i}]"
    ax.plot(grid, ys, color=_COLOURS["log"], label=f"∂ ln P/∂{sym}")
    ax.plot([at[0]], [at[1]], "o", color=_COLOURS["exp"], label=f"given point: {at[1]:.4g}")
    ax.axhline(0, color="black", lw=0.6)
    ax.axvline(at[0], color="grey", lw=0.6, ls=":")
    ax.set_xlabel(sym)
    ax.set_ylabel("score")
    ax.set_title(f"score against {sym} (others fixed)", fontsize=9)
    ax.legend(fontsize=7)


PICTURES: dict[str, Callable[[Explanation], Any]] = {
    "categories": _categories,
    "score-curves": _score_curves,
}
"""The pictures ``--plot`` draws, by the name a distribution's spec gives (``picture``)."""


__all__ = ["PICTURES", "categorical_numbers", "figure", "save", "score_curve"]
