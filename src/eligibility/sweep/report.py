"""The sweep's table: one row per setting, interval estimates as ``IQM [low, high]``."""

from __future__ import annotations

from typing import Any

from eligibility.sweep.run import IMPROVEMENT_TITLES, SweepResult


def _iv(d: dict[str, Any] | None, stat: str = "iqm", fmt: str = ".1f") -> str:
    if not d:
        return "—"
    lo, hi = d[f"{stat}_ci"]
    return f"{d[stat]:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def rows(result: SweepResult) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of the table (strings)."""
    head = [
        "setting",
        "runs",
        "solved",
        "final return IQM [95% CI]",
        "steps to target IQM [95% CI]",
        "median steps",
        "wall s IQM",
    ]
    body = []
    for name, s in result.summary.items():
        rate = s.get("success_rate")
        steps = s.get("steps_to_target")
        body.append(
            [
                name,
                str(s["runs"]),
                "no target" if rate is None else f"{rate:.0%}",
                _iv(s.get("final_return")),
                _iv(steps, fmt=".0f")
                + (f" ({s['censored']} censored)" if s.get("censored") else ""),
                "—" if not steps else f"{steps['median']:.0f}",
                "—" if not s.get("wall_s") else f"{s['wall_s']['iqm']:.2f}",
            ]
        )
    return head, body


def markdown(result: SweepResult) -> str:
    """The table and the probabilities of improvement as markdown."""
    head, body = rows(result)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    if result.improvement:
        names = list(result.improvement)
        lines += ["", IMPROVEMENT_TITLES[result.improvement_by] + ":", ""]
        lines.append("| | " + " | ".join(names) + " |")
        lines.append("|---|" + "---|" * len(names))
        for a in names:
            cells = [
                "—" if a == b else f"{result.improvement[a].get(b, float('nan')):.2f}"
                for b in names
            ]
            lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_text(result: SweepResult, console: Any = None) -> None:
    """Print the table (rich), the probabilities of improvement and where things are."""
    from rich.table import Table

    from eligibility._output import key_column, stdout_console

    if console is None:
        console = stdout_console()
    head, body = rows(result)
    table = Table(
        title=f"{result.grid.env_id}: {len(result.grid.seeds)} seeds per setting",
        title_justify="left",
    )
    for h in head:
        if h == "setting":
            key_column(table, h)
        else:
            table.add_column(h, justify="right")
    for r in body:
        table.add_row(*r)
    console.print(table)
    if len(result.improvement) > 1:
        names = list(result.improvement)
        imp = Table(title=IMPROVEMENT_TITLES[result.improvement_by], title_justify="left")
        imp.add_column("")
        for n in names:
            imp.add_column(n, justify="right")
        for a in names:
            imp.add_row(
                a,
                *[
                    "—" if a == b else f"{result.improvement[a].get(b, float('nan')):.2f}"
                    for b in names
                ],
            )
        console.print(imp)
    console.print(
        "IQM: mean of the middle 50% of runs; [95% CI]: percentile bootstrap over seeds; runs "
        "that never reach the target count at their budget (censored).",
        markup=False,
    )
    for r in result.failed:
        console.print(f"FAILED {r.get('dir')}: {r.get('error')}", markup=False)
    pics = ", ".join(p.name for p in result.pictures)
    console.print(f"sweep in {result.out_dir}" + (f" ({pics})" if pics else ""), markup=False)


__all__ = ["markdown", "render_text", "rows"]
