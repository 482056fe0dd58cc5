"""Every row of the option table claims a verdict of ``eligibility check`` on each exact problem:
a generated test per row runs the check on that row's loss and asserts the claim.

The row's loss is finetune's own code path (:func:`eligibility.lm.objective.loss`: the table's
functions composed with the defaults of the other kinds). Truth is the check's: the lab's exact
∇J by enumeration (which never calls the table) and the check's engine.

* the fast form (default suite): the check's own trial, engine and verdict, at N = 60 on
  ``length`` and ``kl``, with the batches and every variant's estimates drawn once per problem
  and shared by the rows; each row's ĝ is its loss differentiated in ℓ (autograd) chained
  with the enumeration's exact per-token scores (held against autograd through the model);
* the full form (slow): ``eligibility.check.check`` itself on every problem at the N it
  chooses.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _fast_form import gradients  # noqa: E402
from eligibility.check import check  # noqa: E402
from eligibility.check import sequence as seq  # noqa: E402
from eligibility.check.run import CheckConfig, _verdict  # noqa: E402
from eligibility.lab.sequence.builtin import PROBLEMS  # noqa: E402
from eligibility.lab.sequence.problem import Draw as Rows  # noqa: E402
from eligibility.lm.objective import loss as finetune_loss  # noqa: E402
from eligibility.torch import option_docs, options  # noqa: E402

ROWS = [pytest.param(o, id=f"{o.kind}:{o.name}") for o in options.ROWS]
FAST_N = 60
FAST_PROBLEMS = ("length", "kl")
NEEDS_FULL_N = {
    ("baseline:mean", "kl"),  # (G − 1)/G on the reward's part only: 7 % off ∇J
    ("aggregation:token-sum-norm", "length"),  # W < T in a few batches only
    ("aggregation:padded-width", "length"),
}
"""Cells whose bias N = 60 cannot resolve (the fast form reads them as a step size or as no
bias at all): held by the full form, at the N the check chooses."""


def row_loss(kind: str, name: str):
    """The loss with this row and the defaults of the other kinds, as finetune computes it."""
    choice = {**options.DEFAULTS, kind: name}

    def fn(logps, batch):
        value, _ = finetune_loss(
            logps,
            batch.rewards,
            batch.completion_mask > 0,
            group_size=batch.group_size,
            max_completion_length=batch.max_completion_length,
            beta=batch.beta,
            ref_logps=batch.ref_logps,
            **choice,
        )
        return value

    return fn


@pytest.fixture(scope="module")
def shared():
    """Per fast problem: one trial, one draw of N batches (every variant on them), the batches
    and the exact per-token scores ∇ℓ of the enumeration, shared by the rows."""
    config = CheckConfig(sequence=True, samples=FAST_N)
    out = {}
    for name in FAST_PROBLEMS:
        problem = PROBLEMS[name]()
        trial = seq.trial(problem, None, config, seed=0)
        draw = trial.draw(FAST_N)
        G = problem.group_size
        batches = []
        for rows in draw.drawn:
            prompts = problem.table.prompt[rows[::G]]
            batch = problem.batch(Rows(prompts=prompts, rows=rows, group_size=G))
            logps, batch = problem.on_policy(batch)
            batches.append((rows, logps.detach(), batch))
        out[name] = (problem, trial, draw, batches)
    return config, out


@pytest.mark.parametrize("row", ROWS)
def test_each_row_gets_the_verdict_it_claims_fast(row, shared):
    config, trials = shared
    for name, (problem, trial, draw, batches) in trials.items():
        if (f"{row.kind}:{row.name}", name) in NEEDS_FULL_N:
            continue
        g = gradients(row_loss(row.kind, row.name), problem, batches)
        report = _verdict(trial, g, draw, config, FAST_N, time.perf_counter())
        assert (report.verdict, report.diagnosis) == row.verdicts[name], (name, report)


def test_one_backward_over_the_batches_is_each_batchs_own(shared):
    """``gradients``' one backward over the sum of the batches' losses against a backward of
    each batch's loss on its own (the plain loop), bit for bit, for the last row of each kind
    (on ``kl``, whose β > 0)."""
    _, trials = shared
    problem, _, _, batches = trials["kl"]
    for kind in options.KINDS:
        fn = row_loss(kind, list(options.rows(kind))[-1])
        want = []
        for rows, logps, batch in batches[:20]:
            x = logps.clone().requires_grad_(True)
            (dl,) = torch.autograd.grad(fn(x, batch), x)
            want.append(
                -np.einsum(
                    "nt,ntp->p", dl.double().numpy(), problem.token_scores[rows, : dl.shape[1]]
                )
            )
        assert np.array_equal(gradients(fn, problem, batches[:20]), np.stack(want)), kind


def test_the_fast_gradients_are_autograd_through_the_model(shared):
    """The chain rule of the fast form against the check's own call through the model."""
    config, trials = shared
    problem, _, draw, batches = trials["kl"]
    fn = row_loss("kl", "k3")
    fresh = seq.trial(problem, fn, config, seed=0).draw(3)
    assert np.array_equal(fresh.drawn, draw.drawn[:3])
    want = np.stack([fresh.step(k) for k in range(3)])
    np.testing.assert_allclose(gradients(fn, problem, batches[:3]), want, rtol=1e-4, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_each_row_gets_the_verdict_it_claims(row):
    report = check(row_loss(row.kind, row.name), sequence=True)
    got = {p.problem: (p.verdict, p.diagnosis) for p in report.problems}
    assert got == row.verdicts


def test_every_kind_has_its_default_and_every_row_a_verdict_per_problem():
    for kind in options.KINDS:
        assert options.DEFAULTS[kind] in options.names(kind)
        assert options.row(kind, options.DEFAULTS[kind]).verdicts == dict.fromkeys(
            options.PROBLEMS, options.UNBIASED
        )
    for o in options.ROWS:
        assert set(o.verdicts) == set(options.PROBLEMS), o.name
        assert set(o.frameworks) <= set(options.VERSIONS), o.name
        assert o.fn is None or o.fn.__doc__, o.name  # the formula in its docstring
    with pytest.raises(ValueError, match="aggregation must be one of"):
        options.row("aggregation", "sequence-mean-token-mean")


DOCS = {"torch-losses.md": "options", "lm.md": "options", "check.md": "frameworks"}


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_the_docs_tables_are_printed_from_the_table(doc):
    """Each doc's marked table equals the one the rows print (``tools/option_tables.py``)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / doc).read_text(encoding="utf-8")
    name = DOCS[doc]
    assert f"<!-- table:{name} -->\n{option_docs.markdown(name)}<!-- /table:{name} -->" in text
    assert option_docs.sync(text) == text, f"run: python tools/option_tables.py --update docs/{doc}"


def test_a_changed_row_makes_the_doc_test_fail():
    """The check above can fail: a doc whose table lost a row is rewritten by sync."""
    block = f"<!-- table:options -->\n{option_docs.markdown('options')}<!-- /table:options -->"
    stale = block.replace(option_docs.markdown("options").splitlines()[-1] + "\n", "")
    assert stale != block and option_docs.sync(stale) == block
