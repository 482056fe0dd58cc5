"""Sequence REINFORCE: group advantages, whitening, and every aggregation and KL placement.

Truth: plain Python loops written from the formulas (values, and their gradients by autograd),
the closed-form ∂loss/∂ℓ each docstring states, and, for the KL placements, the exact gradient of
the KL of a tiny autoregressive policy, enumerated over every sequence.
"""

from __future__ import annotations

import itertools
import math

import pytest

torch = pytest.importorskip("torch")

from eligibility.torch import (  # noqa: E402
    group_advantages,
    sequence_reinforce_loss,
    whiten_advantages,
)
from eligibility.torch.sequence import AGGREGATIONS, KL_PLACEMENTS  # noqa: E402

D = torch.float64


# ------------------------------------------------------------------------------ references


def ref_group_advantages(r: list[float], g: int, baseline: str, scale, eps: float) -> list[float]:
    n = len(r)
    out = []
    batch_mean = sum(r) / n
    batch_sd = math.sqrt(sum((x - batch_mean) ** 2 for x in r) / (n - 1)) if n > 1 else 1.0
    for k in range(0, n, g):
        grp = r[k : k + g]
        mean = sum(grp) / g
        sd = math.sqrt(sum((x - mean) ** 2 for x in grp) / (g - 1)) if g > 1 else 1.0
        for i, x in enumerate(grp):
            others = [y for j, y in enumerate(grp) if j != i]
            b = {
                "rloo": sum(others) / len(others) if others else 0.0,
                "mean": mean,
                "none": 0.0,
            }[baseline]
            a = x - b
            if scale == "group-std":
                a /= sd + eps
            elif scale == "batch-std":
                a /= batch_sd + eps
            if baseline != "none" and g > 1 and all(y == grp[0] for y in grp):
                a = 0.0
            out.append(a)
    return out


def ref_loss(lp, adv, mask, aggregation, t_max, normaliser, kl, beta, ref, old):
    """Plain loops over sequences and tokens; torch scalars so that autograd differentiates."""
    n, t = lp.shape
    per_tok = {}
    for i in range(n):
        for s in range(t):
            if not mask[i][s]:
                continue
            a = adv[i] if adv.dim() == 1 else adv[i, s]
            a = float(a)
            if beta and kl == "reward-to-go":
                a -= beta * sum((lp[i, u] - ref[i, u]).item() for u in range(s, t) if mask[i][u])
            term = -a * (lp[i, s] if old is None else torch.exp(lp[i, s] - old[i, s]))
            if beta and kl not in ("none", "reward-to-go"):
                d = lp[i, s] - ref[i, s]
                k3 = torch.exp(-d) - 1 + d
                term = (
                    term
                    + beta
                    * {
                        "k1": d,
                        "k2": 0.5 * d * d,
                        "k3": k3,
                        "k3-clamped": torch.clamp(k3, -10.0, 10.0),
                        "k3-ratio": k3 * torch.exp(lp[i, s] - lp[i, s].detach()),
                    }[kl]
                )
            per_tok[i, s] = term
    total = sum(per_tok.values(), torch.zeros((), dtype=lp.dtype))
    tokens = sum(1 for i in range(n) for s in range(t) if mask[i][s])
    if aggregation == "sequence-sum":
        return total / n
    if aggregation == "constant":
        return total / (n * t_max)
    if aggregation == "constant-sum":
        return total / t_max
    if aggregation == "padded-width":
        return total / (n * t)
    if aggregation == "micro-batch-token-mean":
        halves = [[(i, s) for (i, s) in per_tok if (i < n // 2) == first] for first in (1, 0)]
        return sum(
            sum((per_tok[k] for k in h), torch.zeros((), dtype=lp.dtype)) / (2 * max(len(h), 1))
            for h in halves
        )
    if aggregation == "token-mean":
        return total / (normaliser if normaliser is not None else max(tokens, 1))
    if aggregation == "token-sum-norm":
        return total / (normaliser if normaliser is not None else t)
    seq = torch.zeros((), dtype=lp.dtype)
    for i in range(n):
        length = sum(1 for s in range(t) if mask[i][s])
        row = sum((v for (j, _), v in per_tok.items() if j == i), torch.zeros((), dtype=lp.dtype))
        seq = seq + row / max(length, 1)
    return seq / n


def batch(n=4, t=5, seed=0, per_token=False):
    g = torch.Generator().manual_seed(seed)
    lp = (-torch.rand(n, t, generator=g, dtype=D) * 3).requires_grad_()
    ref = -torch.rand(n, t, generator=g, dtype=D) * 3
    old = lp.detach() + 0.1 * torch.randn(n, t, generator=g, dtype=D)
    lengths = torch.tensor([t, 2, 0, 3][:n] + [t] * max(0, n - 4))
    mask = torch.arange(t) < lengths.unsqueeze(1)
    adv = torch.randn((n, t) if per_token else (n,), generator=g, dtype=D)
    return lp, adv, mask, ref, old


# ------------------------------------------------------------------------------ advantages


@pytest.mark.parametrize("baseline", ["rloo", "mean", "none"])
@pytest.mark.parametrize("scale", [None, "group-std", "batch-std"])
@pytest.mark.parametrize("g", [1, 2, 4])
def test_group_advantages_match_a_plain_loop(baseline, scale, g):
    r = [1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.2, 0.7, 0.0, 1.0]  # one group of equal rewards
    got = group_advantages(torch.tensor(r, dtype=D), g, baseline=baseline, scale=scale)
    want = ref_group_advantages(r, g, baseline, scale, 1e-4)
    assert got.dtype == D and got.shape == (12,)
    assert torch.allclose(got, torch.tensor(want, dtype=D), rtol=1e-12, atol=1e-12)
    assert torch.isfinite(got).all()


def test_group_advantages_stated_edge_cases():
    ones = torch.ones(4)
    assert torch.equal(group_advantages(ones, 2, scale="group-std"), torch.zeros(4))
    r = torch.tensor([3.0, 1.0])
    assert torch.equal(group_advantages(r, 1), r)  # RLOO, group of one: A = R
    assert torch.equal(group_advantages(r, 1, baseline="mean"), torch.zeros(2))
    assert torch.isfinite(group_advantages(r[:1], 1, scale="batch-std")).all()
    # the self-including mean is (G − 1)/G times the leave-one-out advantage
    r = torch.tensor([0.3, 1.0, 0.0, 0.8], dtype=D)
    assert torch.allclose(group_advantages(r, 4, baseline="mean"), 0.75 * group_advantages(r, 4))


@pytest.mark.parametrize(
    ("args", "kw", "match"),
    [
        ((torch.ones(5), 2), {}, "groups of group_size"),
        ((torch.ones(4), 0), {}, "group_size"),
        ((torch.ones(4), True), {}, "group_size"),
        ((torch.ones(2, 2), 2), {}, "one-dimensional"),
        ((torch.ones(4, dtype=torch.int64), 2), {}, "floating"),
        ((torch.tensor([1.0, float("nan")]), 2), {}, r"rewards\[1\]"),
        ((torch.ones(4), 2), {"baseline": "grpo"}, "baseline"),
        ((torch.ones(4), 2), {"scale": "std"}, "scale"),
        ((torch.ones(4), 2), {"eps": -1.0}, "eps"),
        (([1.0, 2.0], 2), {}, "torch.Tensor"),
    ],
)
def test_group_advantages_errors(args, kw, match):
    with pytest.raises(ValueError, match=match):
        group_advantages(*args, **kw)


@pytest.mark.parametrize("unbiased", [False, True])
def test_whiten_matches_a_plain_loop(unbiased):
    _, adv, mask, _, _ = batch(per_token=True)
    got = whiten_advantages(adv, mask, unbiased=unbiased)
    vals = [float(adv[i, s]) for i in range(4) for s in range(5) if mask[i, s]]
    mu = sum(vals) / len(vals)
    var = sum((v - mu) ** 2 for v in vals) / (len(vals) - (1 if unbiased else 0))
    for i in range(4):
        for s in range(5):
            want = (float(adv[i, s]) - mu) / math.sqrt(var + 1e-8) if mask[i, s] else 0.0
            assert float(got[i, s]) == pytest.approx(want, rel=1e-12, abs=1e-12)
    one = whiten_advantages(torch.tensor([2.0]), unbiased=True)
    assert torch.equal(one, torch.zeros(1))  # a single entry: 0, not NaN
    assert torch.equal(whiten_advantages(torch.ones(3)), torch.zeros(3))


# ------------------------------------------------------------------------------ the loss

# Each aggregation is one test over the KL placements, a failure's message naming the placement.


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_loss_and_gradient_match_a_plain_loop(aggregation):
    for kl in KL_PLACEMENTS:
        for per_token, normaliser, with_old in ((False, None, False), (True, 7.0, True)):
            if normaliser is not None and aggregation not in ("token-mean", "token-sum-norm"):
                normaliser = None
            lp, adv, mask, ref, old = batch(per_token=per_token)
            old = old if with_old else None
            beta = 0.3
            kw = dict(aggregation=aggregation, max_completion_length=8, normaliser=normaliser)
            got = sequence_reinforce_loss(
                lp, adv, mask, kl=kl, beta=beta, ref_logps=ref, old_logps=old, **kw
            )
            (g_got,) = torch.autograd.grad(got, lp)
            want = ref_loss(lp, adv, mask.tolist(), aggregation, 8, normaliser, kl, beta, ref, old)
            (g_want,) = torch.autograd.grad(want, lp)
            case = f"kl={kl}, per_token={per_token}"
            assert got.item() == pytest.approx(want.item(), rel=1e-12, abs=1e-14), case
            assert torch.allclose(g_got, g_want, rtol=1e-12, atol=1e-14), case
            assert torch.all(g_got[~mask] == 0), case


def weights(aggregation, mask, t_max=8):
    """∂aggregate/∂l per token, as each aggregation's docstring states it."""
    n, t = mask.shape
    m = mask.to(D)
    lengths = m.sum(1, keepdim=True).clamp_min(1)
    return {
        "sequence-sum": m / n,
        "constant": m / (n * t_max),
        "token-mean": m / m.sum(),
        "sequence-mean": m / (n * lengths),
        "token-sum-norm": m / t,
        "constant-sum": m / t_max,
        "padded-width": m / (n * t),
        "micro-batch-token-mean": torch.cat(
            [m[: n // 2] / (2 * m[: n // 2].sum()), m[n // 2 :] / (2 * m[n // 2 :].sum())]
        ),
    }[aggregation]


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_gradient_is_the_stated_closed_form(aggregation):
    lp, adv, mask, ref, _ = batch()
    beta = 0.3
    lpd, a = lp.detach(), adv.unsqueeze(1).expand(4, 5)
    d = torch.where(mask, lpd - ref, 0.0)
    k3_grad = 1 - torch.exp(ref - lpd)
    inside = (torch.exp(ref - lpd) - (ref - lpd) - 1 <= 10).to(D)
    dloss_dl = {
        "none": -a,
        "reward-to-go": -(a - beta * d.flip(-1).cumsum(-1).flip(-1)),
        "k1": -a + beta,
        "k2": -a + beta * d,
        "k3": -a + beta * k3_grad,
        "k3-clamped": -a + beta * k3_grad * inside,
        "k3-ratio": -a + beta * d,
    }
    assert set(dloss_dl) == set(KL_PLACEMENTS)
    for kl in KL_PLACEMENTS:
        loss = sequence_reinforce_loss(
            lp, adv, mask, aggregation=aggregation, max_completion_length=8, kl=kl, beta=beta,
            ref_logps=ref,
        )  # fmt: skip
        (g,) = torch.autograd.grad(loss, lp)
        want = weights(aggregation, mask) * dloss_dl[kl]
        assert torch.allclose(g, want, rtol=1e-12, atol=1e-15), kl


# The exact sequence KL of a tiny autoregressive policy: V = 3 tokens, T = 3 steps, logits
# θ[t, previous token]; every one of the 27 sequences enumerated.
V, T = 3, 3
SEQS = torch.tensor(list(itertools.product(range(V), repeat=T)))


def seq_logps(theta):
    prev = torch.cat([torch.zeros(len(SEQS), 1, dtype=torch.long), SEQS[:, :-1]], 1)
    logp = torch.log_softmax(theta[torch.arange(T), prev], -1)  # (27, T, V)
    return logp.gather(-1, SEQS.unsqueeze(-1)).squeeze(-1)


def expected_gradient(kl, theta, ref_theta, beta):
    """E_{o∼π_θ}[∇ loss(o)], exactly: Σ_o p(o) ∇loss(o) with p held fixed, zero advantages."""
    lp = seq_logps(theta)
    p = lp.sum(1).exp().detach()
    ref = seq_logps(ref_theta).detach()
    mask = torch.ones(len(SEQS), T, dtype=torch.bool)
    total = 0.0
    for i in range(len(SEQS)):
        loss = sequence_reinforce_loss(
            lp[i : i + 1], torch.zeros(1, dtype=D), mask[:1], kl=kl, beta=beta,
            ref_logps=ref[i : i + 1],
        )  # fmt: skip
        total = total + p[i] * loss
    (g,) = torch.autograd.grad(total, theta)
    return g


def test_kl_placements_against_the_exact_sequence_kl():
    g = torch.Generator().manual_seed(1)
    theta = torch.randn(T, V, V, generator=g, dtype=D).requires_grad_()
    ref_theta = torch.randn(T, V, V, generator=g, dtype=D)
    beta = 0.5
    lp, ref = seq_logps(theta), seq_logps(ref_theta)
    reverse = (lp.sum(1).exp() * (lp - ref).sum(1)).sum()  # KL(π_θ ‖ π_ref) over sequences
    (g_reverse,) = torch.autograd.grad(reverse, theta)
    rtg = expected_gradient("reward-to-go", theta, ref_theta, beta)
    assert torch.allclose(rtg, beta * g_reverse, rtol=1e-10, atol=1e-12)  # exact
    k1 = expected_gradient("k1", theta, ref_theta, beta)
    assert torch.allclose(k1, torch.zeros_like(k1), atol=1e-12)  # no gradient in expectation
    k2 = expected_gradient("k2", theta, ref_theta, beta)
    assert (k2 - beta * g_reverse).abs().max() > 1e-3  # token-local: not the sequence KL


def test_k3_in_the_loss_descends_the_forward_kl():
    g = torch.Generator().manual_seed(2)
    z = torch.randn(5, generator=g, dtype=D).requires_grad_()
    z_ref = torch.randn(5, generator=g, dtype=D)
    lp, lref = torch.log_softmax(z, 0), torch.log_softmax(z_ref, 0)
    p = lp.exp().detach()
    mask = torch.ones(1, 1, dtype=torch.bool)
    total = sum(  # E_{o∼π_θ}[∇ loss(o)] exactly, with π_θ(o) held fixed
        p[i] * sequence_reinforce_loss(
            lp[i].reshape(1, 1), torch.zeros(1, dtype=D), mask, kl="k3", beta=1.0,
            ref_logps=lref[i].reshape(1, 1),
        )
        for i in range(5)
    )  # fmt: skip
    (got,) = torch.autograd.grad(total, z, retain_graph=True)
    forward = (lref.exp() * (lref - lp)).sum()  # KL(π_ref ‖ π_θ)
    (want,) = torch.autograd.grad(forward, z)
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_inputs_against_float64(dtype):
    lp, adv, mask, ref, _ = batch()
    kw = dict(aggregation="sequence-mean", kl="k3", beta=0.2)
    want = sequence_reinforce_loss(lp, adv, mask, ref_logps=ref, **kw)
    x = lp.detach().to(dtype).requires_grad_()
    got = sequence_reinforce_loss(x, adv.float(), mask, ref_logps=ref.to(dtype), **kw)
    assert got.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    assert got.item() == pytest.approx(want.item(), rel=tol, abs=tol)
    got.backward()
    assert x.grad.dtype == dtype


def test_padding_is_never_read():
    lp, adv, mask, ref, _ = batch()
    dirty = torch.where(mask, lp, float("nan")).detach().requires_grad_()
    ref = torch.where(mask, ref, float("-inf"))
    for kl in KL_PLACEMENTS:
        loss = sequence_reinforce_loss(dirty, adv, mask, kl=kl, beta=0.1, ref_logps=ref)
        (g,) = torch.autograd.grad(loss, dirty)
        assert torch.isfinite(loss) and torch.isfinite(g).all()


def test_float_mask_equals_bool_mask():
    lp, adv, mask, _, _ = batch()
    a = sequence_reinforce_loss(lp, adv, mask, aggregation="token-mean")
    b = sequence_reinforce_loss(lp, adv, mask.float(), aggregation="token-mean")
    assert a.item() == b.item()


def _bad(**kw):
    lp, adv, mask, _, _ = batch()
    base = dict(logps=lp, advantages=adv, completion_mask=mask)
    base.update(kw)
    return base


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(logps=torch.zeros(4)), r"logps must be \(N, T\)"),
        (dict(logps=torch.zeros(4, 5, dtype=torch.long)), "floating"),
        (dict(completion_mask=torch.ones(4, 6, dtype=torch.bool)), "completion_mask of shape"),
        (dict(completion_mask=torch.full((4, 5), 0.5)), "only 0 and 1"),
        (dict(advantages=torch.zeros(3)), "advantages of shape"),
        (dict(advantages=torch.zeros(4, dtype=torch.long)), "floating"),
        (dict(advantages=torch.tensor([0.0, float("inf"), 0, 0])), r"advantages\[1, 0\]"),
        (dict(logps=torch.full((4, 5), float("nan"))), r"logps\[0, 0\]"),
        (dict(aggregation="grpo"), "aggregation must be one of"),
        (dict(aggregation="constant"), "max_completion_length"),
        (dict(max_completion_length=3), "less than the width"),
        (dict(normaliser=0.0), "normaliser"),
        (dict(normaliser=4.0, aggregation="sequence-mean"), "normaliser is the divisor"),
        (dict(kl="k4", beta=0.1), "kl must be"),
        (dict(beta=0.1), "needs ref_logps"),
        (dict(beta=0.1, ref_logps=torch.zeros(4, 5)), "ref_logps must have"),
        (dict(beta=float("nan")), "finite"),
        (dict(old_logps=torch.zeros(4, 4, dtype=D)), "old_logps must have"),
    ],
)
def test_loss_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        sequence_reinforce_loss(**_bad(**kw))


def test_ratio_form_is_the_score_form_on_policy():
    lp, adv, mask, _, _ = batch()
    a = sequence_reinforce_loss(lp, adv, mask)
    b = sequence_reinforce_loss(lp, adv, mask, old_logps=lp.detach())
    (ga,) = torch.autograd.grad(a, lp)
    (gb,) = torch.autograd.grad(b, lp)
    assert torch.allclose(ga, gb, rtol=1e-14)
    want = -(adv * mask.sum(1)).sum() / 4  # the ratio is 1: the value is −Σ A Lᵢ / N
    assert b.item() == pytest.approx(want.item(), rel=1e-12)


@pytest.mark.slow
def test_compiles_without_graph_breaks():
    from eligibility.torch import options
    from eligibility.torch._compose import compose

    lp, adv, mask, ref, _ = batch()
    agg, kl = options.row("aggregation", "sequence-mean"), options.row("kl", "k3")
    args = (lp, adv.unsqueeze(1), mask, agg, kl, 0.1, ref)
    kw = {"t_max": None, "normaliser": None}
    eager = compose(*args, **kw)
    compiled = torch.compile(compose, fullgraph=True, backend="eager")(*args, **kw)
    assert compiled.item() == pytest.approx(eager.item(), rel=1e-12)


@pytest.mark.parametrize("kl", ["k2", "k3"])  # K of the reward-to-go is a constant, as A
def test_second_derivative_under_create_graph(kl):
    lp, adv, mask, ref, old = batch(n=3, t=3)

    def f(x):
        return sequence_reinforce_loss(
            x, adv[:3], mask[:3, :3], aggregation="sequence-mean", kl=kl, beta=0.5,
            ref_logps=ref[:3, :3], old_logps=old[:3, :3],
        )  # fmt: skip

    x = lp.detach()[:3, :3].clone().requires_grad_()
    assert torch.autograd.gradgradcheck(f, (x,))


def test_per_token_advantages_on_padding_are_never_read():
    lp, adv, mask, _, _ = batch(per_token=True)
    dirty = torch.where(mask, adv, float("nan"))
    a = sequence_reinforce_loss(lp, adv, mask)
    b = sequence_reinforce_loss(lp, dirty, mask)
    assert a.item() == b.item()
    (g,) = torch.autograd.grad(b, lp)
    assert torch.isfinite(g).all()


def test_an_overflow_with_finite_inputs_is_named():
    lp, adv, mask, _, _ = batch()
    big = torch.full_like(adv, 1e308)
    with pytest.raises(ValueError, match="overflowed"):
        sequence_reinforce_loss(lp, big, mask)
