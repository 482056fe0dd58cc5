"""Training code as it is written: a step that calls backward() and step() itself (``--form
step``), advantages computed in a function of their own (``--advantages``) on micro-batches
that split a group, and DDP's average over ranks (``--world-size``).

Truth: autograd of the same losses through the problem's model on one batch; the lab's exact
∇J for the full-size checks (slow).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from eligibility.check import check
from eligibility.check import sequence as seq
from eligibility.check.run import CheckConfig
from eligibility.check.step import StepRecord, stepped
from eligibility.check.user import UserError, load_function, reset_policy
from eligibility.lab.sequence.builtin import PROBLEMS, get_problem
from eligibility.lab.sequence.handed import policy_model

SEQ = Path(__file__).resolve().parents[1] / "examples" / "check" / "sequence"


def _setup(name="kl"):
    p = get_problem(name)
    rows = seq._draw_rows(p, 1, len(p.prompts), np.random.default_rng(5))[0]
    params = list(p.model.parameters())
    theta = [w.detach().clone() for w in params]
    return p, seq.batch_of(p, rows, 1.0), policy_model(p.model, p.eos_token_id), params, theta


def test_the_step_form_reads_the_update_the_function_made():
    """A function that backpropagates per group, clips and steps (once, or once per group):
    the recorded update ÷ η is −∇ of the whole batch's loss, by autograd through the model."""
    p, batch, model, params, theta = _setup()
    lp, on = p.on_policy(batch)
    loss = load_function(f"{SEQ}/rloo.py:loss")(lp, on)
    want = -torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)]).numpy()
    for name in ("step", "step_per_group"):
        got = stepped(load_function(f"{SEQ}/training_step.py:{name}"), model, batch, params, theta)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6, err_msg=name)
        assert all(w.grad is None for w in params)
        assert all(torch.equal(w, t) for w, t in zip(params, theta, strict=True))  # θ kept

    def backward_only(model, optimizer, batch):  # never steps: the accumulated .grad is read
        load_function(f"{SEQ}/training_step.py:_group_loss")(model, batch, slice(None)).backward()

    assert np.any(stepped(backward_only, model, batch, params, theta))

    def writes(model, optimizer, batch):
        with torch.no_grad():
            next(model.parameters()).add_(1.0)

    with pytest.raises(UserError, match="changed the policy's parameters itself"):
        stepped(writes, model, batch, params, theta)
    reset_policy(params, theta)  # as the check does before every call
    assert stepped(lambda model, optimizer, batch: None, model, batch, params, theta) is None


def test_the_clip_problems_gradient_norm_exceeds_the_usual_max_norm():
    """A training step's gradient on ``clip`` (rewards 0 or 10) has norm > 1 in nearly every
    batch (autograd through the model), where ``length``'s (0/1 rewards) stays below 1; its
    ∇J is the enumeration's, as every problem's (test_check_sequence.py).

    30 batches a problem: on seeds 0-3 every clip batch's norm is above 1 (median 4.7 to 5.6)
    and every length batch's at most 0.66; a clip batch whose rewards are all equal has norm
    0 (1 of 240 batches there), and one such batch of 30 still passes."""
    norms = {}
    for name in ("length", "clip"):
        p = get_problem(name)
        rng, model = np.random.default_rng(0), policy_model(p.model, p.eos_token_id)
        params = list(p.model.parameters())
        step = load_function(f"{SEQ}/training_step.py:step")
        got = [
            stepped(step, model, seq.batch_of(p, r, 1.0), params, [w.detach() for w in params])
            for r in seq._draw_rows(p, 30, len(p.prompts), rng)
        ]
        norms[name] = np.linalg.norm(got, axis=1)
    assert np.mean(norms["clip"] > 1.0) >= 0.95 and np.median(norms["clip"]) > 3
    assert np.all(norms["length"] < 1.0)


def test_the_step_record_says_whether_a_step_split_its_batch(monkeypatch):
    """Backward passes per call: the RLOO step backpropagates once per group (2 here), a step
    of one backward never splits; the clip's record keeps its bound and the largest norm."""
    p, batch, model, params, theta = _setup("clip")
    for module in (torch.nn.utils, torch.nn.utils.clip_grad):  # put back after the test
        monkeypatch.setattr(module, "clip_grad_norm_", module.clip_grad_norm_)
    record = StepRecord()
    record.watch()
    stepped(load_function(f"{SEQ}/training_step.py:step"), model, batch, params, theta, record)
    assert record.summary()["split"] == {"calls": 1, "split": 1, "most": 2}

    def whole(model, optimizer, batch):
        load_function(f"{SEQ}/training_step.py:_group_loss")(model, batch, slice(None)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    stepped(whole, model, batch, params, theta, record)
    said = record.summary()
    assert said["split"] == {"calls": 2, "split": 1, "most": 2}
    assert said["clip"]["calls"] == 2 and said["clip"]["max_norm"] == 1.0  # 1e6, then 1
    assert said["clip"]["bound"] == 1 and said["clip"]["largest_norm"] > 1.0
    assert all(w.grad is None for w in params) and not p.model.token.weight._backward_hooks


def test_all_holds_the_clip_problem_under_the_step_form_only():
    assert "clip" in CheckConfig(sequence=True, form="step").problems
    assert "clip" not in CheckConfig(sequence=True).problems
    assert CheckConfig(sequence=True, problem="clip").problems == ("clip",)


def test_advantages_of_the_whole_batch_are_sliced_for_each_micro_batch():
    p, batch, _, _, _ = _setup()
    rows = seq._draw_rows(p, 1, len(p.prompts), np.random.default_rng(5))[0]
    fn = load_function(f"{SEQ}/split_advantages.py:advantages")
    a = seq.with_advantages(p, fn, rows, 1.0)
    torch.testing.assert_close(a, fn(batch))
    part = seq.batch_of(p, rows[4:8], 1.0, a[4:8])  # a micro-group of 4 inside a group of 8
    assert len(part.rewards) == 4 and torch.equal(part.advantages, a[4:8])
    with pytest.raises(
        ValueError, match=r"--advantages function .* must return a tensor of shape \(16,\)"
    ):
        seq.with_advantages(p, lambda b: b.rewards[:3], rows, 1.0)


def test_ranks_and_micro_batches_that_cannot_split_a_problem_are_refused():
    difficulty, length = PROBLEMS["difficulty"](), PROBLEMS["length"]()
    ranks = CheckConfig(sequence=True, world_size=2)
    assert seq.unfit(length, ranks) is None
    assert seq.unfit(difficulty, ranks) == (
        "--world-size 2 does not divide the 3 groups of problem difficulty"
    )
    split = CheckConfig(sequence=True, micro_batches=4, advantages="x.py:f")
    assert seq.unfit(length, split) is None and seq.unfit(difficulty, split) is None  # 16, 24
    odd = CheckConfig(sequence=True, micro_batches=5, advantages="x.py:f")
    assert "does not divide the 16 completions" in seq.unfit(length, odd)
    with pytest.raises(ValueError, match="--world-size is not taken by the episodic check"):
        CheckConfig(world_size=2)
    assert ("accumulation-scaled", 2.0) in seq.named_scales(8, 5, 16, 1, 2)


@pytest.mark.slow
def test_a_training_step_is_checked_as_it_is_written():
    report = check(f"{SEQ}/training_step.py:step", sequence=True, form="step")
    assert report.passed and "clip" in {p.problem for p in report.problems}  # never bound
    (p,) = check(
        f"{SEQ}/training_step.py:step_per_group", sequence=True, form="step", problem="kl"
    ).problems
    assert p.verdict == "unbiased"


@pytest.mark.slow
def test_micro_batches_that_split_a_group_with_advantages_computed_elsewhere():
    adv = f"{SEQ}/split_advantages.py:advantages"
    report = check(
        f"{SEQ}/split_advantages.py:loss", sequence=True, micro_batches=4, advantages=adv
    )
    assert report.passed, [(q.problem, q.verdict, q.diagnosis) for q in report.problems]


@pytest.mark.slow
def test_ddp_averages_the_ranks_and_a_rank_local_token_mean_is_named():
    report = check(f"{SEQ}/ranks.py:rank_mean", sequence=True, world_size=2)
    assert report.passed and report.skipped == [
        "difficulty: --world-size 2 does not divide the 3 groups of problem difficulty"
    ]
    (p,) = check(
        f"{SEQ}/ranks.py:rank_token_mean", sequence=True, world_size=2, problem="length"
    ).problems
    assert (p.verdict, p.diagnosis) == ("biased", "batch-dependent-normaliser")


def test_a_step_that_never_split_its_batch_is_said_not_to_have_exercised_accumulation():
    import io

    from rich.console import Console

    from eligibility.check.report import _print_details

    def said(details):
        buf = io.StringIO()
        _print_details(Console(file=buf, width=300), "clip", details, True)
        return buf.getvalue()

    assert "gradient accumulation was not exercised" in said(
        {"split": {"calls": 800, "split": 0, "most": 1}}
    )
    assert said({"split": {"calls": 800, "split": 800, "most": 2}}) == ""
