"""The learning curve of one or more runs: the batch's mean score vs steps, evaluations as dots."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from eligibility._io import save_figure
from eligibility.runs.metrics import read_metrics
from eligibility.runs.schema import Schema

PLOTTED = ("steps", "score", "evaluation", "x_label", "y_label")
"""The fields of a :class:`Schema` that :func:`plot_curves` reads (and a painter is sent)."""


def ema(y: np.ndarray, smooth: float) -> np.ndarray:
    """TensorBoard's smoothing: sₜ = w sₜ₋₁ + (1 − w) yₜ, s₋₁ = y₀, w = min(smooth, 1 − 10/n).

    A short run (a few dozen updates) gets a lighter average, since a 0.9 average over 20 points
    lags the data by most of the run.
    """
    w = max(0.0, min(smooth, 1.0 - 10.0 / len(y)))
    s, acc = np.empty_like(y), y[0]
    for i, v in enumerate(y):
        acc = w * acc + (1 - w) * v
        s[i] = acc
    return s


def plot_curves(run_dirs: list[Path], out: Path, schema: Schema, *, smooth: float = 0.9) -> None:
    """Score vs steps for each run: raw batch means (faint), EMA-smoothed line, evals (dots).

    Raises:
        ValueError: a directory without metrics.csv rows.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    try:
        for d in run_dirs:
            rows = read_metrics(d)
            if not rows:
                raise ValueError(f"{str(d)!r} has no metrics.csv rows to plot")
            x = np.array([float(r[schema.steps]) for r in rows])
            y = np.array([float(r[schema.score]) for r in rows])
            (line,) = ax.plot(x, ema(y, smooth), label=Path(d).name)
            ax.plot(x, y, color=line.get_color(), alpha=0.25, linewidth=0.8)
            ev = [
                (float(r[schema.steps]), float(r[schema.evaluation]))
                for r in rows
                if r[schema.evaluation]
            ]
            if ev:
                ex, ey = zip(*ev, strict=True)
                ax.plot(ex, ey, "o", color=line.get_color(), markersize=3)
        ax.set_xlabel(schema.x_label)
        ax.set_ylabel(schema.y_label)
        ax.legend(loc="best", fontsize="small")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        save_figure(fig, out, dpi=100)
    finally:
        plt.close(fig)
