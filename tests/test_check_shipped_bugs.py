"""The bugs public trainers shipped in 2025–2026, named by ``check --sequence``.

``temperature-mismatch`` (sampled at τ, scored at 1), ``accumulation-scaled`` (micro-batched
losses divided never or twice), ``masked-tokens-in-normaliser`` (a token mean counting tokens
its numerator dropped): each example in examples/check/sequence/ is written from its formula,
and the check names it. The tempered problem's exact gradient is held against autograd of
J_τ summed over the enumeration, computed here without the θ/τ identity the check uses.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from eligibility import check
from eligibility.check.run import CheckConfig
from eligibility.check.sequence import named_scales, tempered, variants_of
from eligibility.check.shipped import SHIPPED, WRITTEN, markdown
from eligibility.lab.sequence.builtin import PROBLEMS

SEQ = "examples/check/sequence"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "check.md"
TABLES = {
    "shipped": (SHIPPED, "shipped in"),
    "written": (WRITTEN, "written as"),
}
"""docs/check.md's generated tables: ``<!-- check-NAME:start -->`` … ``:end -->``."""


def _j_tau(problem, tau):
    """J_τ(θ) = (1/Q) Σ_q Σ_o Πₜ softmax(zₜ/τ)[oₜ] R(q, o), a float64 torch sum (β = 0)."""
    t = problem.table
    model = problem.model64
    P, T = problem.prompts.shape[1], problem.max_completion_length
    completion = torch.as_tensor(t.completion_ids)
    ids = torch.cat([torch.as_tensor(problem.prompts[t.prompt]), completion], 1)
    logits = model(ids).logits[:, P - 1 : P + T - 1] / tau
    lp = torch.log_softmax(logits, -1).gather(-1, completion[..., None])
    logp = (lp.squeeze(-1) * torch.as_tensor(t.mask)).sum(1)
    return (logp.exp() * torch.as_tensor(t.reward)).sum() / len(problem.prompts)


@pytest.mark.parametrize("tau", [0.7, 1.0, 1.6])
def test_the_tempered_problems_gradient_is_autograds(tau):
    problem = PROBLEMS["length"]()
    assert float(_j_tau(problem, 1.0)) == pytest.approx(float(problem.J), rel=1e-10)
    params = list(problem.model64.parameters())
    grads = torch.autograd.grad(_j_tau(problem, tau), params)
    want = torch.cat([g.reshape(-1) for g in grads]).numpy()
    np.testing.assert_allclose(tempered(problem, tau).exact / tau, want, rtol=1e-7, atol=1e-12)


def test_the_named_constants_of_micro_batches():
    found = {c for name, c in named_scales(8, 5, 16, 2) if name == "accumulation-scaled"}
    assert found == {2.0, 0.5}
    assert not any("accumulation" in name for name, _ in named_scales(8, 5, 16, 1))


def test_the_sampler_and_mask_variants_appear_where_they_can_show():
    problem = PROBLEMS["length"]()
    model = {v.view for v in variants_of(problem, "model", tempered=True)}
    assert "temperature-mismatch" in model
    assert "temperature-mismatch" not in {v.view for v in variants_of(problem, "model")}
    masks = {v.mask: v.name for v in variants_of(problem, "logps") if v.mask != "completion"}
    assert masks["truncated-masked"].startswith("truncated-masked")
    assert "truncated-masked, masked-tokens-in-normaliser" in masks["truncated-in-normaliser"]


def test_the_settings_are_the_sequence_familys():
    with pytest.raises(ValueError, match="--temperature is not taken by the episodic check"):
        CheckConfig(temperature=0.9)
    with pytest.raises(ValueError, match="--micro-batches is not taken by the off-policy check"):
        CheckConfig(off_policy=True, micro_batches=2)
    with pytest.raises(ValueError, match="does not divide the 3 groups of problem difficulty"):
        check(f"{SEQ}/accumulation.py:loss", sequence=True, micro_batches=2, problem="difficulty")


@pytest.mark.usefixtures("check_calls_in_process")  # the same gradients, no worker round trips
def test_an_undivided_accumulation_is_named():
    """At N = 60: the mean 2 ∇J sits at a largest |z| of 16 from ∇J (seeds 0–2, t* = 4.7) and
    the fitted scale 1.0–1.4 standard errors from the known 2 (bound: t*)."""
    (p,) = check(
        f"{SEQ}/accumulation.py:undivided",
        sequence=True,
        micro_batches=2,
        problem="length",
        samples=60,
    ).problems
    assert (p.verdict, p.diagnosis) == ("scaled", "accumulation-scaled") and p.scale > 1.5


@pytest.mark.slow
@pytest.mark.parametrize("row", SHIPPED + WRITTEN, ids=[r.example for r in SHIPPED + WRITTEN])
def test_check_names_each_shipped_bug(row):
    """At the default N, on every problem of its row: the table's ``found``."""
    report = check(f"{SEQ}/{row.example}", sequence=True, problem=row.problems, **row.settings)
    assert {(p.verdict, p.diagnosis) for p in report.problems} == {row.found}, report.problems


@pytest.mark.slow
@pytest.mark.parametrize(
    "function, settings",
    [
        ("accumulation.py:loss", {"micro_batches": 2}),
        ("temperature.py:loss", {"form": "model", "temperature": 0.9}),
    ],
)
def test_the_correct_forms_beside_them_pass(function, settings):
    report = check(f"{SEQ}/{function}", sequence=True, problem="length,kl", **settings)
    assert report.unbiased, report.problems


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_docs_table_is_the_shipped_table(name):
    """docs/check.md's tables of shipped bugs and of mistakes as code is written are printed
    from eligibility.check.shipped; rewrite them with ``ELIGIBILITY_WRITE_DOCS=1``."""
    start, end = f"<!-- check-{name}:start -->", f"<!-- check-{name}:end -->"
    text = DOCS.read_text()
    block = f"{start}\n{markdown(*TABLES[name])}{end}"
    if os.environ.get("ELIGIBILITY_WRITE_DOCS"):
        head, _, rest = text.partition(start)
        DOCS.write_text(f"{head}{block}{rest.partition(end)[2]}")
        text = DOCS.read_text()
    assert block in text, f"docs/check.md's {name} table is stale"


@pytest.mark.slow
def test_a_correct_rloo_without_a_kl_passes_when_declared_so():
    """Issue 42: by default its kl problem reads kl-no-gradient; with kl="none" every problem
    left is unbiased (length, difficulty)."""
    strict = check(f"{SEQ}/rloo.py:no_kl", sequence=True, problem="kl")
    assert strict.problems[0].diagnosis == "kl-no-gradient"
    declared = check(f"{SEQ}/rloo.py:no_kl", sequence=True, kl="none")
    assert declared.passed and [p.problem for p in declared.problems] == ["length", "difficulty"]


def _example(name):
    from eligibility.check.user import load_function

    return load_function(f"{SEQ}/{name}")


@pytest.mark.parametrize("tau", [1.0, 0.9])
def test_the_new_variants_are_autograd_of_the_example_losses(tau):
    """On one batch of length: masked_tokens.py is its truncation variant, temperature.py's
    scored_at_one the temperature-mismatch view (τ = 0.9), both through the problem's model."""
    from dataclasses import replace

    from eligibility.check import sequence as seq
    from eligibility.lab.sequence.handed import policy_model
    from eligibility.lab.sequence.problem import Draw as Rows

    problem = PROBLEMS["length"]()
    config = CheckConfig(sequence=True, form="model", temperature=tau)
    _, checked, _, tables = seq._checked(problem, config)
    rows = seq._draw_rows(checked, 1, len(problem.prompts), np.random.default_rng(4))
    G = problem.group_size
    batch = checked.batch(
        Rows(prompts=problem.table.prompt[rows[0, ::G]], rows=rows[0], group_size=G)
    )
    batch = replace(batch, temperature=tau)
    params = list(problem.model.parameters())
    if tau != 1:
        cases = [("temperature.py:scored_at_one", "temperature-mismatch", "completion")]
    else:
        cases = [("masked_tokens.py:loss", "logps", "truncated-in-normaliser")]
    for example, view, mask in cases:
        if view == "temperature-mismatch":
            value = _example(example)(policy_model(problem.model, problem.eos_token_id), batch)
        else:
            value = _example(example)(problem.logps(batch), batch)
        want = -torch.cat([g.reshape(-1) for g in torch.autograd.grad(value, params)]).numpy()
        v = seq.Variant(view, "rloo", "none", "token-mean" if mask != "completion" else
                        "sequence-sum", "reward-to-go", mask=mask)  # fmt: skip
        got = seq.estimates(checked, tables, rows, [v])[0, 0]
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-6, err_msg=example)
