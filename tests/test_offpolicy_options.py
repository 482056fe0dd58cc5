"""Every off-policy row of the option table (ratio, surrogate, sampler correction) claims the
verdict of ``eligibility check --sequence --off-policy`` on each off-policy problem: a generated
test per row runs the check on that row's loss and asserts the claim.

The row's loss is :func:`eligibility.torch.offpolicy.off_policy_loss` with this row, its
settings (``Option.params``) and the defaults of the other kinds (the product ratio, no clip,
the whole sampler weight, RLOO advantages summed over each sequence). Truth is the check's: the
lab's exact off-policy problems (exact ∇J(θ) by enumeration) and its engine, whose variants
are written apart from the loss.

* fast form (default suite): the check's own trial, engine and verdict at N = 200 on ``far``,
  the problem farthest from ratio 1, where that N resolves every row's claim; the batches, their
  log-probs and every variant's estimates drawn once and shared by the rows, each row's ĝ its
  loss differentiated in ℓ (autograd) chained with the enumeration's exact per-token scores
  (held against the check's own call through the model), as ``tests/test_torch_options.py``;
* full form (slow): the check at the N it chooses, on every problem.
"""

from __future__ import annotations

import time
from typing import get_type_hints

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _fast_form import gradients  # noqa: E402
from _memo import digest, shared  # noqa: E402
from eligibility.check import check, offpolicy  # noqa: E402
from eligibility.check.run import CheckConfig, _verdict  # noqa: E402
from eligibility.torch import option_docs, options  # noqa: E402
from eligibility.torch.offpolicy import off_policy_loss  # noqa: E402


def _estimates_key(problem, rows, chosen) -> str:
    """``estimates``' arguments by value: every array of the problem it reads, the draws'
    enumeration rows and the estimators (``check.offpolicy_tables.estimates``)."""
    t = problem.base.table
    arrays = (t.mask, t.reward, problem.token_logp, problem.old_token_logp)
    arrays += (problem.sampler_token_logp, problem.covered, problem.token_scores)
    return digest(*arrays, problem.group_size, problem.base.n_params, rows, tuple(chosen))


@pytest.fixture(scope="module", autouse=True)
def one_draw_per_problem():
    """Every row's check at the same problem, N and seed draws the same batches, so the engine's
    reference estimates on them (half a fast check's time) are computed once for all the rows
    (``tests/_memo.py``): each row's own loss still runs on every batch."""
    with pytest.MonkeyPatch.context() as mp:
        yield from shared(mp, offpolicy, "estimates", _estimates_key)


ROWS = [pytest.param(o, id=f"{o.kind}:{o.name}") for o in options.OFF_POLICY_ROWS]
FAST_N = 200


def row_loss(o: options.Option):
    """``off_policy_loss`` with row ``o`` (and its settings), the other kinds at their defaults."""
    choice = {**options.OFF_POLICY_DEFAULTS, o.kind: o.name, **o.params}  # a setting: its base

    def loss(logps, batch):
        r = batch.rewards.view(-1, batch.group_size)
        G = batch.group_size
        a = ((G * r - r.sum(1, keepdim=True)) / (G - 1)).reshape(-1)
        return off_policy_loss(
            logps,
            batch.old_logps,
            a,
            batch.completion_mask,
            sampler_logps=batch.sampler_logps,
            **choice,
        )

    return loss


def _verdicts(o: options.Option, problem: str = "all", **kw) -> dict:
    report = check(row_loss(o), sequence=True, off_policy=True, problem=problem, **kw)
    return {p.problem: (p.verdict, p.diagnosis) for p in report.problems}


def _as_claimed(got: tuple, want: tuple) -> bool:
    """The claimed verdict and mistake; a claimed ``other`` (no named mistake fits as it is) is
    also met by a named variant times a fitted constant (``V × c``), which the engine tries
    exactly where nothing fits as it is."""
    if got[0] != want[0]:
        return False
    return got[1] == want[1] or (want[1] == "other" and " × " in (got[1] or ""))


@pytest.fixture(scope="module")
def far():
    """``far``'s trial as ``check`` builds it (seed 0), one draw of N batches (every variant's
    estimates on them), the batches and their log-probs at θ: shared by the rows."""
    config = CheckConfig(sequence=True, off_policy=True, problem="far", samples=FAST_N)
    problem = offpolicy.FAMILY.problems["far"]()
    trial = offpolicy.trial(problem, None, config, seed=0)
    draw = trial.draw(FAST_N)
    rng = np.random.default_rng(0)  # the trial's draws: its pilot, then the N batches
    offpolicy._draws(problem, offpolicy.PILOT, rng)
    batches = []
    for d in offpolicy._draws(problem, FAST_N, rng):
        batch = problem.batch(d)
        batches.append((d.rows, problem.logps(batch).detach(), batch))
    return config, problem, trial, draw, batches


@pytest.mark.parametrize("row", ROWS)
def test_each_off_policy_row_gets_its_verdict_fast(row, far):
    config, problem, trial, draw, batches = far
    g = gradients(row_loss(row), problem, batches)
    report = _verdict(trial, g, draw, config, FAST_N, time.perf_counter())
    got = (report.verdict, report.diagnosis)
    assert _as_claimed(got, row.verdicts["far"]), got


@pytest.mark.parametrize("name", ["ratio:sequence", "surrogate:ppo-clip", "correction:tis"])
def test_the_fast_gradients_are_the_checks_own_calls(name, far):
    """The fast form's batches and chain rule against the check's own calls through the model
    (``Draw.step``, as its worker makes them) on the first batches of the same draw."""
    config, problem, _, _, batches = far
    (row,) = [r.values[0] for r in ROWS if r.id == name]
    fn = row_loss(row)
    fresh = offpolicy.trial(problem, fn, config, seed=0).draw(3)
    want = np.stack([fresh.step(k) for k in range(3)])
    np.testing.assert_allclose(gradients(fn, problem, batches[:3]), want, rtol=1e-4, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_each_off_policy_row_gets_its_verdict(row):
    got = _verdicts(row)
    assert all(_as_claimed(got[p], want) for p, want in row.verdicts.items()), got


def test_every_off_policy_kind_has_its_unbiased_default_and_a_verdict_per_problem():
    for kind in options.OFF_POLICY_KINDS:
        default = options.row(kind, options.OFF_POLICY_DEFAULTS[kind])
        assert default.verdicts == dict.fromkeys(options.OFF_POLICY_PROBLEMS, options.UNBIASED)
    for o in options.OFF_POLICY_ROWS:
        assert set(o.verdicts) == set(options.OFF_POLICY_PROBLEMS), o.name
        assert o.fn is None or o.fn.__doc__, o.name  # the formula in its docstring
        if o.mistake != "ratio-1-broken":  # the ratio-1 invariant, but where it is the mistake
            assert o.verdicts["ratio-one"] == options.UNBIASED, o.name


def test_the_loss_and_finetune_take_their_choices_from_the_rows():
    from eligibility.lm.config import FinetuneConfig
    from eligibility.torch import offpolicy

    assert offpolicy.SURROGATES == ("ratio", "ppo-clip", "dual-clip", "cispo")
    assert offpolicy.CORRECTIONS == ("exact", "none", "tis", "mis")
    for kind in ("surrogate", "correction"):  # a setting row names a loss's own choice
        for o in options.rows(kind).values():
            assert o.params.get(kind, o.name) in options.base_names(kind), o.name
    assert set(offpolicy.RATIOS) == set(options.names("ratio"))
    with pytest.raises(ValueError, match="surrogate must be one of"):
        off_policy_loss(*[torch.zeros(2, 2)] * 2, torch.zeros(2), torch.ones(2, 2), surrogate="x")
    assert get_type_hints(FinetuneConfig)["ratio"].__args__ == options.names("ratio")


def test_the_off_policy_table_in_the_docs_is_the_rows():
    block = option_docs.markdown("offpolicy")
    assert block.count("\n") == len(options.OFF_POLICY_ROWS) + 2


CORRECTIONS = [
    pytest.param(o, id=o.name) for o in options.OFF_POLICY_ROWS if o.kind == "correction"
]


@pytest.mark.slow
@pytest.mark.parametrize("o", CORRECTIONS)
def test_every_correction_row_reports_a_top_p_samplers_bias(o):
    """Under a top-p sampler (p = 0.8) at ratio one, μ never draws some of π_old's completions:
    no correction (TRL's token/sequence × truncate/mask included) is unbiased, each is named
    sampler-support, and the report says its mean estimates neither the policy's ∇J nor the
    cut sampler's own ∇J_μ, with its distance from each."""
    report = check(row_loss(o), sequence=True, off_policy=True, problem="ratio-one", top_p=0.8)
    (p,) = report.problems
    assert p.verdict == "biased" and p.diagnosis.startswith("sampler-support"), p.diagnosis
    cut = p.details["truncated_sampler"]
    assert cut["estimates"] == "neither" and cut["bias_policy"] > 0 and cut["uncovered"] > 0
    assert cut["sampler"] == {"top_k": None, "top_p": 0.8, "min_p": None}
