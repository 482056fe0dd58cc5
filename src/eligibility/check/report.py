"""The check's report for a person: one table row per problem, then what each finding means."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eligibility.check.audit.record import WRITTEN_KEY
from eligibility.check.diagnosis import Diagnosis
from eligibility.check.mistakes import AUDIT, ENGINE, explained, meanings

if TYPE_CHECKING:  # run imports nothing from here at load time; keep it so
    from eligibility.check.run import CheckReport
    from eligibility.check.verdict import ProblemReport

MEANING = {
    "unbiased": "E[ĝ] = ∇J within noise",
    "excess variance": "E[ĝ] = ∇J within noise, but each batch's ĝ holds terms of mean zero "
    "that a correct estimator leaves out: more variance, the same mean",
    "scaled": "E[ĝ] = c ∇J with c ≠ 1: unbiased in direction; the step size is off by c",
    "biased": "E[ĝ] ≠ ∇J",
    "no gradient": "the value returned does not depend on the policy's parameters",
    "error": "the function could not be checked: it raised, ended the process, overran "
    "--timeout or --memory, called backward() or changed the parameters",
}
AUDIT_DIAGNOSES = meanings(AUDIT)
"""The names the credit audit gives (:mod:`eligibility.check.audit`), a view of the registry."""
DIAGNOSES = meanings(ENGINE) | AUDIT_DIAGNOSES
"""The names every family's report can give: the engine's (:mod:`eligibility.check.verdict`)
and the audit's, a view of :mod:`eligibility.check.mistakes`."""
STEP_DIAGNOSES = meanings(ENGINE, "step")
"""The engine's names in the step form's words (the step returns no loss)."""


def explain_diagnosis(diagnoses: dict[str, str], finding: Diagnosis) -> str | None:
    """What ``finding`` means: its own entry, or each of its names' in turn.

    A variant's constant (``V × 0.2``) is explained by V's names; a KL weight that differs
    from the objective's (``kl-weight (config 0.04, objective β = 0.1)``) by its own line.
    None where some name has no entry.
    """
    label = ", ".join(finding.names)
    if finding.times is None and not finding.notes and label in diagnoses:
        return diagnoses[label]
    out = []
    for name in finding.names:
        said = Diagnosis((name,), notes=finding.notes).text
        if finding.note(name) and name == "kl-weight":
            out.append(f"{said}: the configuration's KL coefficient is not the objective's β")
        elif name in diagnoses:
            out.append(f"{said}: {diagnoses[name]}")
        else:
            return None
    times = finding.times is not None
    text = "; ".join(out) if len(out) > 1 or times else out[0].partition(": ")[2]
    return f"{text} (times a constant {finding.times:.2g})" if times else text


def error_line(text: str | None) -> str:
    r"""The verdict ``error``'s text in one line: what happened, and where in the user's code.

    The check's own words where it has them (a first line before the traceback), else the
    exception; then the last frame of the user's code.

    >>> error_line('  File "my_grpo.py", line 7, in loss\n    x = y\nNameError: y')
    'NameError: y (my_grpo.py:7)'
    """
    lines = [line.strip() for line in (text or "the function could not be checked").splitlines()]
    lines = [line for line in lines if line and not line.startswith("Traceback (")]
    frames = [i for i, line in enumerate(lines) if line.startswith('File "')]
    if not frames:
        return " ".join(lines)
    said = lines[0] if frames[0] > 0 else lines[-1]
    file, _, rest = lines[frames[-1]][len('File "') :].partition('", line ')
    return f"{said} ({file}:{rest.partition(',')[0]})"


def _diagnoses(report: CheckReport) -> dict[str, str]:
    """Every name's meaning as ``report``'s family and form say it (the registry's view)."""
    return explained(report.family, report.form)


def scale_free_variance_ratio(
    ratio: float | None, c: float | None, c_se: float | None = 0.0, t: float | None = 0.0
) -> float | None:
    """The variance ratio of ĝ / ĉ: the user's spread once its fitted scale is taken out.

    ρ = tr Cov(ĝ / ĉ) / tr Cov(ĝ_ref) = tr Cov(ĝ) / (ĉ² · tr Cov(ĝ_ref))   if |ĉ − 1| > t* SE(ĉ),
    ρ = tr Cov(ĝ) / tr Cov(ĝ_ref)                                         otherwise,

    where ``ratio`` = tr Cov(ĝ) / tr Cov(ĝ_ref) (same batches), ĉ = mean of ĝₖ·∇J / ‖∇J‖² (the
    report's ``scale c``, standard error ``c_se``) and t* the problem's threshold. A reference
    estimator times 0.2 has ``ratio`` 0.04 and ρ = 1: a rescaled estimator is no less noisy for
    being small. A ĉ that the test cannot tell from 1 is not divided out: its own noise (±3 %
    on the bandit at the default N) would move ρ of a correct estimator off 1. None where ĉ is
    0 or unknown.
    """
    if ratio is None or not c:
        return None
    if abs(c - 1.0) <= (t or 0.0) * (c_se or 0.0):
        return ratio
    return ratio / (c * c)


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "—" if x is None else format(x, fmt)


def render_text(report: CheckReport, console: Any = None) -> None:
    """Print the table and the notes (rich on a terminal, plain text when piped)."""
    from eligibility._output import stdout_console
    from eligibility.check.family import get

    if console is None:
        console = stdout_console()  # piped: the table's natural width, no word cut
    family = get(report.family)
    if report.subject:
        console.print(f"checked: {report.subject}", markup=False)
    if report.declared_objective:
        console.print(report.declared_objective, markup=False)
    console.print(_table(report))
    console.print(
        f"{report.form} form, {family.batch(report)}; an unbiased estimator is flagged on a "
        f"problem with probability ≤ α = {report.alpha:g} (two-sided t, Bonferroni over the "
        "components)."
    )
    console.print(
        f"var ratio: the total variance of your estimator (over its scale c where c is told "
        f"from 1: ĝ / c) over {report.reference} on the same batches."
    )
    diagnoses = _diagnoses(report)
    for line in report.skipped:
        console.print(f"skipped {line}", markup=False)
    for p in report.problems:
        _print_notes(console, report, p, diagnoses)
    verdict = (
        "unbiased on every problem"
        if report.unbiased and report.passed
        else "unbiased by the z-test, but the credit audit finds tokens weighted that must not be"
        if report.unbiased
        else "unbiased up to a constant step size (--allow-scale)"
        if report.passed
        else "NOT unbiased"
    )
    console.print(f"\nverdict: {verdict}")


def verdict_cell(verdict: str, misweighted: bool = False) -> str:
    """The table's verdict column: the verdict and whether the problem passed, one word each.

    A problem the z-test passes but the credit audit fails (tokens weighted that no correct
    estimator weights) did not pass: it is never marked ✓.

    >>> verdict_cell("unbiased"), verdict_cell("unbiased", misweighted=True)
    ('✓ unbiased', '✗ leaks (z: unbiased)')
    """
    if verdict == "unbiased" and misweighted:
        return "✗ leaks (z: unbiased)"
    return f"{ {'unbiased': '✓', 'scaled': '≈'}.get(verdict, '✗') } {verdict}"


def _table(report: CheckReport) -> Any:
    """The report's table: one row a problem, its verdict, diagnosis and statistics."""
    from rich.table import Table

    from eligibility._output import key_column

    table = Table(title="REINFORCE estimator vs the exact policy gradient", title_justify="left")
    for col in ("problem", "verdict", "diagnosis"):
        key_column(table, col)
    for col in ("scale c", "max|z| (t*)", "‖bias‖", "noise", "cos", "var ratio", "N"):
        table.add_column(col, justify="right")
    for p in report.problems:
        z = "—" if p.max_abs_z is None else f"{p.max_abs_z:.2f} ({p.threshold:.2f})"
        table.add_row(
            p.problem,
            verdict_cell(p.verdict, p.misweighted),
            p.diagnosis or "",
            _num(p.scale),
            z,
            _num(p.bias_norm),
            _num(p.noise),
            _num(p.cosine, ".3f"),
            _num(
                scale_free_variance_ratio(p.variance_ratio, p.scale, p.scale_stderr, p.threshold),
                ".2f",
            ),
            str(p.samples),
        )
    return table


def _print_notes(
    console: Any, report: CheckReport, p: ProblemReport, diagnoses: dict[str, str]
) -> None:
    """The notes below the table on one problem: J, the finding and its fix, N's power, details."""
    from eligibility.check.family import get

    if p.J is not None:
        console.print(f"{p.problem}: J(θ) = {p.J:.6g} (exact)", markup=False)
    if p.verdict == "error" and p.error:
        console.print(f"\n{p.problem}: error: {p.error}", markup=False)
    elif p.verdict != "unbiased":
        why = (p.finding and explain_diagnosis(diagnoses, p.finding)) or MEANING[p.verdict]
        console.print(f"{p.problem}: {p.verdict} ({p.diagnosis}): {why}", markup=False)
        if p.constant:
            console.print(f"{p.problem}: {p.constant}", markup=False)
        for line in p.fix or ():
            console.print(f"{p.problem}: fix {line}", markup=False)
        kl_problems = get(report.family).kl_problems
        if report.kl == "reverse" and report.beta is None and p.problem in kl_problems:
            console.print(
                f"{p.problem}: its objective holds a KL to π_ref (β > 0); if yours has "
                'none, pass --kl none (Python: kl="none"), which leaves this problem out',
                markup=False,
            )
    if p.verdict == "unbiased" and p.misweighted:
        console.print(
            f"{p.problem}: unbiased by the z-test (max |z| {p.max_abs_z:.2f} ≤ t* "
            f"{p.threshold:.2f} at N = {p.samples}), but the credit audit finds terms no "
            f"correct estimator has, on every batch that holds them ({p.diagnosis}, below): "
            "their bias is below what this N resolves",
            markup=False,
        )
        for line in p.fix or ():
            console.print(f"{p.problem}: fix {line}", markup=False)
    if p.power_scale2 is not None and p.min_detectable_bias is not None:
        console.print(
            f"{p.problem}: N = {p.samples} catches a 2× scale with power "
            f"{p.power_scale2:.3f}; a bias of {p.min_detectable_bias:.3g} in any one "
            "component is caught with power ≥ 0.9",
            markup=False,
        )
    for note in p.blind_to:
        console.print(f"{p.problem}: {note}", markup=False)
    _print_details(console, p.problem, p.details or {}, p.verdict != "unbiased")


def report_text(report: CheckReport) -> str:
    """The report of :func:`render_text` as plain text at full width: no line is wrapped.

    For an exception's message (``assert_unbiased``), which no terminal width should cut.
    """
    import io

    from rich.console import Console

    from eligibility._output import PIPE_WIDTH

    buf = io.StringIO()
    console = Console(
        file=buf, width=PIPE_WIDTH, soft_wrap=True, highlight=False, color_system=None
    )
    render_text(report, console)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines())


def _print_details(console: Any, problem: str, details: dict[str, Any], biased: bool) -> None:
    """The notes of ``details``: c·T, the distance from θ_old, the bias's decomposition."""
    clip = details.get("clip")
    if clip:
        said = (
            f"bound in {clip['bound']} of {clip['calls']} calls"
            if clip["bound"]
            else f"never bound in {clip['calls']} calls: this problem did not exercise the clip"
        )
        console.print(
            f"{problem}: clip_grad_norm_(max_norm {clip['max_norm']:g}) {said} (the gradient's "
            f"norm reached {clip['largest_norm']:.3g})",
            markup=False,
        )
    split = details.get("split")
    if split and not split["split"]:
        console.print(
            f"{problem}: your step never split a batch into micro-batches (one backward() in "
            f"each of {split['calls']} calls): gradient accumulation was not exercised",
            markup=False,
        )
    if "kl_old" in details:
        console.print(
            f"{problem}: KL(π_old ‖ π_θ) = {details['kl_old']:.3g} nats a completion; "
            f"{details['clipped_share']:.1%} of tokens clipped at ε = 0.2",
            markup=False,
        )
    if "c_times_T" in details:
        console.print(
            f"{problem}: c·T = {details['c_times_T']:.3g} (T = {details['max_completion_length']},"
            " the problem's T_max): the constant with T taken out, 1 for ÷ T_max, N for ÷ T_max/N",
            markup=False,
        )
    cut = details.get("truncated_sampler")
    if cut:
        how = ", ".join(f"{k.replace('_', '-')} {v:g}" for k, v in cut["sampler"].items() if v)
        console.print(
            f"{problem}: the sampler is cut ({how}; {cut['uncovered']:.1%} of the policy's mass "
            f"never drawn): your mean estimates {cut['estimates']} (‖mean − ∇J‖ = "
            f"{cut['bias_policy']:.3g}, max|z| {cut['z_policy']:.2f}; ‖mean − ∇J_μ‖ = "
            f"{cut['bias_sampler']:.3g}, max|z| {cut['z_sampler']:.2f}, ∇J_μ the truncated "
            "sampler's own gradient)",
            markup=False,
        )
    written = details.get(WRITTEN_KEY)
    if written:
        fields = " and ".join(f"`batch.{name}`" for name in written)
        console.print(
            f"{problem}: your loss writes {fields} in place: the check and its credit audit read "
            "the batch as it was handed to your function",
            markup=False,
        )
    audit = details.get("audit")
    covers = (audit or {}).get("covers") or ""
    if covers.startswith("not audited"):
        console.print(f"{problem}: credit audit: {covers}", markup=False)
    elif audit and (audit.get("relation") or covers):
        batches = f"{audit['batches']} batch{'' if audit['batches'] == 1 else 'es'}"
        read = f", read: {covers}" if covers else ""
        said = f": {audit['relation']}" if audit.get("relation") else ""
        console.print(f"{problem}: credit audit ({batches}{read}){said}", markup=False)
    for f in (audit or {}).get("findings", []):
        share = "" if f["share"] is None else f" ({f['share']:.0%} of the weight)"
        console.print(f"{problem}: credit audit: {f['name']}: {f['where']}{share}", markup=False)
    split = details.get("decomposition")
    if biased and split and split["bias_norm"] > 0:
        parts = "; ".join(f"{d['part']} {d['norm']:.3g} ({d['share']:.0%})" for d in split["parts"])
        console.print(
            f"{problem}: bias {split['bias_norm']:.3g} along {split['closest']}: {parts}",
            markup=False,
        )


__all__ = [
    "DIAGNOSES",
    "STEP_DIAGNOSES",
    "error_line",
    "explain_diagnosis",
    "render_text",
    "report_text",
    "scale_free_variance_ratio",
    "verdict_cell",
]
