"""``eligibility check --family episodes``: a loss over episodes of several turns held to the
exact two-turn problem; the mask mistakes named (the third, of mean zero, batch by batch)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility.check import check  # noqa: E402
from eligibility.check.episodes import (  # noqa: E402
    WHOLE_RETURN,
    EpisodesProblem,
    _batch,
    _expected,
    _loss,
    _rows,
    reference_loss,
)
from eligibility.check.family import Trial  # noqa: E402
from eligibility.check.verdict import moved_from_zero  # noqa: E402
from eligibility.cli import main  # noqa: E402
from eligibility.lm.sample import token_logps  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "check" / "episodes.py"


def world_too(model, batch):
    """The first mask bug: every token after the prompt scored, the world's too."""
    batch.completion_mask = (batch.turn >= 0).long()
    return reference_loss(model, batch)


def first_reply_only(model, batch):
    """The second: the model's tokens after the world's answer dropped."""
    batch.completion_mask = ((batch.turn == 0) & batch.completion_mask.bool()).long()
    return reference_loss(model, batch)


def whole_return(model, batch):
    """The third: every turn weighted by the whole return (the reference's RLOO, ``outcome``)."""
    return _loss(token_logps(model, batch, vocab_size=model.vocab_size), batch, "outcome")


def _grads(problem, fn, rows):
    """[n, p] ĝ = −∇θ fn(model, batch) of each batch of episode indices."""
    model = problem.lab.model
    out = []
    for r in rows:
        g = torch.autograd.grad(fn(model, _batch(problem, r)), list(model.parameters()))
        out.append(-torch.cat([x.reshape(-1) for x in g]).double().numpy())
    return np.asarray(out)


def test_only_the_second_reply_is_scored_through_its_components():
    """Autograd of ln π over each reply's tokens alone, every episode at once: the first
    reply's is 0 on the components ``only_turn(1)`` names, the second's is not."""
    problem = EpisodesProblem("two-turn-first-pays", 0.0, second_turn_rewarded=False)
    every, _, _ = problem.enumerated
    index = problem.lab.only_turn(1)
    model = problem.lab.model
    logps = token_logps(model, _batch(problem, np.arange(len(every.turn))), vocab_size=3)
    for k, zero in ((0, True), (1, False)):
        chosen = every.completion_mask.bool() & (every.turn == k)
        g = torch.autograd.grad((logps * chosen).sum(), list(model.parameters()), retain_graph=True)
        flat = torch.cat([x.reshape(-1) for x in g]).numpy()
        assert bool(np.abs(flat[index]).max() == 0) is zero


def test_the_reward_to_go_holds_the_second_replys_components_at_zero_batch_by_batch():
    """Where the second reply earns nothing, the reference's ĝ is exactly 0 there on every
    batch, whole-return weighting's is not (on most batches), and the engine names it."""
    problem = EpisodesProblem("two-turn-first-pays", 0.0, second_turn_rewarded=False)
    rows = _rows(problem, 12, np.random.default_rng(0))
    index = problem.lab.only_turn(1)
    right, wrong = _grads(problem, reference_loss, rows), _grads(problem, whole_return, rows)
    assert np.abs(right[:, index]).max() == 0
    assert (np.abs(wrong[:, index]).max(1) > 1e-3).sum() >= 6
    trial = Trial("p", right.mean(0), right.std(0), lambda n: None, held_at_zero={"m": index})
    assert moved_from_zero(trial, right) is None
    assert moved_from_zero(trial, right + 1e-9) is None  # float noise of the batch's size
    assert moved_from_zero(trial, wrong) == "m"


@pytest.mark.slow
def test_whole_return_weighting_has_the_exact_mean():
    """Every group enumerated: E[ĝ] of whole-return weighting is ∇J on both problems, so no
    test of the mean can name it (the check tells it batch by batch)."""
    for second in (True, False):
        problem = EpisodesProblem("p", 0.0, second_turn_rewarded=second)
        every, _, _ = problem.enumerated
        got = _expected(problem, every.completion_mask, "outcome")
        np.testing.assert_allclose(got, problem.exact, rtol=0, atol=1e-5)  # float32 θ


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


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fn", "verdict", "diagnosis"),
    [(reference_loss, "unbiased", None), (whole_return, "excess variance", WHOLE_RETURN)],
)
def test_the_check_names_whole_return_weighting_where_only_the_first_turn_pays(
    fn, verdict, diagnosis
):
    report = check(fn, family="episodes", problem="two-turn-first-pays")
    (p,) = report.problems
    assert (p.verdict, p.diagnosis) == (verdict, diagnosis)
    assert report.passed is (verdict == "unbiased")
    assert bool(p.variance_ratio > 1.2) is (verdict != "unbiased")  # more variance, as it says


def _on_three(verdict: str, diagnosis: str | None) -> dict:
    """The same verdict and diagnosis on each of the family's three problems."""
    problems = ("two-turn", "two-turn-first-pays", "two-turn-long-answers")
    return {problem: (verdict, diagnosis) for problem in problems}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "found"),
    [
        ("reward_to_go", {}),
        ("whole_return", {"two-turn-first-pays": ("excess variance", WHOLE_RETURN)}),
        ("world_tokens_trained", _on_three("biased", "world-tokens-trained")),
        (
            "first_reply_only",
            {
                "two-turn": ("biased", "model-tokens-after-answer-dropped"),
                "two-turn-long-answers": ("biased", "model-tokens-after-answer-dropped"),
            },
        ),
        # the same mistakes in other forms a user writes them (the credit audit names them)
        ("world_tokens_no_baseline", _on_three("biased", "world-tokens-trained")),
        (
            "world_tokens_per_episode",
            _on_three("biased", "world-tokens-trained, length-normalised"),
        ),
        ("per_episode_mean", _on_three("biased", "length-normalised")),
    ],
)
def test_the_command_line_names_each_mask_mistake_and_passes_the_correct_loss(capsys, name, found):
    """The example losses (written as a user would, apart from the check's reference) on the
    command line: the correct one exits 0, each mistake 1 with its name on its problems."""
    argv = ["check", f"{EXAMPLE}:{name}", "--family", "episodes", "--kl", "none"]
    rc = main([*argv, "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    got = {p["problem"]: (p["verdict"], p["diagnosis"]) for p in out["problems"]}
    want = _on_three("unbiased", None) | found
    assert got == want and rc == (1 if found else 0)


@pytest.mark.slow  # the family's exact expectations and pilot first (fast cover: test_check)
def test_a_finite_loss_with_a_nan_gradient_is_one_line_exit_2(tmp_path, capsys):
    """It was exit 1, ``biased``/``other``, every number null; a nan value is one line."""
    path = tmp_path / "nan_gradient.py"
    path.write_text(
        "import torch\n\n\ndef loss(model, batch):\n"
        "    return torch.sqrt(model(batch.completion_ids).logits.sum() * 0)\n"
    )
    rc = main(["check", f"{path}:loss", "--family", "episodes", "--kl", "none"])
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "error" in line]
    assert rc == 2 and captured.out == "" and len(lines) == 1, captured.err
    assert "returned 0, but its gradient is not finite" in lines[0] and "two-turn" in lines[0]


def test_each_mistake_is_drawn_in_every_form_a_user_writes_it():
    """With and without a baseline, summed and normalised per episode: the variants' names."""
    from eligibility.check.episodes import _variants

    problem = EpisodesProblem("two-turn", 0.0)
    got = {(name, tuple(sorted(form.items()))) for name, _, form in _variants(problem)}
    for baseline in ((), (("baseline", "none"),)):
        per_episode = tuple(sorted((*baseline, ("aggregation", "sequence-mean"))))
        assert ("world-tokens-trained", baseline) in got
        assert ("model-tokens-after-answer-dropped", baseline) in got
        assert ("world-tokens-trained, length-normalised", per_episode) in got
        assert ("length-normalised", per_episode) in got


def test_an_unnamed_finding_on_episodes_points_to_the_episodes_examples():
    from eligibility.check.diagnosis import Diagnosis
    from eligibility.check.fixes import fixes_for

    (said,) = fixes_for(Diagnosis(("other",)), "model", None, "episodes")
    assert "examples/check/episodes.py" in said and "sequence" not in said
    (elsewhere,) = fixes_for(Diagnosis(("other",)), "model", None, "sequence")
    assert "examples/check/sequence/rloo.py" in elsewhere


def test_a_model_batch_loss_without_a_family_is_pointed_to_episodes(tmp_path, capsys):
    f = tmp_path / "mine.py"
    f.write_text("def loss(model, batch):\n    return 0.0\n")
    assert main(["check", f"{f}:loss"]) == 2
    err = capsys.readouterr().err
    assert "--family episodes" in err and "--family sequence --form model" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
