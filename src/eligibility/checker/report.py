"""The text form of a :class:`~eligibility.checker.core.CheckReport`."""

from __future__ import annotations

from typing import Any

MARK = {"unbiased": "✓", "scaled": "~", "biased": "✗", "no gradient": "✗", "error": "✗"}


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "—" if x is None else format(x, fmt)


def _finding(p: Any) -> str:
    """One line: the verdict, with what it found."""
    head = f"{MARK.get(p.verdict, '?')} {p.verdict}"
    if p.verdict == "scaled":
        return (
            f"{head}: E[ĝ] = c ∇J with c = {p.scale:.3g} ± {p.scale_stderr:.2g} "
            f"(residual max |z| = {p.residual_max_abs_z:.2f} ≤ t*)"
        )
    if p.verdict == "no gradient":
        return f"{head}: nothing reaches θ, or ĝ = 0 on every call"
    if p.diagnosis == "sign":
        return f"{head} (sign): E[ĝ] points against ∇J (c = {_num(p.scale)})"
    if p.diagnosis == "missing-discount-weighting":
        return (
            f"{head} (missing-discount-weighting): E[ĝ] is the γᵗ-less expectation, "
            "Σ_s d₁(s) Σ_a π Q e with undiscounted visitation"
        )
    if p.diagnosis == "other":
        return (
            f"{head} (other): ‖E[ĝ] − ∇J‖ ≈ {_num(p.bias_norm)} against noise "
            f"{_num(p.noise)}, cosine(E[ĝ], ∇J) = {_num(p.cosine, '.3f')}"
        )
    return head


def render_text(report: Any) -> str:
    """A few lines per problem, then the overall result and the exit status."""
    what = "objective (ĝ = +∇θ)" if report.objective else "loss (ĝ = −∇θ loss)"
    lines = [
        f"eligibility check {report.function}: {report.form} form, {report.policy} policy, "
        f"{what}; E = {report.episodes} episodes per call, seed {report.seed}",
        f"false alarm rate of 'unbiased' ≤ α = {report.alpha:g} per problem "
        "(z-test, Bonferroni over components)",
        "",
    ]
    for p in report.problems:
        lines.append(f"{p.problem}: {_finding(p)}")
        if p.error:
            lines += ["    " + line for line in p.error.splitlines()]
        if p.max_abs_z is not None:
            lines.append(
                f"    N = {p.samples} calls; max |z| = {p.max_abs_z:.2f} (t* = {p.threshold:.2f}); "
                f"‖ḡ − ∇J‖ = {p.bias_norm:.3g}, noise {p.noise:.3g}; "
                f"detects a bias ≥ {p.detectable_bias:.3g} per component with 90% power"
            )
        else:
            lines.append(f"    N = {p.samples} calls planned")
        if p.variance_ratio is not None:
            lines.append(
                f"    variance ÷ plain REINFORCE = {p.variance_ratio:.3g}, "
                f"÷ exact value baseline = {p.variance_ratio_best:.3g} (same episodes)"
            )
        if p.power:
            caught = ", ".join(f"{k} {v:.4f}" for k, v in p.power.items())
            lines.append(f"    power at this N (plain REINFORCE's spread): {caught}")
        for blind in p.cannot_see:
            lines.append(f"    cannot see {blind}")
    verdicts = [p.verdict for p in report.problems]
    status = "passed" if report.passed else "FAILED"
    lines += [
        "",
        f"{status}: {sum(v == 'unbiased' for v in verdicts)} of {len(verdicts)} problems "
        f"unbiased ({report.wall_s:.1f} s); exit status {report.exit_code}",
    ]
    return "\n".join(lines)


__all__ = ["render_text"]
