"""A KL term added to the loss apart from the policy term: computed as autograd computes it, and
named by the check.

A hand-written loss often aggregates its two terms apart: the policy term divided by each
completion's length, say, and ``beta * k.sum(1).mean()`` beside it. The variants of the
sequence family aggregate both terms by one row; where none of them is the user's estimator
batch by batch, the check computes the same variants with the KL aggregated apart
(``eligibility.check.sequence.apart``) and names the nearest that is. Truth: autograd through
the problem's model, a loss written as loops over sequences and tokens.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eligibility.check import check
from eligibility.check import sequence as seq
from eligibility.lab.sequence.builtin import PROBLEMS
from eligibility.lab.sequence.handed import policy_model
from eligibility.lab.sequence.problem import Draw as Rows


def plain_estimate(problem, batch, lsm, v: seq.Variant) -> np.ndarray:
    """ĝ = −∇θ of the variant's loss: RLOO on the tokens its mask keeps, by its aggregation,
    plus β times the KL of every completion token, by its own aggregation (loops); ``lsm`` the
    model's log-softmax on the batch."""
    P = batch.prompt_ids.shape[1]
    N, W = batch.completion_ids.shape
    G = batch.group_size
    ids, m = batch.input_ids, batch.completion_mask
    R = [float(x) for x in batch.rewards]
    kept, every = [], []  # per sequence: the policy term's tokens, the KL term's
    for i in range(N):
        tokens = [t for t in range(W) if m[i, t] > 0]
        every.append(tokens)
        eos = v.mask == "eos-masked"
        kept.append([t for t in tokens if not (eos and ids[i, P + t] == problem.eos_token_id)])

    def weight(name: str, rows: list[list[int]], i: int) -> float:
        return {
            "sequence-sum": 1 / N,
            "sequence-mean": 1 / (N * max(len(rows[i]), 1)),
            "token-mean": 1 / sum(len(r) for r in rows),
        }[name]

    loss = torch.zeros(())
    for i in range(N):
        group = [R[j] for j in range(i // G * G, i // G * G + G) if j != i]
        a = R[i] - sum(group) / len(group)
        for t in kept[i]:
            loss = loss - weight(v.aggregation, kept, i) * a * lsm[i, P - 1 + t, ids[i, P + t]]
        for t in every[i]:
            d = lsm[i, P - 1 + t, ids[i, P + t]] - batch.ref_logps[i, t]
            k = {"k1": d, "k3": torch.exp(-d) - 1 + d}[v.kl]
            loss = loss + batch.beta * weight(v.kl_aggregation, every, i) * k
    grads = torch.autograd.grad(loss, list(problem.model.parameters()), retain_graph=True)
    return -torch.cat([g.reshape(-1) for g in grads]).double().numpy()


def test_a_kl_aggregated_apart_is_autograd_through_the_model_token_by_token():
    """Every row of KL_APART, beside policy terms summed, ÷ length and ÷ the batch's tokens,
    with and without the EOS token in the policy term's mask (one batch)."""
    problem = PROBLEMS["kl"]()
    rows = seq._draw_rows(problem, 1, len(problem.prompts), np.random.default_rng(5))
    chosen = [
        seq.Variant("logps", "rloo", "none", agg, kl, mask, kl_aggregation=apart)
        for agg, kl, mask in [
            ("sequence-mean", "k1", "eos-masked"),
            ("token-mean", "k3", "completion"),
            ("sequence-sum", "k3", "completion"),
        ]
        for apart in seq.KL_APART
    ]
    got = seq.estimates(problem, seq.views(problem, ("logps",)), rows, chosen)
    G = problem.group_size
    for b in range(len(rows)):
        batch = problem.batch(
            Rows(prompts=problem.table.prompt[rows[b, ::G]], rows=rows[b], group_size=G)
        )
        problem.reset()
        model = policy_model(problem.model, problem.eos_token_id)
        lsm = torch.log_softmax(model(batch.input_ids).logits, dim=-1)
        for j, v in enumerate(chosen):
            want = plain_estimate(problem, batch, lsm, v)
            np.testing.assert_allclose(got[j, b], want, rtol=2e-4, atol=2e-6, err_msg=str(v))


def test_apart_leaves_out_what_the_family_holds_already():
    """One aggregation of both terms with no mask is the family's own variant: not again."""
    found = [
        seq.Variant("logps", "rloo", "none", "token-mean", "k3"),
        seq.Variant("logps", "rloo", "none", "token-mean", "k1", mask="eos-masked"),
        seq.Variant("logps", "rloo", "none", "token-mean", "reward-to-go", mask="eos-masked"),
    ]
    wide = seq.apart(found)
    assert {(v.kl, v.mask, v.kl_aggregation) for v in wide} == {
        ("k3", "completion", "sequence-sum"),
        ("k3", "completion", "sequence-mean"),
        ("k1", "eos-masked", "sequence-sum"),
        ("k1", "eos-masked", "sequence-mean"),
        ("k1", "eos-masked", "token-mean"),
    }  # a KL in the reward has no term of its own to aggregate
    names = {v.kl_aggregation: v.name for v in wide if v.kl == "k1"}
    assert names == {
        "sequence-sum": "eos-masked, batch-dependent-normaliser, kl-no-gradient",
        "sequence-mean": "eos-masked, batch-dependent-normaliser, kl-no-gradient, kl-normalised",
        "token-mean": "eos-masked, batch-dependent-normaliser, kl-no-gradient, kl-normalised",
    }


LOSSES = """
def _rloo(r, G):
    r = r.view(-1, G)
    return (r - (r.sum(dim=1, keepdim=True) - r) / (G - 1)).reshape(-1)


def _k3(logps, batch):
    d = logps - batch.ref_logps
    return (d.neg().exp() - 1 + d) * batch.completion_mask


def per_length_and_summed_kl(logps, batch):
    m = batch.completion_mask
    a = _rloo(batch.rewards, batch.group_size)
    pg = -(a * (logps * m).sum(1) / m.sum(1)).mean()
    return pg + batch.beta * _k3(logps, batch).sum(1).mean()


def summed_and_token_mean_kl(logps, batch):
    m = batch.completion_mask
    pg = -(_rloo(batch.rewards, batch.group_size) * (logps * m).sum(1)).mean()
    return pg + batch.beta * _k3(logps, batch).sum() / m.sum()
"""


@pytest.mark.usefixtures("check_calls_in_process")  # the same gradients, no worker's round trips
@pytest.mark.parametrize(
    "fn, names",
    [
        ("per_length_and_summed_kl", "length-normalised, kl-forward"),
        ("summed_and_token_mean_kl", "kl-forward, kl-normalised"),
    ],
)
def test_a_kl_added_apart_is_named(tmp_path, fn, names):
    """Each loss's mean is far from ∇J at N = 60 (max |z| 35–42 and 9.2–16 on seeds 0–2, t*
    4.51), and the variant with its KL aggregated apart is its estimator batch by batch; no
    variant of one aggregation is (both read ``biased``, ``other``, without them)."""
    path = tmp_path / "losses.py"
    path.write_text(LOSSES)
    report = check(f"{path}:{fn}", sequence=True, problem="kl", samples=60)
    (p,) = report.problems
    assert (p.verdict, p.diagnosis) == ("biased", names), (p.max_abs_z, p.threshold)
