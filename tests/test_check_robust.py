"""What a loss does to what it is handed is read right or said, never misread.

A loss may write the batch in place (``batch.rewards``, ``batch.completion_mask``), write the
log-probs or the logits in place, hook their gradient, or run a forward pass that raises and
catch it. The check's verdict is the z-test's on the exact problems (truth: ∇J, and the
variants the check computes on its own copy of each batch); the credit audit reads the batch
as it was handed (a copy taken before the call), says what the loss wrote, and says where the
weights it would read are not the ones ĝ carries. The report never says two things of one
problem: a constant the table's scale contradicts is not said, a leak is never marked ✓.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility.check import check  # noqa: E402
from eligibility.check.audit.judge import Audit  # noqa: E402
from eligibility.check.audit.relations import Finding  # noqa: E402
from eligibility.check.audit.tap import Tap  # noqa: E402
from eligibility.check.report import report_text, verdict_cell  # noqa: E402
from eligibility.check.run import one_constant  # noqa: E402


def _rloo(batch):
    r = batch.rewards.view(-1, batch.group_size)
    return (r - (r.sum(1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1)


def rewards_whitened_in_place(logps, batch):
    """Whitens batch.rewards in place, then no baseline: the batch's whitening."""
    batch.rewards.sub_(batch.rewards.mean()).div_(batch.rewards.std() + 1e-6)
    return -(batch.rewards * (logps * batch.completion_mask).sum(1)).mean()


def gradient_hooked(logps, batch):
    """A hook doubling the log-probs' gradient: ĝ = 2 ∇J."""
    logps.register_hook(lambda g: 2 * g)
    return -(_rloo(batch) * (logps * batch.completion_mask).sum(1)).mean()


def logps_doubled_in_place(logps, batch):
    """The log-probs handed, doubled in place: ĝ = 2 ∇J."""
    logps.mul_(2.0)
    return -(_rloo(batch) * (logps * batch.completion_mask).sum(1)).mean()


def tokens_dropped_at_random(logps, batch):
    """Each token kept with probability 1/2 and doubled: unbiased, more variance."""
    keep = (torch.rand(logps.shape) < 0.5).float() * 2.0
    return -(_rloo(batch) * (keep * logps * batch.completion_mask).sum(1)).mean()


def _model_logps(model, batch):
    z = model(batch.input_ids, attention_mask=batch.attention_mask).logits
    P = batch.prompt_ids.shape[1]
    lp = torch.log_softmax(z[:, P - 1 : -1], -1)
    return lp.gather(-1, batch.completion_ids[..., None])[..., 0]


def forward_raises_and_is_caught(model, batch):
    """A forward pass on a bad input raises inside the loss and is caught; the rest is right."""
    try:
        model(batch.input_ids[:, :0].float())
    except Exception:
        pass
    return -(_rloo(batch) * (_model_logps(model, batch) * batch.completion_mask).sum(1)).mean()


def _check(fn, **kw):
    return check(fn, sequence=True, problem="length", samples=200, **kw).problems[0]


# -- the tap, alone (fast) ------------------------------------------------------------------------


class _Out(torch.nn.Module):
    """A module whose forward returns ``.logits`` (a causal LM's shape), raising on floats."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Embedding(5, 3)

    def forward(self, input_ids, attention_mask=None):
        return types.SimpleNamespace(logits=self.inner(input_ids))


def test_a_forward_that_raises_and_is_caught_leaves_the_next_pass_read():
    """Its pre-hook ran and its hook never did: the next pass is still the outermost one."""
    model = _Out()
    ids = torch.tensor([[1, 2, 3]])
    with Tap(model=model) as tap:
        with pytest.raises(RuntimeError):
            model(ids.float())  # an Embedding given floats raises inside the forward
        z = model(ids).logits
    assert len(tap.captured) == 1 and tap.captured[0][1] is z


def test_a_batch_written_in_place_is_said_and_the_copy_kept():
    batch = types.SimpleNamespace(rewards=torch.tensor([1.0, 2.0]), mask=torch.ones(2, 3))
    logps = torch.zeros(2, 3, requires_grad=True) * 1.0
    tap = Tap(logps=logps, batch=batch)
    batch.rewards.sub_(1.5)
    batch.mask[:, 0] = 0
    tap.after_call()
    assert tap.written == ["rewards", "mask"] and not tap.unread
    assert torch.equal(tap.held.rewards, torch.tensor([1.0, 2.0]))
    assert torch.equal(tap.held.mask, torch.ones(2, 3))


def test_a_write_or_a_hook_on_what_the_audit_reads_is_said_not_read():
    logps = torch.zeros(2, 3, requires_grad=True) * 1.0
    alias = types.SimpleNamespace(old_logps=logps.detach())  # on-policy: a view of logps
    tap = Tap(logps=logps, batch=alias)
    logps.mul_(2.0)
    tap.after_call()
    assert "writes `logps` in place" in tap.unread and tap.written == []
    hooked = torch.zeros(2, 3, requires_grad=True) * 1.0
    tap = Tap(logps=hooked)
    hooked.register_hook(lambda g: 2 * g)
    tap.after_call()
    assert "register_hook" in tap.unread


def test_a_hook_the_loss_adds_to_the_model_is_said_one_there_before_is_not():
    model = _Out()
    model.inner.weight.register_hook(lambda g: g)  # the model as handed: a framework's own
    tap = Tap(model=model)
    tap.after_call()
    assert not tap.unread
    model.inner.register_full_backward_hook(lambda m, gi, go: None)
    tap.after_call()
    assert "hooks the model's gradient" in tap.unread


def test_a_constant_the_tables_scale_contradicts_is_not_said():
    """The audit's c = 2 on the replies it weighs, the table's 0.99 ± 0.02 on every batch:
    only the table's is said; a constant that agrees is kept."""
    from eligibility.check.audit.judge import _constant

    (said,) = _constant(2.0, [], "group")  # the audit's constant, whatever its words
    assert said.constant == 2.0
    assert [f.constant for f in _constant(0.5, [], "group", noise=0.01)] == [0.5]
    assert [f.constant for f in _constant(1e4, [], "group")] == [1e4]  # 1/ε: the same value

    worded = Finding("scale", "the weights are twice the credit's", constant=2.0)
    other = Finding("std-normalised", "each group's advantages divided by its σ")
    found = Audit(24, findings=[other, said], relation="r", covers="every weight")
    report = types.SimpleNamespace(
        scale=0.99, scale_stderr=0.02, threshold=4.4, verdict="unbiased", finding=None
    )
    assert one_constant(found, report).findings == [other]
    reworded = Audit(24, findings=[other, worded], relation="r", covers="every weight")
    assert one_constant(reworded, report).findings == [other]  # the value, not the words
    report.scale = 1.97
    assert one_constant(found, report) is found


def _judged(verdict, table, *findings):
    """A report the table named ``table`` (None: no row), judged beside an audit of ``findings``."""
    from eligibility.check.audit.judge import judge
    from eligibility.check.diagnosis import Diagnosis

    report = types.SimpleNamespace(
        verdict=verdict, finding=table and Diagnosis(tuple(table.split(", "))), details=None
    )
    judge(report, Audit(24, findings=list(findings), relation="r", covers="every weight"))
    said = [f["name"] for f in report.details["audit"]["findings"]]
    return (report.finding and ", ".join(report.finding.names)), said


def test_one_reading_gives_the_diagnosis_beside_a_row_of_the_table():
    """The table's name and the audit's are never two names of one problem: the row's stays
    where the audit's share one with it (a joined constant, the audit's part of it; a missing
    shift, whose places include the padding), the audit's where none of its names is the
    row's (a constant the row named from its value alone, a drop the row matched to a mask),
    and an unread audit is not said beside a row."""
    joined = "self-including-mean, constant-normaliser"
    part = Finding("constant-normaliser", "every weight is c = 0.109 times the exact credit's")
    assert _judged("scaled", joined, part) == (joined, ["constant-normaliser"])
    shift = Finding("no-shift", "40 positions read the logits at a token's own position")
    pad = Finding("padding-in-loss", "the padding scored in 3 of 8 rows", 0.02, leak=True)
    assert _judged("biased", "no-shift", pad, shift) == (
        "no-shift",
        ["padding-in-loss", "no-shift"],
    )
    step = Finding("scale", "every weight is c = 0.875 times the exact credit's (a step size)")
    assert _judged("scaled", "self-including-mean", step) == ("scale", ["scale"])
    drop = Finding("model-tokens-dropped", "the first token of reply 1", 0.01, leak=True)
    assert _judged("biased", "truncated-masked", drop) == (
        "model-tokens-dropped",
        ["model-tokens-dropped"],
    )
    # what the audit reads beside the row's, in the weights' map, is added after the row's
    ratio = Finding("per-token-ratio", "each token weighted by its own ratio π_θ/π_old")
    sampler = Finding("per-token-sampler-weight", "each token weighted by its own π_old/μ")
    assert _judged("biased", "per-token-ratio, clipping-bias", ratio, sampler)[0] == (
        "per-token-ratio, clipping-bias, per-token-sampler-weight"
    )
    unread = Finding("credit-unexplained", "no description of the audit's search fits")
    assert _judged("biased", "cispo-relative-cap", unread) == ("cispo-relative-cap", [])
    assert _judged("biased", None, unread) == ("credit-unexplained", ["credit-unexplained"])
    kl_unread = Finding("kl-estimator-unknown", "the KL's part is none of the estimators'")
    assert _judged("biased", "kl-forward, kl-normalised", kl_unread) == (
        "kl-forward, kl-normalised",
        [],
    )
    assert _judged("biased", "other", drop)[0] == "model-tokens-dropped"


def test_a_cause_named_from_the_rows_own_fitted_constant_is_not_said():
    """TRL's CISPO caps the on-policy ratio 1 at ε_high = 0.2: the row reads ``... × 0.2``, and
    the audit, from the value alone, would name the same 0.2 as 1/T at T = 5
    (``constant-normaliser``), a division the loss does not make. A constant of the audit's
    that is the row's × c is not said beside it; another constant is."""
    from eligibility.check.audit.judge import one_reading
    from eligibility.check.diagnosis import Diagnosis

    per_batch = Finding("batch-dependent-normaliser", "a factor per batch: the batch's tokens")
    names = ("std-normalised", "batch-dependent-normaliser")
    for c, said in ((0.2, []), (0.5, ["constant-normaliser"])):
        guess = Finding("constant-normaliser", f"every weight is c = {c}", constant=c)
        found = Audit(24, findings=[per_batch, guess], relation="r", covers="every weight")
        audit, table = one_reading(found, Diagnosis(names, times=0.2))
        assert table.names == (*names, *said) and table.times == 0.2
        assert [f.name for f in audit.findings] == ["batch-dependent-normaliser", *said]


def test_a_leak_is_never_marked_passed_in_the_table():
    assert verdict_cell("unbiased", misweighted=True).startswith("✗")
    assert verdict_cell("unbiased").startswith("✓")
    assert verdict_cell("scaled").startswith("≈")


# -- the check end to end -----------------------------------------------------------------------


@pytest.mark.usefixtures("check_calls_in_process")
def test_a_loss_writing_batch_rewards_in_place_is_audited_on_what_it_was_handed():
    """The table (its variants on the check's own copy) reads the whitening; the audit, on the
    batch as handed, reads the same, and the report says the loss wrote the field."""
    p = _check(rewards_whitened_in_place)
    assert p.diagnosis == "batch-whitened"
    audit = p.details["audit"]
    assert [f["name"] for f in audit["findings"]] == ["batch-whitened"]
    assert "whitened over the batch" in audit["relation"]
    assert p.details["written_in_place"] == ["rewards"]


@pytest.mark.slow
@pytest.mark.usefixtures("check_calls_in_process")
def test_a_hook_or_an_inplace_write_on_logps_is_said_beside_the_tables_scale():
    for fn, words in (
        (gradient_hooked, "register_hook"),
        (logps_doubled_in_place, "writes `logps` in place"),
    ):
        report = check(fn, sequence=True, problem="length", samples=200)
        (p,) = report.problems
        assert p.verdict == "scaled" and abs(p.scale - 2.0) < 0.15
        assert (
            p.details["audit"]["covers"].startswith("not audited")
            and not p.details["audit"]["findings"]
        )
        assert words in report_text(report)


@pytest.mark.slow
@pytest.mark.usefixtures("check_calls_in_process")
def test_a_caught_forward_and_a_random_dropout_read_as_correct_losses():
    """A caught forward used to leave every later pass unread (100 % uncovered); tokens
    dropped at random and doubled read c = 2 in the audit beside the table's c ≈ 1."""
    p = _check(forward_raises_and_is_caught, form="model")
    assert p.verdict == "unbiased" and not p.details["audit"]["findings"]
    assert p.details["audit"]["covers"] == "every weight on the model's tokens"
    p = _check(tokens_dropped_at_random)
    found = p.details["audit"]["findings"]
    assert p.verdict == "unbiased" and [f["name"] for f in found] == ["dropped-at-random"]
    assert not found[0]["leak"] and "c = 2" not in found[0]["where"]


# -- a greedy sampler -----------------------------------------------------------------------------

OFF = "examples/check/offpolicy/losses.py:product"


def test_a_greedy_sampler_top_k_1_is_refused_in_one_line(capsys):
    """``--top-k 1`` (as ``--min-p 1``): every batch alike, its reference's variance 0 (a
    ZeroDivisionError traceback before); refused before any work, exit 2, one line."""
    from eligibility.cli import main

    assert main(["check", OFF, "--off-policy", "--top-k", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "greedy sampler" in err and "Traceback" not in err


def test_a_top_p_that_leaves_one_completion_a_prompt_is_refused_in_one_line(capsys):
    """``--top-p 0.01`` keeps the most probable token alone at every position of every
    problem: refused by each problem's own sampler (its support: one completion a prompt)."""
    from eligibility.check import offpolicy_sampler
    from eligibility.cli import main

    assert main(["check", OFF, "--off-policy", "--top-p", "0.01"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "greedy sampler" in err and "Traceback" not in err
    wide = offpolicy_sampler.build_problem("near", (None, 0.5, None))
    support = np.add.reduceat(wide.covered.astype(int), wide.base.table.start[:-1])
    assert support.max() > 1  # a wider cut keeps more than one completion: it is checked
    config = types.SimpleNamespace(top_k=None, top_p=0.5, min_p=None)
    assert offpolicy_sampler.greedy(wide, config) is None


def test_a_bias_the_audit_names_only_by_what_moves_no_mean_is_said_unexplained():
    """A biased verdict whose audit names only a mistake that moves no mean (a few tokens left
    without weight at random) has its bias not located: the diagnosis is credit-unexplained,
    never dropped-at-random (whose meaning says unbiased); the drop's own line stays."""
    drop = Finding("dropped-at-random", "6 of the 1115 model tokens get no weight: at random")
    assert _judged("biased", None, drop) == ("credit-unexplained", ["dropped-at-random"])
    assert _judged("excess variance", None, drop) == ("dropped-at-random", ["dropped-at-random"])
