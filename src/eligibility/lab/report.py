"""The lab's results for a person (a rich table) and as a plot (matplotlib)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from eligibility._io import save_figure
from eligibility.lab.estimate import Case
from eligibility.lab.run import LabResult


def _verdict(c: Case) -> str:
    if not c.biased:
        return "[green]✓ unbiased[/]" if c.passed else "[bold red]✗ REJECTED[/]"
    return "[yellow]biased, seen[/]" if not c.passed else "[yellow]biased, in noise[/]"


def _vector(x: np.ndarray) -> str:
    return "[" + ", ".join(f"{v:+.4f}" for v in x) + "]"


def render_text(result: LabResult, console: Any = None) -> None:
    """One table per problem: max |z| against t*, the verdict, variance, ratio, bias."""
    from rich.table import Table

    from eligibility._output import key_column, stdout_console

    if console is None:
        console = stdout_console()
    cfg = result.config
    per = f"E = {cfg.episodes} episodes"
    if result.cases and not hasattr(result.problems[0], "make_env"):  # a sequence problem
        per = "2Q prompts × G completions"
    console.print(
        f"[bold]eligibility lab[/]: N = {cfg.samples} estimates × {per} each, seed "
        f"{cfg.seed}; z-test family-wise α = {cfg.alpha:g} per case (Bonferroni)"
    )
    for p in result.problems:
        cases = [c for c in result.cases if c.problem == p.name]
        exact = p.flatten(p.exact)
        title = (
            f"{p.name}: {p.description}\nJ = {p.J:.4f}, E[T] = {p.expected_length:.2f} steps, "
            f"γ = {p.gamma:g}, {exact.size} parameters" + (", aliased states" if p.aliased else "")
        )
        table = Table(title=title, title_justify="left", show_edge=False)
        key_column(table, "baseline")
        table.add_column("γᵗ", justify="center")
        table.add_column("max |z|", justify="right")
        table.add_column("t*", justify="right")
        key_column(table, "verdict")
        table.add_column("tr Cov(ĝ)", justify="right")
        table.add_column("÷ none", justify="right")
        table.add_column("‖ḡ − ∇J‖", justify="right")
        table.add_column("noise", justify="right")
        for c in cases:
            table.add_row(
                c.baseline,
                "yes" if c.discount_weighting else "no",
                f"{c.max_abs_z:.2f}",
                f"{c.threshold:.2f}",
                _verdict(c),
                f"{c.variance:.4g}",
                f"{c.variance_ratio:.3f}",
                f"{c.bias:.4f}",
                f"{c.bias_noise:.4f}",
            )
        console.print()
        console.print(table)
        if exact.size <= 6:
            console.print(f"  ∇J exact          {_vector(exact)}")
            for c in cases:
                console.print(f"  ḡ {c.baseline:<15} {_vector(c.mean)}")
    console.print()
    n_unbiased = sum(not c.biased for c in result.cases)
    n_pass = sum(c.passed for c in result.cases if not c.biased)
    mark = "[green]" if result.all_unbiased_passed else "[bold red]"
    console.print(
        f"{mark}{n_pass}/{n_unbiased} unbiased cases pass their z-test[/] "
        f"({result.wall_s:.1f} s). max |z| > t* rejects E[ĝ] = ∇J; a true H₀ is rejected "
        f"with probability ≤ α = {cfg.alpha:g} per case."
    )


def plot(result: LabResult, path: str | os.PathLike[str], *, focus: str | None = None) -> Path:
    """Two panels, written atomically to ``path`` (format from its extension).

    Left: tr Cov(ĝ) of each baseline relative to ``none``, per problem (log scale).
    Right: on one problem (``focus``; default: ``chain`` if it ran, else the first), the
    relative error of the running mean ‖ḡ_n − ∇J‖ / ‖∇J‖ against the number of estimates n,
    with the n^(−1/2) slope an unbiased estimate must follow; a biased one levels off.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    problems = [p.name for p in result.problems]
    labels: list[str] = []
    for c in result.cases:
        if c.baseline not in labels:
            labels.append(c.baseline)
    fig, (ax_v, ax_c) = plt.subplots(1, 2, figsize=(13, 4.8), constrained_layout=True)

    biased = {c.baseline for c in result.cases if c.biased}
    width = 0.8 / max(len(labels) - 1, 1)
    x = np.arange(len(problems))
    colours = plt.get_cmap("tab10")
    for j, label in enumerate(b for b in labels if b != "none"):
        ratios = [
            next(
                (c.variance_ratio for c in result.cases if c.problem == p and c.baseline == label),
                np.nan,
            )
            for p in problems
        ]
        ax_v.bar(
            x + (j - (len(labels) - 2) / 2) * width,
            ratios,
            width,
            label=label + (" (biased)" if label in biased else ""),
            color=colours(j + 1),
            hatch="//" if label in biased else None,
        )
    ax_v.axhline(1.0, color="black", lw=0.8, ls="--", label="none")
    ax_v.set_yscale("log")
    ax_v.set_xticks(x, problems, rotation=25, ha="right")
    ax_v.set_ylabel("tr Cov(ĝ) ÷ tr Cov(ĝ_none)")
    ax_v.set_title("variance each baseline leaves (lower is better)")
    ax_v.legend(fontsize=8)

    focus = focus or ("chain" if "chain" in problems else problems[0])
    cases = [c for c in result.cases if c.problem == focus]
    for j, c in enumerate(cases):
        n = np.arange(1, c.samples.shape[0] + 1)
        running = np.cumsum(c.samples, axis=0) / n[:, None]
        err = np.linalg.norm(running - c.exact, axis=1) / np.linalg.norm(c.exact)
        ax_c.loglog(
            n, err, label=c.baseline + (" (biased)" if c.biased else ""), color=colours(j), lw=1.2
        )
    if cases:
        c0 = cases[0]
        n = np.arange(1, c0.samples.shape[0] + 1)
        scale = np.sqrt(c0.variance) / np.linalg.norm(c0.exact)
        ax_c.loglog(n, scale / np.sqrt(n), color="grey", ls=":", label="√(tr Cov_none / n) / ‖∇J‖")
    ax_c.set_xlabel("n, estimates averaged")
    ax_c.set_ylabel("‖ḡ_n − ∇J‖ / ‖∇J‖")
    ax_c.set_title(f"{focus}: the running mean converging to the exact gradient")
    ax_c.legend(fontsize=8)

    try:
        path = save_figure(fig, path, option="--plot", dpi=110)
    finally:
        plt.close(fig)
    return path


__all__ = ["plot", "render_text"]
