"""A loss that detaches part of what it should differentiate is said, never read as a map.

Truth: autograd. The tap's detached entries are held against the support of the Jacobian of
the value returned, taken apart by hand (a loss whose detached part is known by construction);
the weights the audit reads are autograd's ∂L/∂ℓ; each audit case's reading is derived from
its code before any run (which tokens are cut off the graph, by what rule). A detached value
that never reaches the loss (logged), and the ratio idiom exp(ℓ − sg(ℓ)) whose weights are the
credit's, are no finding.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility.check import user  # noqa: E402
from eligibility.check.audit.tap import Tap  # noqa: E402
from test_check_audit import _rloo, _seq_audit, _summed  # noqa: E402

# -- the tap alone, against autograd --------------------------------------------------------------


def _tapped(fn, logps):
    """The tap of one call of ``fn(logps)`` (the check's own call), and autograd's ∂L/∂ℓ."""
    tap = Tap(logps=logps)
    with tap.reading():
        out = fn(logps)
    tap.after_call(out)
    (w,) = torch.autograd.grad(out, logps, allow_unused=True, retain_graph=True)
    return tap, np.zeros(logps.shape) if w is None else w.numpy()


def _logps(seed=0, n=4, L=5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, L, generator=g, dtype=torch.float64, requires_grad=True) * 1.0


def test_the_entries_read_detached_and_left_without_weight_are_those_cut():
    """ℓ detached where ``cut``: autograd's weight is 0 exactly there; the tap's entries hold
    every entry the detached tensor was computed from (all of ℓ: ``x.detach()`` is whole), and
    those without weight among them are ``cut``."""
    lp = _logps()
    cut = torch.zeros(lp.shape, dtype=torch.bool)
    cut[:, 0], cut[2] = True, True
    tap, w = _tapped(lambda x: (torch.where(cut, x.detach(), x) * 3.0).sum(), lp)
    np.testing.assert_array_equal(w == 0, cut.numpy())
    np.testing.assert_array_equal(tap.detached[0] & (w == 0), cut.numpy())
    one = _logps(4)
    tap, w = _tapped(lambda x: (torch.cat([x[:, :1].detach(), x[:, 1:]], 1) * 3.0).sum(), one)
    np.testing.assert_array_equal(tap.detached[0], w == 0)  # a slice detached: its entries


def test_a_value_computed_under_no_grad_is_a_detached_read():
    lp = _logps(1)

    def fn(x):
        with torch.no_grad():
            half = x[:, :2] * 0.5
        return (x[:, 2:] * 2).sum() + half.sum()

    tap, w = _tapped(fn, lp)
    np.testing.assert_array_equal(tap.detached[0] & (w == 0), w == 0)
    assert (w[:, :2] == 0).all() and (w[:, 2:] == 2).all()


def test_a_detached_value_that_never_reaches_the_loss_is_not_a_read():
    """A statistic logged (``lp.detach().mean()``) is no part of the value returned."""
    lp = _logps(2)

    def fn(x):
        _ = x.detach().mean()  # logged, say
        return (x[:, 1:] * 2).sum()

    tap, _ = _tapped(fn, lp)
    assert tap.detached == []


def test_the_ratio_idiom_is_no_detached_read_its_numerator_detached_is():
    """exp(ℓ − sg(ℓ)) reads ℓ detached beside ℓ itself: autograd gives every entry weight 1,
    and nothing is said; exp(sg(ℓ) − ℓ_old) reads it detached alone: weight 0 everywhere."""
    lp = _logps(3)
    tap, w = _tapped(lambda x: torch.exp(x - x.detach()).sum(), lp)
    np.testing.assert_allclose(w, 1.0)
    assert tap.detached == []
    old = lp.detach() - 0.1
    tap, w = _tapped(lambda x: torch.exp(x.detach() - old).sum() + 0.0 * x.sum(), lp)
    np.testing.assert_array_equal(w, 0.0)
    assert tap.detached[0].all()


def test_the_logits_read_detached_are_said_at_their_positions():
    """The model form: the logits of position 0 read only detached; the tap says position 0
    of every row (the vocabulary folded), as autograd's zero gradient there does."""

    class Out(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Embedding(5, 3)

        def forward(self, input_ids, attention_mask=None):
            return types.SimpleNamespace(logits=self.inner(input_ids))

    model, ids = Out(), torch.tensor([[1, 2, 3], [4, 0, 2]])
    with Tap(model=model) as tap:
        with tap.reading():
            z = model(ids).logits
            out = (torch.cat([z[:, :1].detach(), z[:, 1:]], 1) ** 2).sum()
        tap.after_call(out)
    (g,) = torch.autograd.grad(out, z)
    np.testing.assert_array_equal(tap.detached[0], (g == 0).all(-1).numpy())
    assert tap.detached[0][:, 0].all() and not tap.detached[0][:, 1:].any()


# -- the audit: each case derived before any run --------------------------------------------------


def _first_token_detached(lp, b):
    """The first token of each reply cut off the graph: its term never moves θ."""
    return _summed(torch.cat([lp[:, :1].detach(), lp[:, 1:]], 1), b, _rloo(b))


def _reply_one_detached(lp, b):
    """Reply 1 of each group cut off the graph."""
    first = (torch.arange(len(lp)) % b.group_size == 0)[:, None]
    return _summed(torch.where(first, lp.detach(), lp), b, _rloo(b))


def _negative_replies_detached(lp, b):
    """Only the replies above the baseline attached: read before as the advantage's positive
    part, a map the loss does not compute."""
    a = _rloo(b)
    return _summed(torch.where((a < 0)[:, None], lp.detach(), lp), b, a)


def _ratio_numerator_detached(lp, b):
    """A ratio built from detached log-probs, the loss attached to θ by 0 · ℓ only."""
    ratio = torch.exp(lp.detach() - b.old_logps)
    return -(ratio * _rloo(b)[:, None] * b.completion_mask).sum() / len(lp) + 0.0 * lp.sum()


def _no_path_at_all(lp, b):
    """Every log-prob detached: the value returned has no gradient."""
    return _summed(lp.detach(), b, _rloo(b))


DETACHED = {
    _first_token_detached: "the first token of its reply (exactly)",
    _reply_one_detached: "the tokens in reply 1 of its group (exactly)",
    _negative_replies_detached: "in a reply whose advantage is negative (exactly)",
    _ratio_numerator_detached: "every one of them",
    _no_path_at_all: "every one of them",
}
"""Each loss and the rule its detached tokens are said by."""


@pytest.mark.parametrize(
    "fn",
    [
        pytest.param(f, id=f.__name__, marks=() if f is _first_token_detached else pytest.mark.slow)
        for f in DETACHED
    ],
)
def test_each_detached_part_is_said_in_one_line_and_fails(fn):
    found = _seq_audit(fn, batches=6)
    assert [f.name for f in found.findings] == ["logps-detached"], found
    (f,) = found.findings
    assert f.leak and f.where.startswith("your loss detaches the log-probs of ")
    assert DETACHED[fn] in f.where and "those tokens carry no gradient" in f.where


def test_the_detached_count_is_autogradss_zero_weights():
    """On one batch: the tokens said are the model's tokens whose ∂L/∂ℓ (autograd's) is 0
    and whose exact credit is not 0: the first of each reply whose group has any spread."""
    from eligibility.check.audit import Recorder
    from eligibility.check.audit.tokens import tokens
    from eligibility.check.sequence import batch_of
    from eligibility.lab.sequence.builtin import PROBLEMS

    problem = PROBLEMS["length"]()
    rows = problem.draw(len(problem.prompts), np.random.default_rng(1)).rows
    params = list(problem.model.parameters())
    theta = [p.detach().clone() for p in params]
    logps, batch = problem.on_policy(batch_of(problem, rows, 1.0))
    tap = Tap(logps=logps)
    user.call(_first_token_detached, (logps, batch), params, -1.0, theta, tap=tap)
    recorder = Recorder(limit=1)
    recorder.completions([(batch, tap, 1.0)], 0, truncated=problem.table.truncated[rows])
    (w,) = torch.autograd.grad(_first_token_detached(logps, batch), logps)
    t = tokens(recorder.seen)
    zero = w.numpy()[t.row, t.col] == 0
    want = int((zero & (t.c != 0)).sum())
    from eligibility.check.audit.judge import audit

    (f,) = audit(recorder.seen).findings
    assert want > 0 and f.where.startswith(f"your loss detaches the log-probs of {want} of the ")


def _logged_and_masked(lp, b):
    """A statistic of ℓ logged detached, and a mask that drops the first token: the drop is
    the mask's (model-tokens-dropped), not a detach's."""
    _ = lp.detach().mean()
    m = b.completion_mask.clone()
    m[:, 0] = 0
    return -(lp * _rloo(b)[:, None] * m).sum() / len(lp)


def _ratio_idiom(lp, b):
    """exp(ℓ − sg(ℓ))·A: every token read detached too, and weighted by its credit."""
    return -(torch.exp(lp - lp.detach()) * _rloo(b)[:, None] * b.completion_mask).sum() / len(lp)


def _no_grad_baseline(lp, b):
    """A value computed under no_grad added as a constant: no token loses its weight."""
    with torch.no_grad():
        old = lp * 1.0
    return _summed(lp, b, _rloo(b)) + 0.0 * (old * b.completion_mask).sum()


@pytest.mark.parametrize(
    ("fn", "names"),
    [(_logged_and_masked, ["model-tokens-dropped"]), (_ratio_idiom, []), (_no_grad_baseline, [])],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_a_detach_that_costs_no_weight_is_no_finding(fn, names):
    found = _seq_audit(fn, batches=6)
    assert [f.name for f in found.findings] == names, found


def test_the_fix_reattaches_the_ratios_numerator():
    """The registry's fix for ``"logps-detached"``: the ratio exp(ℓ − ℓ_old.detach()), its
    numerator attached; read before as logps-detached, after as the exact credit."""

    def fixed(lp, b):
        ratio = torch.exp(lp - b.old_logps.detach())
        return -(ratio * _rloo(b)[:, None] * b.completion_mask).sum() / len(lp)

    assert [f.name for f in _seq_audit(_ratio_numerator_detached, batches=6).findings] == [
        "logps-detached"
    ]
    assert _seq_audit(fixed, batches=6).findings == []


@pytest.mark.slow
@pytest.mark.usefixtures("check_calls_in_process")
def test_the_report_says_the_detach_beside_no_gradient():
    from eligibility.check import check
    from eligibility.check.report import report_text

    report = check(_no_path_at_all, sequence=True, problem="length", samples=30)
    (p,) = report.problems
    assert p.verdict == "no gradient"
    text = report_text(report)
    assert "credit audit: logps-detached: your loss detaches the log-probs of" in text


@pytest.mark.slow
@pytest.mark.usefixtures("check_calls_in_process")
def test_the_model_form_says_the_logits_detached_at_the_first_token():
    """``fn(model, batch)``: ℓ computed from the logits, its first column detached: the same
    reading as the logps form's, through the logits' positions."""
    from eligibility.check import check
    from test_check_robust import _model_logps

    def first_detached(model, b):
        lp = _model_logps(model, b)
        return _first_token_detached(lp, b)

    (p,) = check(first_detached, sequence=True, problem="length", samples=40, form="model").problems
    (f,) = p.details["audit"]["findings"]
    assert f["name"] == "logps-detached" and "the first token of its reply (exactly)" in f["where"]
    assert p.verdict != "unbiased"
