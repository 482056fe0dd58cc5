"""Off-policy sequence losses: ratios, clipped surrogates, CISPO's caps, TIS and MIS.

Truth: plain Python loops written from the formulas (the frameworks' per-sequence and per-token
forms, with the ratio's own gradient, not the stop-gradient form), autograd of those loops, the
on-policy :func:`sequence_reinforce_loss` at ratio 1, and an enumeration of every sequence of a
tiny autoregressive policy for the product weight's unbiasedness.
"""

from __future__ import annotations

import itertools
import math

import pytest

torch = pytest.importorskip("torch")

from eligibility.torch.offpolicy import (  # noqa: E402
    RATIOS,
    off_policy_loss,
    ratio_diagnostics,
)
from eligibility.torch.sequence import sequence_reinforce_loss  # noqa: E402

D = torch.float64


def _batch(seed: int = 0, n: int = 5, t: int = 4, spread: float = 0.3):
    g = torch.Generator().manual_seed(seed)
    lengths = [t, 1, 3, 2, t][:n]
    m = torch.tensor([[j < L for j in range(t)] for L in lengths])
    old = -torch.rand(n, t, generator=g, dtype=D) * 2 - 0.1
    lp = (old + spread * torch.randn(n, t, generator=g, dtype=D)).requires_grad_(True)
    mu = old + 0.2 * torch.randn(n, t, generator=g, dtype=D)
    a = torch.tensor([1.0, -0.5, 2.0, -1.5, 0.7][:n], dtype=D)
    return lp, old, mu, a, m


def _grad(loss: torch.Tensor, lp: torch.Tensor) -> torch.Tensor:
    (g,) = torch.autograd.grad(loss, lp)
    return g


# ------------------------------------------------------------------------ plain-loop references


def _f(surrogate, r, A, lp_t, el, eh, c, cap_kind):
    """The per-token (or per-sequence) surrogate, r with its own gradient."""
    if surrogate == "ratio":
        return -r * A
    if surrogate == "cispo":
        w = r.detach().clamp(max=eh) if cap_kind == "absolute" else r.detach().clamp(1 - el, 1 + eh)
        return -w * A * lp_t
    f = -torch.minimum(r * A, r.clamp(1 - el, 1 + eh) * A)
    if surrogate == "dual-clip" and A < 0:
        f = torch.minimum(f, -c * A)
    return f


def _sampler_weights(old, mu, i, toks, corr, level, cap):
    d = [float(old[i, j] - mu[i, j]) for j in toks]
    ws = [math.exp(sum(d))] * len(toks) if level == "sequence" else [math.exp(x) for x in d]
    if corr == "tis":
        return [min(w, cap) for w in ws]
    if corr == "mis":
        return [w if w <= cap else 0.0 for w in ws]
    return ws


def ref_loss(lp, old, mu, a, m, *, ratio, surrogate, el, eh, c, cap_kind, corr, level, cap, agg):
    """The frameworks' forms, each ratio with its own gradient; a sequence ratio once a sequence.

    Per token, weight 1/N (``sequence-sum``) or 1/(N L) (``sequence-mean``). A sequence ratio ρ
    (∇s = s Σ∇ℓ for the product, ∇ŝ = ŝ (1/L) Σ∇ℓ for the geometric mean) enters once per
    sequence, so its coefficient is the token weight (times L for the geometric mean).
    """
    n, t = lp.shape
    total = lp.new_zeros(())
    for i in range(n):
        toks = [j for j in range(t) if m[i, j]]
        L = len(toks)
        per = 1.0 / n if agg == "sequence-sum" else 1.0 / (n * L)
        ws = _sampler_weights(old, mu, i, toks, corr, level, cap)
        logr = [lp[i, j] - old[i, j] for j in toks]
        if ratio == "token":
            for k, j in enumerate(toks):
                f = _f(surrogate, torch.exp(logr[k]), a[i], lp[i, j], el, eh, c, cap_kind)
                total = total + per * ws[k] * f
        else:
            geo = ratio == "geometric-mean"
            s = torch.exp(sum(logr) / L if geo else sum(logr))
            f = _f(surrogate, s, a[i], None, el, eh, c, cap_kind)
            total = total + per * (L if geo else 1) * ws[0] * f
    return total


CASES = [
    # ratio, surrogate, cispo cap, correction, level, aggregation
    ("sequence", "ratio", "relative", None, "sequence", "sequence-sum"),
    ("sequence", "ppo-clip", "relative", None, "sequence", "sequence-sum"),
    ("sequence", "dual-clip", "relative", "tis", "sequence", "sequence-sum"),
    ("token", "ratio", "relative", None, "sequence", "sequence-sum"),
    ("token", "ppo-clip", "relative", "tis", "token", "sequence-sum"),
    ("token", "dual-clip", "relative", "mis", "token", "sequence-mean"),
    ("token", "ppo-clip", "relative", "mis", "sequence", "sequence-mean"),
    ("token", "cispo", "absolute", None, "sequence", "sequence-sum"),
    ("token", "cispo", "relative", "tis", "token", "sequence-sum"),
    ("geometric-mean", "ppo-clip", "relative", None, "sequence", "sequence-mean"),
    ("geometric-mean", "ratio", "relative", "mis", "sequence", "sequence-mean"),
]


@pytest.mark.parametrize("ratio,surrogate,cap_kind,corr,level,agg", CASES)
def test_gradient_matches_the_plain_loop(ratio, surrogate, cap_kind, corr, level, agg):
    """Ratios near 1 and far from it (spread 0.05 and 0.6) in one test, a failure naming it."""
    for spread in (0.05, 0.6):
        lp, old, mu, a, m = _batch(1, spread=spread)
        el, eh, c, cap = 0.2, 0.28 if cap_kind == "relative" else 1.5, 3.0, 1.8
        kw = dict(ratio=ratio, surrogate=surrogate, eps_low=el, eps_high=eh, dual_clip=c)
        kw.update(cispo_cap=cap_kind, correction=corr, correction_level=level, cap=cap)
        ours = _grad(off_policy_loss(lp, old, a, m, sampler_logps=mu, aggregation=agg, **kw), lp)
        ref = ref_loss(
            lp, old, mu, a, m, ratio=ratio, surrogate=surrogate, el=el, eh=eh, c=c,
            cap_kind=cap_kind, corr=corr, level=level, cap=cap, agg=agg,
        )  # fmt: skip
        msg = lambda text, s=spread: f"spread {s}: {text}"  # noqa: E731
        torch.testing.assert_close(ours, _grad(ref, lp), rtol=1e-10, atol=1e-12, msg=msg)


def test_gspo_value_and_gradient_equal_trls_per_sequence_form():
    """TRL: ŝ = exp(Σ m log r / L), loss = mean over sequences of −min(ŝA, clip(ŝ)A)."""
    lp, old, _, a, m = _batch(2, spread=0.4)
    mf = m.to(D)
    log_s = ((lp - old) * mf).sum(-1) / mf.sum(-1)
    s = torch.exp(log_s)
    trl = (-torch.minimum(s * a, s.clamp(1 - 3e-4, 1 + 4e-4) * a)).mean()
    ours = off_policy_loss(
        lp, old, a, m, ratio="geometric-mean", surrogate="ppo-clip", eps_low=3e-4,
        eps_high=4e-4, aggregation="sequence-mean",
    )  # fmt: skip
    torch.testing.assert_close(ours, trl, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(_grad(ours, lp), _grad(trl, lp), rtol=1e-10, atol=1e-12)


def test_token_ppo_equals_trls_grpo_loss_form():
    """TRL grpo: per token −min(rA, clip(r)A), then the mean of per-sequence token means."""
    lp, old, _, a, m = _batch(3, spread=0.5)
    mf = m.to(D)
    r = torch.exp(lp - old)
    per = -torch.minimum(r * a[:, None], r.clamp(0.8, 1.28) * a[:, None])
    trl = ((per * mf).sum(-1) / mf.sum(-1)).mean()
    ours = off_policy_loss(
        lp, old, a, m, ratio="token", surrogate="ppo-clip", eps_high=0.28,
        aggregation="sequence-mean",
    )  # fmt: skip
    torch.testing.assert_close(ours, trl, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(_grad(ours, lp), _grad(trl, lp), rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------------------- ratio 1


ON_POLICY = [
    ("sequence", "ratio", {}),
    ("token", "ratio", {}),
    ("geometric-mean", "ratio", {}),
    ("sequence", "ppo-clip", {"eps_high": 0.28}),
    ("token", "ppo-clip", {}),
    ("token", "dual-clip", {"dual_clip": 3.0}),
    ("token", "cispo", {"cispo_cap": "relative"}),
    ("token", "cispo", {"cispo_cap": "absolute", "eps_high": 5.0}),
    ("token", "ratio", {"correction": "tis", "cap": 1.0}),
    ("sequence", "ratio", {"correction": "mis", "cap": 3.0, "correction_level": "token"}),
]


@pytest.mark.parametrize("ratio,surrogate,kw", ON_POLICY)
def test_ratio_one_is_reinforce(ratio, surrogate, kw):
    """Three aggregations in one test, a failure's message naming the aggregation."""
    lp, _, _, a, m = _batch(4)
    old = lp.detach().clone()
    for agg in ("sequence-sum", "sequence-mean", "token-mean"):
        loss = off_policy_loss(
            lp, old, a, m, ratio=ratio, surrogate=surrogate, sampler_logps=old, aggregation=agg,
            **kw,
        )  # fmt: skip
        want = sequence_reinforce_loss(lp, a, m, aggregation=agg)
        msg = lambda text, g=agg: f"{g}: {text}"  # noqa: E731
        torch.testing.assert_close(
            _grad(loss, lp), _grad(want, lp), rtol=1e-12, atol=1e-14, msg=msg
        )


def test_trl_cispo_with_epsilon_high_unset_is_a_fifth_of_reinforce():
    """TRL: epsilon_high defaults to epsilon = 0.2, and the cap is absolute: ŵ(1) = 0.2."""
    lp, _, _, a, m = _batch(5)
    old = lp.detach().clone()
    loss = off_policy_loss(lp, old, a, m, ratio="token", surrogate="cispo", cispo_cap="absolute")
    want = sequence_reinforce_loss(lp, a, m)
    torch.testing.assert_close(_grad(loss, lp), 0.2 * _grad(want, lp), rtol=1e-12, atol=1e-14)


def test_gspo_at_ratio_one_is_the_length_normalised_gradient():
    lp, _, _, a, m = _batch(6)
    old = lp.detach().clone()
    loss = off_policy_loss(
        lp, old, a, m, ratio="geometric-mean", surrogate="ppo-clip", aggregation="sequence-mean"
    )
    got = _grad(loss, lp)
    want = sequence_reinforce_loss(lp, a, m, aggregation="sequence-mean")
    torch.testing.assert_close(got, _grad(want, lp), rtol=1e-12, atol=1e-14)
    assert not torch.allclose(got, _grad(sequence_reinforce_loss(lp, a, m), lp))


# ------------------------------------------------------------------ unbiasedness, enumerated

V, EOS, T = 3, 0, 3


def _seq_logps(z: torch.Tensor, o: tuple[int, ...]) -> torch.Tensor:
    """Per-token log-probs of o under a policy with a logit row per position: z [T, V]."""
    return torch.stack([torch.log_softmax(z[t], -1)[o[t]] for t in range(len(o))])


def _all_sequences():
    for L in range(1, T + 1):
        for body in itertools.product(range(1, V), repeat=L - 1):
            yield (*body, EOS)
    yield from itertools.product(range(1, V), repeat=T)


def _reward(o):
    return float(o[0] == 1) + 0.3 * len(o)


@pytest.mark.parametrize(
    "kw,unbiased",
    [
        ({}, True),
        ({"ratio": "token"}, False),
        ({"ratio": "geometric-mean"}, False),
        ({"surrogate": "ppo-clip"}, False),
        ({"correction": "tis", "cap": 1.05}, False),
    ],
)
def test_the_product_weight_is_unbiased_and_the_others_are_not(kw, unbiased):
    g = torch.Generator().manual_seed(7)
    z_old = torch.randn(T, V, generator=g, dtype=D)
    z_mu = z_old + 0.3 * torch.randn(T, V, generator=g, dtype=D)
    z = (z_old + 0.5 * torch.randn(T, V, generator=g, dtype=D)).requires_grad_(True)
    seqs = list(_all_sequences())
    b = 0.4  # any constant baseline
    J = sum(torch.exp(_seq_logps(z, o).sum()) * _reward(o) for o in seqs)
    (exact,) = torch.autograd.grad(J, z)
    expected = torch.zeros_like(z)
    for o in seqs:
        lp = _seq_logps(z, o)[None]
        old = _seq_logps(z_old, o)[None].detach()
        mu = _seq_logps(z_mu, o)[None].detach()
        a = torch.tensor([_reward(o) - b], dtype=D)
        m = torch.ones_like(lp, dtype=torch.bool)
        loss = off_policy_loss(lp, old, a, m, sampler_logps=mu, **kw)
        (gz,) = torch.autograd.grad(loss, z)
        expected -= float(torch.exp(mu.sum())) * gz
    if unbiased:
        torch.testing.assert_close(expected, exact, rtol=1e-10, atol=1e-12)
    else:
        assert (expected - exact).norm() > 1e-3 * exact.norm()


# ------------------------------------------------------------------ diagnostics and input


def test_ratio_diagnostics_against_a_loop():
    lp, old, _, a, m = _batch(8, spread=0.5)
    d = ratio_diagnostics(lp, old, a, m, ratio="token", eps_low=0.2, eps_high=0.28)
    rs, low, high, n = [], 0, 0, 0
    for i in range(lp.shape[0]):
        for j in range(lp.shape[1]):
            if m[i, j]:
                r = math.exp(float(lp[i, j].detach() - old[i, j]))
                rs.append(r)
                low += r < 0.8 and a[i] < 0
                high += r > 1.28 and a[i] > 0
                n += 1
    assert d["ratio/mean"] == pytest.approx(sum(rs) / n)
    assert d["ratio/min"] == pytest.approx(min(rs)) and d["ratio/max"] == pytest.approx(max(rs))
    assert d["clip_ratio/low_mean"] == pytest.approx(low / n)
    assert d["clip_ratio/high_mean"] == pytest.approx(high / n)
    assert d["clip_ratio/region_mean"] == pytest.approx((low + high) / n)
    assert low + high > 0


def test_sequence_ratios_are_constant_along_the_sequence_and_one_on_padding():
    lp, old, _, _, m = _batch(9)
    for name in ("sequence", "geometric-mean"):
        rho = RATIOS[name](lp, old, m).detach()
        for i in range(lp.shape[0]):
            real = rho[i][m[i]]
            assert torch.allclose(real, real[0].expand_as(real))
            assert (rho[i][~m[i]] == 1).all()
    s = RATIOS["sequence"](lp, old, m).detach()[:, 0]
    want = torch.exp(((lp - old) * m).sum(-1)).detach()
    torch.testing.assert_close(s, want)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"ratio": "mean"}, "ratio must be one of"),
        ({"surrogate": "ppo"}, "surrogate must be one of"),
        ({"surrogate": "dual-clip", "dual_clip": 1.0}, "dual_clip c must be > 1"),
        ({"eps_low": 0.0}, "eps_low must be a positive"),
        ({"correction": "tis"}, "needs sampler_logps"),
        ({"cispo_cap": "both"}, "cispo_cap must be one of"),
        ({"aggregation": "mean"}, "aggregation must be one of"),
    ],
)
def test_bad_options_name_the_fix(kw, match):
    lp, old, _, a, m = _batch(0)
    with pytest.raises(ValueError, match=match):
        off_policy_loss(lp, old, a, m, **kw)


def test_shapes_that_do_not_match_are_named():
    lp, old, _, a, m = _batch(0)
    with pytest.raises(ValueError, match="old_logps"):
        off_policy_loss(lp, old[:, :2], a, m)
    with pytest.raises(ValueError, match="advantages must be"):
        off_policy_loss(lp, old, a[:2], m)
