"""The sweep's pictures: learning curves, performance profile, steps to solve.

Their words are the trainer's (:class:`eligibility.runs.Schema`): returns and environment steps
for ``train``, rewards, accuracies and completion tokens for ``finetune``.

Each is written atomically, in the format its suffix names (``eligibility._io.save_figure``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from eligibility._io import save_figure
from eligibility.runs import Schema
from eligibility.sweep import stats


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _saved(plt: Any, fig: Any, path: Path) -> Path:
    """Lay the figure out, write it to ``path`` and free it (freed even when the write fails)."""
    fig.tight_layout()
    try:
        return save_figure(fig, path, dpi=100)
    finally:
        plt.close(fig)


def curves(groups: dict[str, list[dict[str, Any]]], path: Path, words: Schema) -> Path:
    """Batch mean score vs steps: IQM over seeds, shaded 95 % bootstrap band, per setting.

    The runs are resampled onto a common grid of 100 points (each run's last value at or before
    each point).
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    top = max(
        (max(r["curve"]["env_steps"], default=0) for rs in groups.values() for r in rs), default=0
    )
    grid = np.linspace(0, max(top, 1), 100)
    for name, runs in groups.items():
        data = [
            (np.array(r["curve"]["env_steps"]), np.array(r["curve"]["mean_return"]))
            for r in runs
            if r["curve"]["env_steps"]
        ]
        if not data:
            continue
        mid, lo, hi = stats.step_grid_mean(data, grid)
        (line,) = ax.plot(grid, mid, label=f"{name} (n={len(data)})")
        ax.fill_between(grid, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel(words.x_label)
    ax.set_ylabel(f"batch mean {words.score_name}: IQM over seeds, 95% CI")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return _saved(plt, fig, path)


def profile(groups: dict[str, list[dict[str, Any]]], path: Path, words: Schema) -> Path:
    """Performance profile: the fraction of runs whose final evaluation exceeds τ, vs τ."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    finals = {
        k: np.array([r["final_eval_return"] for r in rs if r["final_eval_return"] is not None])
        for k, rs in groups.items()
    }
    values = np.concatenate([v for v in finals.values() if len(v)] or [np.zeros(1)])
    taus = np.linspace(values.min(), values.max(), 200)
    for name, v in finals.items():
        if len(v):
            ax.plot(taus, (v[None, :] > taus[:, None]).mean(axis=1), label=name)
    ax.set_xlabel(f"τ, final {words.evaluation_name}")
    ax.set_ylabel(f"fraction of runs with {words.evaluation_name} > τ")
    if any(len(v) for v in finals.values()):  # no evaluation ran: no lines, no legend
        ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return _saved(plt, fig, path)


def steps_to_solve(
    summary: dict[str, Any], groups: dict[str, list[dict[str, Any]]], path: Path, words: Schema
) -> Path:
    """One point per seed per setting (hollow: censored at its budget), IQM with its interval."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.6 * len(groups)))
    for i, (name, runs) in enumerate(groups.items()):
        for r in runs:
            x = r["steps_to_target"] if r["steps_to_target"] is not None else r["budget"]
            ax.plot(
                x,
                i,
                "o",
                color="C0" if r["steps_to_target"] is not None else "none",
                markeredgecolor="C0",
                alpha=0.7,
            )
        s = summary[name].get("steps_to_target")
        if s:
            ax.errorbar(
                s["iqm"],
                i + 0.25,
                xerr=[[s["iqm"] - s["iqm_ci"][0]], [s["iqm_ci"][1] - s["iqm"]]],
                fmt="s",
                color="C3",
                capsize=3,
            )
    ax.set_xscale("log")  # seeds spread over orders of magnitude
    ax.set_yticks(range(len(groups)), list(groups), fontsize=8)
    ax.set_xlabel(
        f"{words.x_label} to reach the target (hollow: never, shown at the budget); "
        "red: IQM, 95% CI"
    )
    ax.grid(axis="x", alpha=0.3)
    return _saved(plt, fig, path)


__all__ = ["curves", "profile", "steps_to_solve"]
