"""The full policy trained on the sampler's samples with TRL's importance weight (lm.importance).

Truths we did not write: a plain loop (Python floats, ``math.exp``) for the weight; exact
enumeration of a 2-step problem, the sampler's distribution q built with ``transformers``' own
logits processors, and autograd on the model's full forward for ∇ ln π, for the expected
gradient of the loss under each mode.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from eligibility.lm import objective
from eligibility.lm.config import FinetuneConfig
from eligibility.lm.edge.model import TinyLM
from eligibility.lm.importance import MODES, importance_weight
from eligibility.lm.sample import Completions, left_pad, sample, token_logps
from eligibility.lm.tasks import EOS
from eligibility.lm.trainer import finetune

WEIGHTED = [m for m in MODES if m != "none"]
LOSS = dict(group_size=2, baseline="rloo", scale="none", aggregation="sequence-sum",
            max_completion_length=2, kl="none", beta=0.0, ref_logps=None)  # fmt: skip


def _one_weight(token, t, mode, cap):
    """w̃ of token t of a sequence whose tokens' weights are ``token``, by the mode's rule."""
    whole = math.prod(token)
    if mode == "exact":  # the sequence weight, no bound
        return whole
    if mode in ("token-icepop", "geometric-mask"):  # kept in [1/C, C]
        w = token[t] if mode == "token-icepop" else whole
        gate = token[t] if mode == "token-icepop" else whole ** (1 / len(token))
        return w if 1 / cap <= gate <= cap else 0.0
    w = token[t] if mode.startswith("token") else whole
    return min(w, cap) if mode.endswith("truncate") else (w if w <= cap else 0.0)


def _plain_weight(lp, lq, m, mode, cap):
    """w̃ of one batch by hand: nested lists, ``math.exp``, the product over a row's tokens."""
    out = []
    for lp_i, lq_i, m_i in zip(lp, lq, m, strict=True):
        token = [math.exp(a - b) for a, b, k in zip(lp_i, lq_i, m_i, strict=True) if k]
        row = []
        for t, real in enumerate(m_i):
            if not real:
                row.append(None)
                continue
            row.append(_one_weight(token, sum(m_i[:t]), mode, cap))
        out.append(row)
    return out


@pytest.mark.parametrize("mode", WEIGHTED)
@pytest.mark.parametrize("cap", [0.7, 1.3, math.inf])
def test_the_weight_is_a_plain_loop(mode, cap):
    g = torch.Generator().manual_seed(0)
    lp = (-torch.rand(5, 4, generator=g, dtype=torch.float64) * 2).requires_grad_()
    lq = lp.detach() + torch.randn(5, 4, generator=g, dtype=torch.float64) * 0.4
    m = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    if cap < 1 and MODES[mode][0] == "band":  # [1/C, C] holds nothing
        with pytest.raises(ValueError, match=r"\[1/C, C\]"):
            importance_weight(lp, lq, m, mode, cap)
        return
    got = importance_weight(lp, lq, m, mode, cap)
    assert got.shape == lp.shape and not got.requires_grad
    want = _plain_weight(lp.tolist(), lq.tolist(), m.tolist(), mode, cap)
    for i, row in enumerate(want):
        for t, w in enumerate(row):
            if w is not None:
                assert float(got[i, t]) == pytest.approx(w, rel=1e-12, abs=0)
    bites = [w for row in want for w in row if w is not None]
    if cap == 0.7 and mode != "exact":  # the cap acts on this batch: truncated to C or masked to 0
        assert (0.7 in bites) if mode.endswith("truncate") else (0.0 in bites)


def test_a_bad_mode_or_cap_is_a_value_error_naming_it():
    lp = torch.zeros(2, 3)
    for mode in ("none", "token_mask", "tis"):
        with pytest.raises(ValueError, match="importance_sampling must be one of"):
            importance_weight(lp, lp, torch.ones(2, 3), mode, 3.0)
    for cap in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="importance_sampling_cap must be > 0"):
            importance_weight(lp, lp, torch.ones(2, 3), "token-mask", cap)
    with pytest.raises(ValueError, match="needs sampler_logps"):
        objective.loss(lp, torch.zeros(2), torch.ones(2, 3), **LOSS,
                       importance_sampling="token-mask")  # fmt: skip


# -- the exact oracle: a 2-step problem, every completion enumerated --

V, TAU, PROMPT = 4, 0.9, [2, 3]
REWARD = {(EOS,): 0.3, (2, EOS): 1.0, (2, 3): -0.5, (3, 2): 0.7, (3, EOS): -1.0, (1, 1): 2.0}


def _completions():
    return [(EOS,)] + [(a, b) for a in range(1, V) for b in range(V)]


def _q_processors(setting):
    """The sampler's processing as ``transformers``' own processors (penalty, top-k, top-p)."""
    from transformers.generation.logits_process import (
        RepetitionPenaltyLogitsProcessor,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    steps = []
    if setting.get("repetition_penalty", 1.0) != 1.0:
        steps.append(RepetitionPenaltyLogitsProcessor(setting["repetition_penalty"]))
    steps.append(lambda ids, z: z / TAU)
    if setting.get("top_k"):
        steps.append(TopKLogitsWarper(setting["top_k"]))
    if setting.get("top_p", 1.0) < 1.0:
        steps.append(TopPLogitsWarper(setting["top_p"]))
    return steps


def _enumerated(model, setting):
    """Per completion o: ([ln π(oₜ)] differentiable, [ln q(oₜ)] floats), by a plain loop."""
    out = {}
    for o in _completions():
        lp, lq = [], []
        for t in range(len(o)):
            ctx = torch.tensor([PROMPT + list(o[:t])])
            z = model(ctx).logits[0, -1, :V].double()
            lp.append((z / TAU).log_softmax(-1)[o[t]])
            zq = z.detach()[None]
            for f in _q_processors(setting):
                zq = f(ctx, zq)
            lq.append(float(zq[0].log_softmax(-1)[o[t]]))
        out[o] = (lp, lq)
    return out


def _batch(seqs):
    ids, pmask = left_pad([PROMPT] * len(seqs))
    comp = torch.full((len(seqs), 2), EOS)
    cmask = torch.zeros(len(seqs), 2, dtype=torch.long)
    for i, o in enumerate(seqs):
        comp[i, : len(o)], cmask[i, : len(o)] = torch.tensor(o), 1
    return Completions(ids, pmask, comp, cmask, torch.zeros(len(seqs), 2), comp[:, -1] == EOS)


def _derived(params, table, support, q, mode, cap):
    """−Σ_o q(o) (R(o) − R̄_q) Σₜ w̃ₜ(o) ∇ln π(oₜ): RLOO's expectation, the weight by hand."""
    mean_r = sum(q[o] * REWARD.get(o, 0.0) for o in support)
    total = torch.zeros((), dtype=torch.float64)  # Σ c ℓ with constant c: its gradient Σ c ∇ℓ
    for o in support:
        lp, lq = table[o]
        token = [math.exp(float(a.detach()) - b) for a, b in zip(lp, lq, strict=True)]
        for t in range(len(o)):
            w = _one_weight(token, t, mode, cap) if mode != "none" else 1.0
            coef = -q[o] * (REWARD.get(o, 0.0) - mean_r) * (w if mode != "none" else 1.0)
            total = total + coef * lp[t]
    return torch.autograd.grad(total, params, retain_graph=True)


@pytest.mark.parametrize("setting", [dict(top_k=2, repetition_penalty=1.5), dict(top_p=0.6)],
                         ids=str)  # fmt: skip
def test_each_modes_expected_gradient_is_its_derived_value(setting):
    """E over pairs o, o′ ~ q (G = 2, RLOO) of ∇ loss, the loss on the full π's log-probs with
    q's as the sampler's, equals −Σ_o q(o) w̃ (R − R̄_q) ∇ln π at 1e-9 for every mode and cap;
    the exact weight is the full policy's gradient on q's support only (``sampler-support``)."""
    torch.manual_seed(3)
    model = TinyLM(vocab_size=V, d_model=8, n_head=2, n_layer=1, max_positions=8).double()
    params = list(model.parameters())
    table = _enumerated(model, setting)
    q = {o: math.exp(sum(lq)) for o, (_, lq) in table.items()}
    assert sum(q.values()) == pytest.approx(1.0, abs=1e-12)
    support = [o for o in q if q[o] > 0]
    assert 2 <= len(support) < len(q)  # the sampler cut something
    pairs = list(itertools.product(support, repeat=2))
    batch = _batch([o for pair in pairs for o in pair])  # every pair's rows, scored at once
    ell = token_logps(model, batch, vocab_size=V, temperature=TAU)
    lq = torch.zeros_like(ell.detach())
    for i, o in enumerate(o for pair in pairs for o in pair):
        lq[i, : len(o)] = torch.tensor(table[o][1], dtype=torch.float64)
    r = torch.tensor([REWARD.get(o, 0.0) for pair in pairs for o in pair], dtype=torch.float64)

    def expected(mode, cap):  # Σ over pairs of q(o)q(o′) · the pair's loss (a group of 2)
        total = torch.zeros((), dtype=torch.float64)
        for k, (a, b) in enumerate(pairs):
            two = slice(2 * k, 2 * k + 2)
            loss, _ = objective.loss(ell[two], r[two], batch.completion_mask[two], **LOSS,
                                     importance_sampling=mode, importance_sampling_cap=cap,
                                     sampler_logps=lq[two])  # fmt: skip
            total = total + q[a] * q[b] * loss
        return torch.autograd.grad(total, params, retain_graph=True)

    token = {o: [math.exp(float(a.detach()) - b) for a, b in zip(*table[o], strict=True)]
             for o in support}  # fmt: skip
    levels = {"token": [w for ws in token.values() for w in ws],
              "sequence": [math.prod(ws) for ws in token.values()]}  # fmt: skip
    caps = {k: (min(ws) + max(ws)) / 2 for k, ws in levels.items()}  # some above, some below
    if "repetition_penalty" not in setting:  # a cut in one precision: w is the mass kept, ≤ 1
        assert max(levels["token"]) <= 1.0 and max(levels["sequence"]) <= 1.0
    seen = {}
    for mode in ["none", *WEIGHTED]:
        bounded = mode.split("-")[0] in caps and MODES[mode][0] != "band"  # the bands: C ≥ 1
        for cap in (
            (caps[mode.split("-")[0]] if bounded else 2.0, math.inf) if mode != "none" else (3.0,)
        ):
            got = expected(mode, cap)
            for g, want in zip(got, _derived(params, table, support, q, mode, cap), strict=True):
                torch.testing.assert_close(g, want, rtol=1e-9, atol=1e-12, msg=f"{mode} {cap}")
            seen[mode, cap] = torch.cat([g.flatten() for g in got])
    for level, cap in caps.items():  # the cap bites on this problem: the two differ
        cut, masked = seen[f"{level}-truncate", cap], seen[f"{level}-mask", cap]
        assert float((cut - masked).abs().max()) > 1e-6
    # the exact weight π/q: the full policy's gradient restricted to q's support, not its own
    j = sum(torch.stack(table[o][0]).sum().exp() * REWARD.get(o, 0.0) for o in table)
    full = torch.cat([g.flatten() for g in torch.autograd.grad(j, params, retain_graph=True)])
    assert float((seen["sequence-truncate", math.inf] + full).abs().max()) > 1e-3


def test_a_sampler_of_the_full_policy_in_its_precision_gives_every_mode_the_default():
    """q = π (no processing): w = 1, so every mode's gradient is the default's, batch by batch;
    with the sampler's own record of ln q (float32 of a float64 model) within its rounding."""
    torch.manual_seed(0)
    model = TinyLM(vocab_size=6, d_model=8, n_head=2, n_layer=1, max_positions=12).double()
    batch = sample(model, [[2, 3]] * 4 + [[4]] * 4, vocab_size=6, max_new_tokens=4,
                   temperature=0.9, rng=np.random.default_rng(1))  # fmt: skip
    r = torch.tensor([1.0, 0.0, 0.5, 2.0, -1.0, 0.0, 0.3, 0.3], dtype=torch.float64)
    kw = dict(LOSS, group_size=4, max_completion_length=4)

    def grad(mode, cap=3.0, sampled=None):
        ell = token_logps(model, batch, vocab_size=6, temperature=0.9)
        q = ell.detach() if sampled is None else sampled
        loss, _ = objective.loss(
            ell,
            r,
            batch.completion_mask,
            **kw,
            sampler_logps=q,
            importance_sampling=mode,
            importance_sampling_cap=cap,
        )
        return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(model.parameters()))])

    default = grad("none")
    assert float(default.abs().max()) > 1e-3
    for mode, cap in itertools.product(WEIGHTED, (1.0, 3.0)):
        torch.testing.assert_close(grad(mode, cap), default, rtol=1e-12, atol=1e-15)
        recorded = grad(mode, 1.0 + 1e-6, batch.logps)
        torch.testing.assert_close(recorded, default, rtol=1e-5, atol=1e-7)


def test_a_further_step_at_the_sampling_weights_is_the_first_steps_gradient():
    """``reuse_loss`` weights by π_old/q as ``loss`` does by π/q: at θ = θ_old the two agree."""
    g = torch.Generator().manual_seed(2)
    z = torch.randn(4, 3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    tokens = torch.randint(0, 5, (4, 3), generator=g)
    ell = z.log_softmax(-1).gather(-1, tokens[..., None])[..., 0]
    lq = ell.detach() + 0.3 * torch.randn(4, 3, generator=g, dtype=torch.float64)
    m = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]])
    r = torch.tensor([1.0, 0.0, 0.5, 2.0], dtype=torch.float64)
    kw = dict(LOSS, max_completion_length=3, importance_sampling_cap=1.2, sampler_logps=lq)
    for mode in WEIGHTED:
        first = torch.autograd.grad(objective.loss(ell, r, m, **kw, importance_sampling=mode)[0],
                                    z, retain_graph=True)[0]  # fmt: skip
        again = objective.reuse_loss(ell, ell.detach(), r, m, **kw, importance_sampling=mode,
                                     ratio="sequence", clip=None)[0]  # fmt: skip
        torch.testing.assert_close(torch.autograd.grad(again, z, retain_graph=True)[0], first)


# -- the run and the command line --

RUN = dict(max_updates=1, d_model=8, n_head=2, n_layer=1, group_size=4, prompts_per_batch=2,
           max_completion_length=4, eval_every=0, progress=False, target_accuracy=None,
           top_k=3)  # fmt: skip


def test_a_run_with_a_mode_scores_the_full_policy_on_the_same_samples():
    """The same seed draws the same batch; with a mode the scorer's log-probs are the full π_τ's,
    below the truncated ones (the entropy column, −mean ℓ, is higher), the mismatch still ~1."""
    plain = finetune(FinetuneConfig("repeat", **RUN)).history[0]
    full = finetune(FinetuneConfig("repeat", **RUN, importance_sampling="sequence-mask")).history[0]
    assert full["completions"] == plain["completions"] and full["tokens"] == plain["tokens"]
    assert full["entropy"] > plain["entropy"] + 1e-3
    assert full["sampling/ratio/min"] == pytest.approx(1.0, abs=1e-5)
    assert full["sampling/ratio/max"] == pytest.approx(1.0, abs=1e-5)


def test_the_cli_runs_a_mode_and_refuses_a_bad_one_on_one_line(tmp_path, capsys):
    from eligibility import runs
    from eligibility.cli import main

    args = ["finetune", "repeat", "--max-updates", "1", "--d-model", "8", "--n-head", "2",
            "--n-layer", "1", "--group-size", "4", "--prompts-per-batch", "2",
            "--max-completion-length", "4", "--eval-every", "0", "--target-accuracy", "none",
            "--top-p", "0.8", "--no-progress"]  # fmt: skip
    out = tmp_path / "run"
    assert main([*args, "--out", str(out), "--vllm_importance_sampling_mode", "token_truncate",
                 "--importance-sampling-cap", "2"]) == 0  # fmt: skip
    saved = runs.load_config(out, FinetuneConfig)
    assert (saved.importance_sampling, saved.importance_sampling_cap) == ("token-truncate", 2.0)
    assert len(runs.read_metrics(out)) == 1
    capsys.readouterr()
    for bad in (["--importance-sampling", "token_mask"], ["--importance-sampling-cap", "0"],
                ["--importance-sampling-cap", "-2"]):  # fmt: skip
        try:
            rc = main([*args, *bad])
        except SystemExit as stop:  # argparse's choices
            rc = stop.code
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1, (bad, err)
        assert "importance" in err[0]
