"""``eligibility check --family episodes``: a loss over episodes of several turns held to the
exact two-turn problem; the mask mistakes named."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility.check import check  # noqa: E402
from eligibility.check.episodes import EpisodesProblem, _expected, reference_loss  # noqa: E402


def world_too(model, batch):
    """The first mask bug: every token after the prompt scored, the world's too."""
    batch.completion_mask = (batch.turn >= 0).long()
    return reference_loss(model, batch)


def first_reply_only(model, batch):
    """The second: the model's tokens after the world's answer dropped."""
    batch.completion_mask = ((batch.turn == 0) & batch.completion_mask.bool()).long()
    return reference_loss(model, batch)


@pytest.mark.slow
def test_the_familys_exact_expectation_of_the_reference_is_grad_j():
    """The family's oracle of a mistake's E[ĝ] (every group enumerated), at the right mask, is
    ∇J by enumeration: the expectations it names mistakes by are exact."""
    problem = EpisodesProblem("two-turn", 0.0)
    every, _, _ = problem.enumerated
    got = _expected(problem, every.completion_mask)
    np.testing.assert_allclose(got, problem.exact, rtol=0, atol=1e-5)  # float32 θ


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fn", "verdict", "diagnosis"),
    [
        (reference_loss, "unbiased", None),
        (world_too, "biased", "world-tokens-trained"),
        (first_reply_only, "biased", "model-tokens-after-answer-dropped"),
    ],
)
def test_the_check_names_the_mask_mistakes(fn, verdict, diagnosis):
    report = check(fn, family="episodes", problem="two-turn")
    (p,) = report.problems
    assert (p.verdict, p.diagnosis) == (verdict, diagnosis)
