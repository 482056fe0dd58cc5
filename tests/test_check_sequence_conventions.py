"""`check --sequence` on training code as it is written: a declared β, a KL weight named beside
the rest, micro-batches that cannot split a problem, and a variant times a fitted constant.

Truth: the lab's enumeration (J, ∇J at the declared β) and autograd through the problem's
model (the kl-weight variants, in tests/test_check_sequence.py); the full-size checks are slow.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from eligibility.check import check
from eligibility.check.family import fit_problems as _fit_problems
from eligibility.check.family import get
from eligibility.check.run import CheckConfig
from eligibility.check.sequence_settings import with_beta
from eligibility.check.verdict import batchwise_constant
from eligibility.lab.sequence.builtin import PROBLEMS

ROOT = Path(__file__).resolve().parents[1]
SEQ = ROOT / "examples" / "check" / "sequence"
OFF = ROOT / "examples" / "check" / "offpolicy"


def verdicts(report):
    return {p.problem: (p.verdict, p.diagnosis) for p in report.problems}


# -- settings, before any work ---------------------------------------------------------------------


def test_micro_batches_that_cannot_split_a_problem_refuse_or_skip_before_any_work():
    """`--micro-batches 2` ran `length` for seconds before failing on difficulty's 3 groups."""
    family = get("sequence")
    names, skipped = _fit_problems(family, CheckConfig(sequence=True, micro_batches=2))
    assert names == ["length", "kl"]
    assert skipped == ["difficulty: --micro-batches 2 does not divide the 3 groups of problem "
                       "difficulty"]  # fmt: skip
    named = CheckConfig(sequence=True, micro_batches=2, problem="difficulty,length")
    with pytest.raises(ValueError, match="does not divide the 3 groups of problem difficulty"):
        _fit_problems(family, named)
    with pytest.raises(ValueError, match="does not divide the 3 groups"):
        check(f"{SEQ}/accumulation.py:loss", sequence=True, micro_batches=4, problem="all")


def test_a_declared_beta_is_every_problems_objective():
    assert CheckConfig(sequence=True, beta=0.1, kl="reverse").problems == ("length", "difficulty",
                                                                          "kl")  # fmt: skip
    with pytest.raises(ValueError, match="--beta weighs the objective's KL"):
        CheckConfig(sequence=True, beta=0.1, kl="none")
    with pytest.raises(ValueError, match="--beta is not taken by the episodic check"):
        CheckConfig(beta=0.1)
    with pytest.raises(ValueError, match=r"--loss-beta must be in \[0, 10\]"):
        CheckConfig(sequence=True, loss_beta=-1.0)
    base = PROBLEMS["length"]()
    p = with_beta(base, 0.1)
    assert p.beta == 0.1 and with_beta(base, None) is base and with_beta(base, 0.0) is base
    # J at β = 0.1 is the same enumeration's E[R] − 0.1 KL(π_θ ‖ π_ref)
    assert p.J == pytest.approx(base.J - 0.1 * float(p.kl.mean()), rel=1e-12)
    np.testing.assert_allclose(p.exact, base.exact - 0.1 * p.kl_gradient, rtol=1e-10, atol=1e-14)


# -- a variant times a fitted constant, batch by batch ---------------------------------------------


def test_a_variant_times_a_constant_batch_by_batch_is_that_constant():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((400, 6))
    V = ref + 0.6 * rng.standard_normal((400, 6))  # a variant: not a rescaled reference
    G = np.sqrt(8 / 7) * V * (1 + 1e-4 * rng.standard_normal(V.shape))  # population std
    assert batchwise_constant(G, V, [ref]) == pytest.approx(np.sqrt(8 / 7), rel=1e-4)
    assert batchwise_constant(V, V, [ref]) is None  # the variant itself: no constant
    assert batchwise_constant(2.0 * ref, 0.5 * ref, [ref]) is None  # a rescaled reference
    other = rng.standard_normal((400, 6))
    assert batchwise_constant(1.5 * other, V, [ref]) is None  # another estimator


@pytest.mark.slow
def test_a_population_std_grpo_has_one_name_and_constant_on_every_problem():
    """It read `scaled (scale)` on length and `std-normalised × 0.22` on difficulty."""
    found = verdicts(check(f"{SEQ}/conventions.py:population_std", sequence=True, kl="none"))
    want = ("biased", "std-normalised × 1.1")  # √(8/7) = 1.07
    assert found == {"length": want, "difficulty": want}, found


@pytest.mark.slow
def test_a_correct_rloo_at_a_declared_beta_passes_on_every_problem():
    """rloo.py:loss puts batch.beta's KL in the reward: with --beta 0.1 every problem holds
    a KL, and the loss is unbiased on each; on length it weighs β = 0.1 against the
    objective's 0 without the declaration, kl-weight."""
    report = check(f"{SEQ}/rloo.py:loss", sequence=True, beta=0.1)
    assert report.passed and report.beta == 0.1, verdicts(report)


@pytest.mark.slow
def test_a_declared_loss_weight_is_named_beside_the_other_mistakes():
    """A KL weight of 0.05 in a loss checked at β = 0.1 used to hide what else it does."""
    fn = f"{SEQ}/conventions.py:rloo_kl_005_token_means"
    (p,) = check(fn, sequence=True, problem="kl", loss_beta=0.05).problems
    assert (p.verdict, p.diagnosis) == ("biased", "kl-weight, length-normalised")


@pytest.mark.slow
def test_a_truncated_sampler_weight_below_one_is_named_at_every_distance():
    """TIS at C = 0.5 read `scaled (scale)` at ratio one (every weight is 1 there: 0.5 × ∇J)."""
    found = verdicts(check(f"{OFF}/losses.py:truncated_half", off_policy=True))
    assert {d for _, d in found.values()} == {"truncation-bias"}, found
