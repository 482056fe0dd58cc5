"""The check's report for a person: its columns and the text ``assert_unbiased`` raises."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from eligibility.check.diagnosis import Diagnosis
from eligibility.check.run import CheckReport, ProblemReport


def _problem(name: str, verdict: str, diagnosis: str | None, **numbers: float) -> ProblemReport:
    values = dict(
        scale=1.0,
        scale_stderr=0.01,
        max_abs_z=9.0,
        threshold=4.2,
        bias_norm=0.3,
        noise=0.01,
        cosine=0.9,
        variance_ratio=1.0,
        variance_ratio_value_baseline=0.5,
        min_detectable_bias=0.05,
        power_scale2=1.0,
    )
    values.update(numbers)
    return ProblemReport(
        problem=name,
        verdict=verdict,  # type: ignore[arg-type]
        finding=diagnosis and Diagnosis.of(diagnosis),
        samples=200,
        episodes=8,
        seconds=0.1,
        blind_to=["this problem cannot show a missing discount: it has one step, see chain"],
        J=0.5,
        **values,
    )


def _report(*problems: ProblemReport) -> CheckReport:
    return CheckReport(
        problems=list(problems),
        alpha=1e-3,
        samples=200,
        episodes=8,
        form="loss",
        policy="logits",
        objective=False,
        seed=0,
        reference="plain REINFORCE (reward-to-go, no baseline)",
    )


def test_assert_unbiased_raises_the_report_at_full_width(monkeypatch):
    """Each row and each note is one whole line of the AssertionError, however long."""
    from eligibility.testing import assert_unbiased

    long = "missing-discount-and-a-batch-dependent-normaliser-named-at-length"
    report = _report(
        _problem("chain", "biased", long, min_detectable_bias=0.0123456789),
        _problem("bandit-with-a-long-name-indeed", "biased", "whole-return-instead-of-reward"),
    )
    # the package, not the function eligibility.check that the top level exports
    monkeypatch.setattr(sys.modules["eligibility.check"], "check", lambda fn, **kw: report)
    with pytest.raises(AssertionError) as failure:
        assert_unbiased(lambda *a: None)
    lines = str(failure.value).splitlines()
    rows = [x for x in lines if x.startswith("│")]
    assert len(rows) == 2, "\n".join(lines)  # the two problems, one line each
    assert "chain" in rows[0] and long in rows[0]
    assert "bandit-with-a-long-name-indeed" in rows[1] and "whole-return-instead" in rows[1]
    note = [x for x in lines if "catches a 2× scale" in x and x.startswith("chain")]
    assert len(note) == 1 and note[0].endswith("is caught with power ≥ 0.9"), "\n".join(lines)
    assert not any("\x1b" in x for x in lines)  # no colour codes in an exception's text


def test_the_var_ratio_column_shows_the_scale_free_ratio():
    """The table of a 0.2-scaled reference estimator (raw ratio 0.04) shows 1.00."""
    from eligibility.check.report import report_text

    text = report_text(
        _report(_problem("chain", "scaled", "scale", scale=0.2, variance_ratio=0.04))
    )
    (row,) = [x for x in text.splitlines() if x.startswith("│")]
    assert row.split("│")[-3].strip() == "1.00", row


def test_var_ratio_removes_the_fitted_scale():
    """A 0.2-scaled copy of the reference estimator has a scale-free variance ratio of 1."""
    from eligibility.check.report import scale_free_variance_ratio

    rng = np.random.default_rng(0)
    R = rng.normal(size=(500, 4)) + np.array([1.0, -2.0, 0.5, 0.0])
    G = 0.2 * R
    raw = float(np.sum(G.var(axis=0, ddof=1)) / np.sum(R.var(axis=0, ddof=1)))
    assert raw == pytest.approx(0.04)  # what the column showed before
    assert scale_free_variance_ratio(raw, 0.2) == pytest.approx(1.0)
    assert scale_free_variance_ratio(raw, -0.2) == pytest.approx(1.0)
    assert scale_free_variance_ratio(0.5, 1.0) == 0.5
    assert scale_free_variance_ratio(None, 0.2) is None
    assert scale_free_variance_ratio(1.0, 0.93, 0.03, 3.8) == 1.0  # ĉ not told from 1: kept
    assert scale_free_variance_ratio(0.04, 0.2, 0.01, 3.8) == pytest.approx(1.0)
    assert (
        scale_free_variance_ratio(0.5, 0.0) is None and scale_free_variance_ratio(0.5, None) is None
    )
    assert math.isnan(scale_free_variance_ratio(math.nan, 1.0))


@pytest.mark.usefixtures("check_calls_in_process")  # the same gradients, no worker round trips
def test_a_constant_normaliser_is_reported_with_t_taken_out():
    """Dr. GRPO's ÷ (N · T_max) on a problem with T = 5: c = 0.2, and c·T = 1 in the JSON
    details and the text, a number that no longer depends on the problem's T.

    At N = 100: named on seeds 0-4, c·T 0.96 to 1.02 there with a standard error of 0.03 to
    0.037 (0.021 to 0.024 at N = 200); held within 4 of them of 1."""
    torch = pytest.importorskip("torch")
    from eligibility.check import check
    from eligibility.check.report import report_text

    def loss(logps, batch):
        r = batch.rewards.view(-1, batch.group_size)
        a = (r - (r.sum(1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1, 1)
        n, t = logps.shape[0], batch.max_completion_length
        return -(a * logps * batch.completion_mask).sum() / (n * t)

    report = check(loss, sequence=True, problem="difficulty", samples=100)
    (p,) = report.problems
    assert (p.verdict, p.diagnosis) == ("scaled", "constant-normaliser")
    assert p.details["max_completion_length"] == 5
    assert p.details["c_times_T"] == pytest.approx(1.0, abs=4 * 5 * p.scale_stderr)
    assert p.details["c_times_T"] == pytest.approx(5 * p.scale)
    assert f"difficulty: c·T = {p.details['c_times_T']:.3g} (T = 5" in report_text(report)
    assert torch is not None
