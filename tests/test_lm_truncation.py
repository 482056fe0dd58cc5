"""Sampling as engines sample (``lm.truncation``), the sampler–trainer mismatch (``lm.mismatch``).

Truths we did not write: ``transformers``' own logits processors for the kept set and the
penalty; a plain loop (one row, one step, the model's full forward, Python lists) for the
sampler; exact enumeration of a 2-step problem with autograd for the gradient.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import torch

from eligibility.lm import objective
from eligibility.lm.config import FinetuneConfig
from eligibility.lm.edge.model import TinyLM
from eligibility.lm.metrics import SCHEMA
from eligibility.lm.mismatch import WARN_OUTSIDE, mismatch
from eligibility.lm.sample import (
    Completions,
    left_pad,
    sample,
    token_logps,
    truncated_token_logps,
)
from eligibility.lm.tasks import EOS
from eligibility.lm.trainer import finetune
from eligibility.lm.truncation import Sampling, kept_set, penalised, step, truncated_logps
from eligibility.lm.watches import Watches

SETTINGS = [
    dict(top_k=3),
    dict(top_p=0.7),
    dict(min_p=0.2),
    dict(top_k=5, top_p=0.8, min_p=0.1),
    dict(top_k=40, top_p=0.95),
]


def _plain_kept(z: list[float], top_k=0, top_p=1.0, min_p=None) -> set[int]:
    """The kept set of one row by hand: sorted descending, each rule on the survivors."""
    order = sorted(range(len(z)), key=lambda v: -z[v])
    alive = order[:top_k] if top_k else order
    if top_p < 1.0:
        w = [math.exp(z[v]) for v in alive]
        total, mass, keep = sum(w), 0.0, []
        for v, wv in zip(alive, w, strict=True):
            if mass >= top_p * total:  # the larger tokens already hold p
                break
            keep.append(v)
            mass += wv
        alive = keep
    if min_p is not None:
        top = max(math.exp(z[v]) for v in alive)
        alive = [v for v in alive if math.exp(z[v]) >= min_p * top]
    return set(alive)


@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_the_kept_set_is_transformers_warpers_and_a_plain_loop(setting):
    from transformers.generation.logits_process import (
        MinPLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    g = torch.Generator().manual_seed(0)
    z = torch.randn(6, 50, generator=g, dtype=torch.float64) * 2
    ours = kept_set(z, **setting)
    hf = z.clone()
    if setting.get("top_k"):
        hf = TopKLogitsWarper(setting["top_k"])(None, hf)
    if setting.get("top_p", 1.0) < 1:
        hf = TopPLogitsWarper(setting["top_p"])(None, hf)
    if setting.get("min_p") is not None:
        hf = MinPLogitsWarper(setting["min_p"])(None, hf)
    assert torch.equal(ours, torch.isfinite(hf))
    for row in range(z.shape[0]):
        assert set(ours[row].nonzero()[:, 0].tolist()) == _plain_kept(z[row].tolist(), **setting)


def test_the_repetition_penalty_is_transformers():
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    z = torch.randn(3, 20, generator=torch.Generator().manual_seed(1))
    ids = torch.tensor([[1, 4, 4, 7], [0, 2, 3, 19], [5, 5, 5, 5]])
    seen = torch.zeros(3, 20, dtype=torch.bool).scatter(1, ids, True)
    theirs = RepetitionPenaltyLogitsProcessor(1.7)(ids, z.clone())
    torch.testing.assert_close(penalised(z, seen, 1.7), theirs, rtol=0, atol=0)


def _plain_sample(model, prompts, v, t_max, tau, s: Sampling, uniforms):
    """One row at a time, one step at a time, the model's full forward: tokens, ln π̃, ln π_τ."""
    rows = []
    for i, prompt in enumerate(prompts):
        seq, toks, lps, raws = list(prompt), [], [], []
        for t in range(t_max):
            z = model(torch.tensor([seq])).logits[0, -1, :v].double()
            raw = (z / tau).log_softmax(-1)
            seen = set(seq)
            zp = [
                (z[u] / s.repetition_penalty if z[u] > 0 else z[u] * s.repetition_penalty)
                if u in seen
                else z[u]
                for u in range(v)
            ]
            zt = [float(x) / tau for x in zp]
            keep = sorted(_plain_kept(zt, s.top_k, s.top_p, s.min_p))
            w = {u: math.exp(zt[u]) for u in keep}
            total = sum(w.values())
            cdf, tok = 0.0, keep[-1]
            for u in range(v):  # the first token whose running mass reaches u · total
                cdf += w.get(u, 0.0)
                if u in w and cdf >= uniforms[t][i] * total:
                    tok = u
                    break
            toks.append(tok)
            lps.append(math.log(w[tok] / total))
            raws.append(float(raw[tok]))
            seq.append(tok)
            if tok == EOS:
                break
        rows.append((toks, lps, raws))
    return rows


PROCESSED = [
    dict(top_k=3),
    dict(top_p=0.6, repetition_penalty=1.5),
    dict(top_k=4, min_p=0.3, repetition_penalty=0.8),
]


@pytest.mark.parametrize("setting", PROCESSED, ids=str)
def test_the_sampler_equals_a_plain_loop_with_the_same_truncation(setting):
    torch.manual_seed(0)
    v, t_max, tau = 9, 5, 0.8
    model = TinyLM(vocab_size=v, d_model=16, n_head=2, n_layer=1, max_positions=16).double()
    prompts = [[3, 4, 5], [6, 2], [3, 4, 5], [7, 7, 8, 2]]
    s = Sampling(**setting)
    batch = sample(model, prompts, vocab_size=v, max_new_tokens=t_max, temperature=tau,
                   rng=np.random.default_rng(5), sampling=s)  # fmt: skip
    draws = np.random.default_rng(5)
    uniforms = [draws.random(len(prompts)) for _ in range(t_max)]
    with torch.no_grad():
        plain = _plain_sample(model, prompts, v, t_max, tau, s, uniforms)
    for i, (toks, lps, raws) in enumerate(plain):
        n = len(toks)
        assert batch.completion_ids[i, :n].tolist() == toks
        assert int(batch.lengths[i]) == n
        torch.testing.assert_close(
            batch.logps[i, :n].double(), torch.tensor(lps, dtype=torch.float64), rtol=0, atol=1e-5
        )
        torch.testing.assert_close(
            batch.raw_logps[i, :n].double(),
            torch.tensor(raws, dtype=torch.float64),
            rtol=0,
            atol=1e-5,
        )
    # the scorer reproduces the sampler's kept sets: the same ln π̃, no token outside them
    scored = truncated_token_logps(model, batch, vocab_size=v, temperature=tau, sampling=s)
    torch.testing.assert_close(scored.logps, batch.logps.to(scored.logps.dtype), rtol=0, atol=1e-5)
    assert not scored.outside.any()


def _rewards():
    return {(EOS,): 0.3, (2, EOS): 1.0, (2, 3): -0.5, (3, 2): 0.7, (3, EOS): -1.0, (1, 1): 2.0}


def _batch(model, prompt, seqs, v, tau, s):
    """Completions of ``prompt`` with the sizes the sampler would record (its own step)."""
    ids, pmask = left_pad([prompt] * len(seqs))
    t = max(len(o) for o in seqs)
    comp = torch.full((len(seqs), t), EOS)
    cmask = torch.zeros(len(seqs), t, dtype=torch.long)
    sizes = torch.zeros(len(seqs), t, dtype=torch.long)
    with torch.no_grad():
        for i, o in enumerate(seqs):
            comp[i, : len(o)], cmask[i, : len(o)] = torch.tensor(o), 1
            for j in range(len(o)):
                ctx = torch.tensor([prompt + list(o[:j])])
                z = model(ctx).logits[:, -1, :v]
                seen = torch.zeros(1, v, dtype=torch.bool)
                seen[0, ctx[0]] = True
                sizes[i, j] = step(z, seen, tau, s)[1][0]
    zeros = torch.zeros(len(seqs), t)
    return Completions(ids, pmask, comp, cmask, zeros, comp[:, -1] == EOS, kept_sizes=sizes)


def _exact_objective(model, prompt, v, tau, s, truncate: bool):
    """J(θ) = Σₒ π(o) R(o) by enumeration of every completion of ≤ 2 tokens (plain loop)."""
    j = torch.zeros((), dtype=torch.float64)
    probs = {}
    for o1 in range(v):
        for o in [(o1,)] if o1 == EOS else [(o1, o2) for o2 in range(v)]:
            p = torch.ones((), dtype=torch.float64)
            for k in range(len(o)):
                ctx = prompt + list(o[:k])
                z = model(torch.tensor([ctx])).logits[0, -1, :v].double()
                if truncate:  # the kept set is a constant of θ: found with no gradient
                    seen = set(ctx)
                    zp = torch.where(torch.tensor([u in seen for u in range(v)]),
                                     torch.where(z > 0, z / s.repetition_penalty,
                                                 z * s.repetition_penalty), z)  # fmt: skip
                    keep = _plain_kept((zp / tau).tolist(), s.top_k, s.top_p, s.min_p)
                    mask = torch.tensor([u in keep for u in range(v)])
                    p = p * (zp / tau).masked_fill(~mask, -math.inf).softmax(-1)[o[k]]
                else:
                    p = p * (z / tau).softmax(-1)[o[k]]
            probs[o] = p
            j = j + p * _rewards().get(o, 0.0)
    return j, probs


@pytest.mark.parametrize("setting", [dict(top_k=2, repetition_penalty=1.5), dict(top_p=0.6)],
                         ids=str)  # fmt: skip
def test_the_losss_expected_gradient_is_the_exact_gradient_of_the_truncated_policy(setting):
    """E over pairs o, o′ ~ π̃ (a group of G = 2, RLOO) of ∇ loss = −∇ J̃, J̃ = Σₒ π̃(o) R(o) by
    enumeration (V = 4, T_max = 2); the untruncated scorer's expected gradient is not."""
    torch.manual_seed(3)
    v, tau, prompt = 4, 0.9, [2, 3]
    model = TinyLM(vocab_size=v, d_model=8, n_head=2, n_layer=1, max_positions=8).double()
    params = list(model.parameters())
    s = Sampling(**setting)
    j, probs = _exact_objective(model, prompt, v, tau, s, truncate=True)
    exact = torch.autograd.grad(j, params)
    support = [o for o, p in probs.items() if p > 0]
    assert 2 <= len(support) < len(probs)  # the truncation cut something

    batch = _batch(model, prompt, support, v, tau, s)  # each completion once, scored at once
    r = torch.tensor([_rewards().get(o, 0.0) for o in support], dtype=torch.float64)

    def expected(sampling):  # ∇ Σ over pairs of π̃(o)π̃(o′) · the pair's loss (a group of 2)
        ell = token_logps(model, batch, vocab_size=v, temperature=tau, sampling=sampling)
        total = torch.zeros((), dtype=torch.float64)
        for (i, a), (k, b) in itertools.product(enumerate(support), repeat=2):
            w = float((probs[a] * probs[b]).detach())
            two = [i, k]
            loss, _ = objective.loss(ell[two], r[two], batch.completion_mask[two], group_size=2,
                                     baseline="rloo", scale="none", aggregation="sequence-sum",
                                     max_completion_length=2, kl="none", beta=0.0,
                                     ref_logps=None)  # fmt: skip
            total = total + w * loss
        return torch.autograd.grad(total, params)

    for got, want in zip(expected(s), exact, strict=True):
        torch.testing.assert_close(got, -want, rtol=1e-9, atol=1e-12)
    biased = expected(None)  # the full π_τ's log-probs on the truncated samples
    gap = sum(float((g + w).abs().sum()) for g, w in zip(biased, exact, strict=True))
    assert gap > 1e-3


def test_the_mismatch_columns_are_a_plain_loops_and_warn_once_naming_dtype():
    scored = torch.tensor([[0.0, -1.0, -2.0], [-0.5, -0.2, 0.0]])
    sampled = torch.tensor([[0.05, -1.0, -1.0], [-0.5, -0.9, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    got = mismatch(scored, sampled, mask)
    a, b, m = (x.flatten().tolist() for x in (scored, sampled, mask))
    rho = [math.exp(a[k] - b[k]) for k in range(len(a)) if m[k]]
    seq = [math.exp(-0.05 + 0 - 1.0), math.exp(0 + 0.7)]
    assert got["sampling/ratio/mean"] == pytest.approx(sum(rho) / 5)
    assert (got["sampling/ratio/min"], got["sampling/ratio/max"]) == pytest.approx(
        (min(rho), max(rho))
    )
    assert got["sampling/ratio/outside_0.9_1.1"] == pytest.approx(2 / 5)  # e^−1 and e^0.7
    assert got["sampling/ratio/outside_0.5_2"] == pytest.approx(2 / 5)
    assert got["sampling/sequence_ratio/min"] == pytest.approx(min(seq))
    assert got["sampling/sequence_ratio/max"] == pytest.approx(max(seq))
    assert got["sampling/outside_kept"] == 0.0
    assert set(mismatch(None, sampled, mask).values()) == {None}
    config = FinetuneConfig("repeat", dtype="bfloat16", importance_sampling="none")
    w = Watches()
    with pytest.warns(RuntimeWarning, match=r"40.0% .* outside \[0.9, 1.1\].*--dtype bfloat16"):
        w.check_mismatch(config, got, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w.check_mismatch(config, got, 4)  # once
        Watches().check_mismatch(config, {"sampling/ratio/outside_0.9_1.1": WARN_OUTSIDE}, 1)


def test_a_run_with_truncation_logs_the_mismatch_every_scored_update_and_checks_its_options():
    kw = dict(max_updates=2, d_model=8, n_head=2, n_layer=1, group_size=4, prompts_per_batch=2,
              max_completion_length=4, eval_every=0, progress=False)  # fmt: skip
    kw["target_accuracy"] = None
    for extra in (dict(), dict(top_p=0.8, repetition_penalty=1.2, micro_batch_size=3)):
        result = finetune(FinetuneConfig("repeat", **kw, **extra))
        for row in result.history:  # float32, one kernel: the two passes agree
            assert row["sampling/ratio/min"] == pytest.approx(1.0, abs=1e-5)
            assert row["sampling/ratio/max"] == pytest.approx(1.0, abs=1e-5)
            assert row["sampling/outside_kept"] == 0.0
    bad_values = {"top_p": 0.0, "top_k": -1, "min_p": 1.5, "repetition_penalty": 0}
    for name, value in bad_values.items():
        flag = "--" + name.replace("_", "-")
        with pytest.raises(ValueError, match=flag):
            FinetuneConfig("repeat", **{name: value})


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_transformers_model_samples_truncated_and_measures_its_mismatch(dtype):
    """A Llama through the edge's direct forward, top-p, top-k and the penalty: the scorer keeps
    every sampled token in its kept set and the mismatch is measured (not assumed) in each dtype."""
    kw = dict(model="lm_user.rewards:tiny_llama", dtype=dtype, max_updates=2, group_size=4,
              prompts_per_batch=2, max_completion_length=6, eval_every=0, progress=False,
              beta=0.02, top_p=0.9, top_k=10, repetition_penalty=1.2)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' deprecations
        result = finetune(FinetuneConfig("repeat", target_accuracy=None, **kw))
    for row in result.history:
        assert 0.99 < row["sampling/ratio/min"] <= row["sampling/ratio/mean"]
        assert row["sampling/ratio/mean"] <= row["sampling/ratio/max"] < 1.01
        assert row["sampling/ratio/outside_0.9_1.1"] == 0.0
        assert row["sampling/outside_kept"] == 0.0


def test_a_sampled_token_outside_the_scorers_kept_set_is_added_and_counted():
    """The scorer's logits rank the sampled token (2) third where the sampler kept 2 tokens:
    its set is its top 2 and the token, ln π̃ finite, and the token counted outside."""
    z = torch.tensor([[[3.0, 2.0, 1.9, -1.0]]], requires_grad=True)
    tokens, sizes = torch.tensor([[2]]), torch.tensor([[2]])
    lp, raw, outside = truncated_logps(z, tokens, sizes, 1.0, Sampling(top_k=2))
    want = 1.9 - torch.tensor([3.0, 2.0, 1.9]).logsumexp(0)
    torch.testing.assert_close(lp[0, 0], want)
    torch.testing.assert_close(raw[0, 0], 1.9 - z[0, 0].detach().logsumexp(0))
    assert outside.tolist() == [[True]]
    inside = truncated_logps(z, torch.tensor([[1]]), sizes, 1.0, Sampling(top_k=2))
    torch.testing.assert_close(inside[0][0, 0], 2.0 - torch.tensor([3.0, 2.0]).logsumexp(0))
    assert inside[2].tolist() == [[False]]


def test_finetune_refuses_a_bad_sampling_option_on_one_line(capsys):
    from eligibility.cli import main

    assert main(["finetune", "repeat", "--top-p", "1.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "top_p (--top-p) must be in (0, 1]" in err


def test_a_truncated_run_stopped_and_resumed_logs_the_uninterrupted_runs_rows(tmp_path):
    """The sampler's draws are the run's generator's (one uniform a row and step, as without
    truncation): a checkpoint restores them, and the kept sets follow."""
    from eligibility import runs

    kw = dict(max_updates=4, d_model=8, n_head=2, n_layer=1, group_size=4, prompts_per_batch=2,
              max_completion_length=4, eval_every=0, checkpoint_every=2, progress=False,
              top_p=0.8, top_k=5, repetition_penalty=1.3)  # fmt: skip
    kw["target_accuracy"] = None
    finetune(FinetuneConfig("repeat", **kw, out=str(tmp_path / "whole")))
    finetune(FinetuneConfig("repeat", **kw, out=str(tmp_path / "cut")), callback=lambda r: False)
    finetune(FinetuneConfig("repeat", **kw), resume=tmp_path / "cut")

    def rows(name):
        timing = SCHEMA.timing
        return [
            {k: v for k, v in r.items() if k not in timing}
            for r in runs.read_metrics(tmp_path / name)
        ]

    assert rows("cut") == rows("whole") and len(rows("whole")) == 4
