"""A constant read as its cause: a sum over the batch, a weight at ratio 1, an accumulation.

Each loss is written here with its constant derived from its code before any run: a sum over
the batch's N replies of the group-centred (or leave-one-out) credit is N·(G − 1)/G (or N)
times the exact credit; a detached cap min(rₜ, a) at θ = θ_old weighs every token a; two
micro-batches each backpropagated undivided double the weights. The audit reads the weights by
autograd on the lab's own batches; the table's rules are held on the reports they judge.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from eligibility.check.audit.judge import Audit
from eligibility.check.audit.names import Finding
from eligibility.check.diagnosis import Diagnosis
from eligibility.check.run import one_constant
from eligibility.check.sequence import named_scales
from eligibility.check.verdict import (
    ProblemReport,
    _constant_for,
    _hold_scales_together,
    _with_cause,
)
from test_check_audit import SEQUENCE_LOSSES, _offpolicy_audit, _rloo, _seq_audit


def _centred(batch) -> torch.Tensor:
    r = batch.rewards.view(-1, batch.group_size)
    return (r - r.mean(1, keepdim=True)).reshape(-1)


def _batch_size(problem_name: str) -> tuple[int, int]:
    from eligibility.lab.sequence.builtin import PROBLEMS

    problem = PROBLEMS[problem_name]()
    return len(problem.prompts) * problem.group_size, problem.group_size


@pytest.mark.parametrize(
    ("credit", "factor", "names"),
    [
        (_centred, lambda G: (G - 1) / G, ["self-including-mean", "scale"]),
        (_rloo, lambda G: 1.0, ["scale"]),
    ],
)
def test_a_sum_over_the_batch_is_read_as_its_replies(credit, factor, names):
    """−Σᵢₜ Aᵢ ℓᵢₜ with no ÷ N: each reply's weight is N times a mean's (with a group mean
    that includes the sample, N·(G − 1)/G, said by both of its names)."""
    found = _seq_audit(
        lambda lp, b: -(lp * credit(b)[:, None] * b.completion_mask).sum(), batches=4
    )
    N, G = _batch_size("length")
    assert [f.name for f in found.findings] == names, found
    said = found.findings[0].where
    assert f"c = {N * factor(G):.4g} times" in said and "summed over the batch" in said


def test_the_mean_over_the_batch_names_no_constant():
    assert _seq_audit(SEQUENCE_LOSSES["rloo"], batches=4).findings == []


def _report(c: float, finding: Diagnosis, problem: str) -> ProblemReport:
    nothing = {f.name: None for f in dataclasses.fields(ProblemReport)}
    return ProblemReport(
        **{
            **nothing,
            "problem": problem,
            "verdict": "scaled",
            "finding": finding,
            "scale": c,
            "scale_stderr": 0.1,
            "samples": 200,
            "episodes": 1,
            "seconds": 0.0,
            "blind_to": [],
        }
    )


def test_a_constant_each_problem_names_is_not_held_across_problems():
    """c = 14 on one problem and 21 on another: named by each (its N), both stay scaled; the
    same constants named by none are a problem-dependent bias."""
    named = [
        _report(14.0, Diagnosis(("scale",), notes=(("scale", "a constant of this problem"),)), "a"),
        _report(21.0, Diagnosis(("self-including-mean", "scale")), "b"),
    ]
    _hold_scales_together(named, 0.01)
    assert [r.verdict for r in named] == ["scaled", "scaled"]
    unnamed = [_report(14.0, Diagnosis(("scale",)), p) for p in "ab"]
    unnamed[1].scale = 21.0
    _hold_scales_together(unnamed, 0.01)
    assert [r.names for r in unnamed] == [("problem-dependent-scale",)] * 2


@pytest.mark.parametrize(
    ("names", "c", "said"),
    [
        (("self-including-mean", "scale"), 13.8, "c = N·(G − 1)/G = 14 at N = 16, G = 8"),
        (("scale",), 16.2, "c = N = 16"),
        (("scale",), 21.0, None),
    ],
)
def test_the_reports_constant_says_the_batch_sum(names, c, said):
    from eligibility.check.fixes import constant_in_words

    words = constant_in_words(Diagnosis(names), c, G=8, N=16)
    assert (words and words.split(":")[0]) == said


def test_the_batch_sums_are_named_after_the_other_constants():
    scales = named_scales(8, 5, 16, 2)
    assert scales[-2:] == [("scale", 16.0), ("self-including-mean, scale", 14.0)]
    assert ("accumulation-scaled", 2.0) in scales[:-2]


# -- the undivided accumulation: 2, not (G − 1)/G × 2 against another variant ---------------


def test_an_undivided_accumulation_is_read_against_the_variant_it_doubles():
    """Two variants of one name that differ by G/(G − 1) both fit the user's ×k: the k the
    problem names with the fewest names (M = 2) names it."""
    name, found = "std-normalised, length-normalised", [(1.75, 0.5), (2.0, 0.5)]
    read, _ = _constant_for(name, found, named_scales(8, 5, 16, 2), t=4.0)
    assert (read.names, read.times) == (("std-normalised", "length-normalised"), 2.0)
    said = _with_cause(read, named_scales(8, 5, 16, 2))
    assert said.names == ("std-normalised", "length-normalised", "accumulation-scaled")
    unnamed, _ = _constant_for(name, found, named_scales(8, 5, 16, 1), t=4.0)
    assert (unnamed.names, unnamed.times) == (("std-normalised", "length-normalised"), 1.75)
    assert _with_cause(unnamed, named_scales(8, 5, 16, 1)) == unnamed


def test_the_audit_reads_a_whitened_loss_summed_over_two_micro_batches_as_two():
    found = _seq_audit(SEQUENCE_LOSSES["grpo"], batches=4, M=2)
    names = [f.name for f in found.findings]
    assert names == ["length-normalised", "std-normalised", "accumulation-scaled"], found
    assert "c = 2 times" in found.findings[-1].where


def test_the_audits_constant_stays_beside_a_bias_the_table_fits_no_constant_to():
    said = Finding(
        "accumulation-scaled", "every weight is c = 2 times the exact credit's", constant=2.0
    )
    found = Audit(4, [Finding("length-normalised", "÷ L"), said])
    report = _report(1.45, Diagnosis(("length-normalised",)), "length")
    report.verdict, report.threshold = "biased", 4.0
    assert one_constant(found, report).findings == found.findings
    report.finding = Diagnosis(("length-normalised",), times=2.0)
    assert one_constant(found, report).findings == found.findings
    report.finding = Diagnosis(("length-normalised",), times=1.75)  # the table's other constant
    assert one_constant(found, report).findings == found.findings[:1]


# -- a cap below 1 at θ = θ_old: every token's weight is the cap's bound ---------------------


@pytest.fixture(scope="module")
def ratio_one():
    from eligibility.check.offpolicy import _audit_scales, _draws, _problem

    problem = _problem("ratio-one")
    return problem, _draws(problem, 4, np.random.default_rng(0)), _audit_scales(problem)


def _capped(bound: float):
    """Dr. GRPO's sum ÷ (N·T) with each token weighted by sg(min(rₜ, bound))."""

    def loss(logps, batch):
        m = batch.completion_mask
        ratio = torch.exp(logps - batch.old_logps).clamp(max=bound).detach()
        a = _centred(batch)[:, None]
        return -(ratio * logps * a * m).sum() / (m.shape[0] * batch.max_completion_length)

    return loss


@pytest.mark.parametrize("bound", [0.2, 0.3])
def test_a_cap_below_one_at_ratio_one_is_read_with_its_bound(ratio_one, bound):
    found = _offpolicy_audit(ratio_one, _capped(bound))
    assert [f.name for f in found.findings] == ["ratio-1-broken"], found
    assert f"bound is {bound:.4g}" in found.findings[0].where


def test_a_cap_above_one_at_ratio_one_is_no_finding(ratio_one):
    """Dr. GRPO's own constant, (G − 1)/(G T), said by each of its names; no cap."""
    found = _offpolicy_audit(ratio_one, _capped(5.0))
    names = ["self-including-mean", "constant-normaliser"]
    assert [f.name for f in found.findings] == names, found


# -- a constant's cause from its value alone: said only where the weights show it -------------


def _group_whitened(batch) -> torch.Tensor:
    r = batch.rewards.view(-1, batch.group_size)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).reshape(-1)


def _trl_cispo(logps, batch):
    """TRL 1.16's ``cispo`` at θ = θ_old, ported: sg(min(exp(ℓ − sg ℓ), ε_high = 0.2)) · A · ℓ
    summed over the batch's tokens ÷ their count (``num_items_in_batch``)."""
    m = batch.completion_mask
    capped = torch.clamp(torch.exp(logps - logps.detach()), max=0.2).detach()
    return -(capped * _group_whitened(batch)[:, None] * logps * m).sum() / m.sum()


def _dr_grpo(logps, batch):
    """Dr. GRPO with the group's σ: Σ Aᵢ ℓᵢₜ ÷ (N · max_completion_length), a constant."""
    m = batch.completion_mask
    N = m.shape[0]
    return -(_group_whitened(batch)[:, None] * logps * m).sum() / (N * batch.max_completion_length)


@pytest.mark.parametrize(
    ("loss", "row", "k", "said"),
    [
        # the cap's 0.2 equals 1/T at the length problem's T = 5: not a normaliser
        (_trl_cispo, ("std-normalised", "batch-dependent-normaliser"), 0.2, ()),
        # ÷ T_max, which the audit reads as each reply's constant 1/T
        (_dr_grpo, ("std-normalised",), 0.2, ("constant-normaliser",)),
    ],
)
def test_a_constants_cause_read_from_its_value_is_said_where_the_weights_show_it(
    loss, row, k, said
):
    """The table fits c·V (V the row's variant) and the problem's 1/T equals c; the audit, which
    reads every token's weight (−∂L/∂ℓₜ by autograd, held here against each port's formula),
    keeps that cause only where its map shows it."""
    from eligibility.check.audit import judge
    from eligibility.check.sequence import batch_of
    from eligibility.lab.sequence.builtin import PROBLEMS

    problem = PROBLEMS["length"]()
    G, T = problem.group_size, problem.max_completion_length
    N = len(problem.prompts) * G
    assert 1 / T == k  # the coincidence the cause must not be read from
    rows = problem.draw(len(problem.prompts), np.random.default_rng(3)).rows
    logps, batch = problem.on_policy(batch_of(problem, rows, 1.0))
    lp = logps.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(loss(lp, batch), lp)
    m = batch.completion_mask > 0
    A = _group_whitened(batch)[:, None].expand_as(g)
    want = 0.2 * A / m.sum() if loss is _trl_cispo else A / (N * T)
    torch.testing.assert_close(-g[m], want[m].to(g.dtype), rtol=1e-5, atol=1e-9)

    found = _seq_audit(loss, batches=6)
    assert found.relation is not None, found  # the audit read the weights' map
    table = _with_cause(Diagnosis(row, times=k), named_scales(G, T, N))
    assert "constant-normaliser" in table.names  # the value alone names it
    report = _report(k, table, "length")
    report.verdict = "biased"
    judge(report, found)
    assert report.finding.names == (*row, *said), (report.finding, found)
    assert report.finding.times == k
