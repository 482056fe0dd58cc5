"""The edges: each case found wrong or silent by an independent check, now against an mpmath
truth at 200 digits, or the ValueError that names what is wrong; then hypothesis strategies
that keep drawing from those regions (extreme scales, peaked logits, tiny weights, half
precision, large counts)."""

from __future__ import annotations

import functools
import math

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import eligibility

mpf = mpmath.mpf


@pytest.fixture(autouse=True)
def _digits():
    """200 digits for every truth here (1 + e⁻¹²⁰ must not round to 1), whatever ran before."""
    with mpmath.workdps(200):
        yield


def _mp_log_softmax(z: list[float]) -> list[mpmath.mpf]:
    zs = [mpf(float(v)) for v in z]
    lse = mpmath.log(mpmath.fsum(mpmath.exp(v) for v in zs))
    return [v - lse for v in zs]


def _mp_multinomial_log_prob(x: list[int], log_pi: list[mpmath.mpf]) -> mpmath.mpf:
    n = sum(x)
    coef = mpmath.loggamma(n + 1) - mpmath.fsum(mpmath.loggamma(k + 1) for k in x)
    return coef + mpmath.fsum(k * lp for k, lp in zip(x, log_pi, strict=True) if k)


def _rel(got: object, want: mpmath.mpf) -> float:
    g = float(got.float() if isinstance(got, torch.Tensor) else got)
    return abs(g - float(want)) / abs(float(want))


# normal ---------------------------------------------------------------------------------------


def test_normal_tiny_scale_log_prob_is_not_nan() -> None:
    got = eligibility.log_prob("normal", 0.0, loc=0.0, scale=1e-200)
    want = -mpmath.log(mpf("1e-200")) - mpmath.log(2 * mpmath.pi) / 2  # 459.598…
    assert _rel(got, want) < 1e-15


def test_normal_tiny_float32_scale_log_prob_is_not_nan() -> None:
    s = np.float32(1e-23)
    got = eligibility.log_prob("normal", np.float32(0), loc=np.float32(0), scale=np.array(s))
    want = -mpmath.log(mpf(float(s))) - mpmath.log(2 * mpmath.pi) / 2
    assert got.dtype == np.float32 and _rel(got, want) < 1e-6


def test_normal_tiny_scale_score_is_exact_or_refused() -> None:
    e = eligibility.score("normal", 0.0, loc=0.0, scale=1e-200)
    assert float(e["loc"]) == 0.0 and float(e["scale"]) == -1e200
    with pytest.raises(ValueError, match=r"score: the answer w\.r\.t\. loc .* overflows float64"):
        eligibility.score("normal", 1.0, loc=0.0, scale=1e-200)


def test_broadcast_mismatch_names_loc_and_scale() -> None:
    with pytest.raises(ValueError, match=r"loc of batch shape \(2,\) and scale of batch shape"):
        eligibility.entropy("normal", loc=[0.0, 1.0], scale=[1.0, 2.0, 3.0])


# actions and counts never pass through the parameters' dtype ----------------------------------


def test_bf16_categorical_action_257_is_not_256() -> None:
    z = torch.linspace(-3, 3, 1000).to(torch.bfloat16)
    got = eligibility.log_prob("categorical", 257, logits=z)
    want = _mp_log_softmax(z.double().tolist())[257]
    assert got.dtype == torch.bfloat16 and _rel(got, want) < 2**-7


def test_fp16_categorical_actions_above_2048_are_exact() -> None:
    z = torch.sin(torch.arange(3000, dtype=torch.float64)).to(torch.float16)
    truth = _mp_log_softmax(z.double().tolist())
    for a in (2049, 2999):
        got = eligibility.log_prob("categorical", a, logits=z)
        assert _rel(got, truth[a]) < 2**-10
        e = eligibility.score("categorical", a, logits=z)["logits"]
        assert float(e[a]) > 0 and float(e[a - 1]) < 0  # the taken entry is a, not a − 1


def test_bf16_multinomial_n300_log_prob() -> None:
    z = torch.tensor([0.0, 0.5], dtype=torch.bfloat16)
    x = [120, 180]
    got = eligibility.log_prob("multinomial", torch.tensor(x), total_count=300, logits=z)
    want = _mp_multinomial_log_prob(x, _mp_log_softmax(z.double().tolist()))
    assert got.dtype == torch.bfloat16 and _rel(got, want) < 2**-7


def test_total_count_not_representable_is_refused() -> None:
    with pytest.raises(ValueError, match=r"total_count: .* not exactly representable in float64"):
        eligibility.entropy("multinomial", total_count=2**60 + 1, probs=[1.0, 1.0])


# multinomial ------------------------------------------------------------------------------------


def test_multinomial_underflowing_normalised_weight() -> None:
    got = eligibility.log_prob("multinomial", [1, 1], total_count=2, probs=[1e30, 1e-300])
    s = mpf("1e30") + mpf("1e-300")
    want = _mp_multinomial_log_prob(
        [1, 1], [mpmath.log(mpf("1e30") / s), mpmath.log(mpf("1e-300") / s)]
    )
    assert _rel(got, want) < 1e-15  # −759.16


@functools.cache  # once for both dtypes' tests
def _mp_binomial_entropy(n: int, p: float, dps: int) -> mpmath.mpf:
    """−Σ P(k) ln P(k) over k within 20 standard deviations of np (1,735 terms at n = 10⁴,
    p = ¼, of the 10,001): the rest hold mass below 2·e⁻¹⁷³ (Bernstein's bound), and add less
    than 10⁻⁷⁰ to the sum, far below the 2e-11 asked of float64."""
    with mpmath.workdps(dps):
        p_, q_ = mpf(p), 1 - mpf(p)
        log_p, log_q = mpmath.log(p_), mpmath.log(q_)
        half = math.ceil(20 * math.sqrt(n * p * (1 - p)))
        lo, hi = max(0, math.floor(n * p) - half), min(n, math.ceil(n * p) + half)
        log_n = mpmath.loggamma(n + 1)
        h = mpf(0)
        for k in range(lo, hi + 1):
            lp = log_n - mpmath.loggamma(k + 1) - mpmath.loggamma(n - k + 1)
            lp += k * log_p + (n - k) * log_q
            h -= mpmath.exp(lp) * lp
        return h


@pytest.mark.parametrize(("dtype", "tol"), [(np.float64, 2e-11), (np.float32, 1e-6)])
def test_multinomial_entropy_at_n_1e4(dtype: type, tol: float) -> None:
    want = _mp_binomial_entropy(10_000, 0.25, dps=30)
    got = eligibility.entropy("multinomial", total_count=10_000, probs=np.array([1, 3], dtype))
    assert got.dtype == dtype and _rel(got, want) < tol


def test_multinomial_fp16_n_1e4_log_prob_is_not_nan() -> None:
    w = torch.tensor([1.0, 3.0], dtype=torch.float16)
    x = [2500, 7500]
    got = eligibility.log_prob("multinomial", torch.tensor(x), total_count=10_000, probs=w)
    want = _mp_multinomial_log_prob(x, [mpmath.log(mpf(1) / 4), mpmath.log(mpf(3) / 4)])
    assert got.dtype == torch.float16 and _rel(got, want) < 2**-10


def test_multinomial_score_at_peaked_logits() -> None:
    e = eligibility.score("multinomial", [2, 0], total_count=2, logits=[40.0, 0.0])["logits"]
    pi = [mpmath.exp(v) for v in _mp_log_softmax([40.0, 0.0])]
    assert _rel(e[0], 2 - 2 * pi[0]) < 1e-15 and _rel(e[1], -2 * pi[1]) < 1e-15


# bernoulli -------------------------------------------------------------------------------------


@pytest.mark.parametrize("z", [40.0, -40.0, 700.0])
def test_bernoulli_logits_far_from_zero(z: float) -> None:
    # ln p and ln q in log form: at z = 700, 1 − p = e⁻⁷⁰⁰ is below even 50 digits
    lp = -mpmath.log1p(mpmath.exp(-mpf(z)))
    lq = -mpf(z) + lp
    p, q = mpmath.exp(lp), mpmath.exp(lq)
    h = -p * lp - q * lq
    assert _rel(eligibility.entropy("bernoulli", logits=z), h) < 1e-14  # 1.742e-16 at 40
    assert _rel(eligibility.fisher("bernoulli", logits=z), p * q) < 1e-14
    g = eligibility.entropy_grad("bernoulli", logits=z)["logits"]
    assert _rel(g, -z * p * q) < 1e-14


def test_bernoulli_tiny_probs_log_prob_of_zero_is_log1p() -> None:
    assert float(eligibility.log_prob("bernoulli", 0, probs=1e-20)) == -1e-20
    p = mpf("1e-20")
    h = -p * mpmath.log(p) - (1 - p) * mpmath.log(1 - p)
    assert _rel(eligibility.entropy("bernoulli", probs=1e-20), h) < 1e-15


# categorical -----------------------------------------------------------------------------------


def test_categorical_fisher_at_peaked_logits_is_not_zero() -> None:
    f = eligibility.fisher("categorical", logits=[40.0, 0.0])
    pi = [mpmath.exp(v) for v in _mp_log_softmax([40.0, 0.0])]
    q = pi[0] * pi[1]  # 4.25e-18
    for i in range(2):
        for j in range(2):
            assert _rel(f[i, j], q if i == j else -q) < 1e-15


def test_categorical_entropy_at_peaked_logits() -> None:
    lp = _mp_log_softmax([40.0, 0.0, -3.0])
    h = -mpmath.fsum(mpmath.exp(v) * v for v in lp)
    assert _rel(eligibility.entropy("categorical", logits=[40.0, 0.0, -3.0]), h) < 1e-14


@pytest.mark.parametrize("dist", ["categorical", "multinomial"])
def test_score_that_would_overflow_is_refused(dist: str) -> None:
    kw = {"total_count": 1} if dist == "multinomial" else {}
    value = [0, 1] if dist == "multinomial" else 1
    with pytest.raises(ValueError, match=r"score: the answer w\.r\.t\. probs is inf .* overflows"):
        eligibility.score(dist, value, probs=[1.0, 1e-310], **kw)


@pytest.mark.parametrize("dist", ["categorical", "bernoulli"])
def test_complex_parameters_and_values_are_refused(dist: str) -> None:
    probs = [0.5 + 1j, 0.5] if dist == "categorical" else 0.5 + 0.1j
    with pytest.raises(ValueError, match=r"probs must be real numbers, got complex"):
        eligibility.log_prob(dist, 0, probs=probs)
    with pytest.raises(ValueError, match=r"value must be real numbers, got complex"):
        eligibility.log_prob(dist, 1 + 0j, probs=[0.5, 0.5] if dist == "categorical" else 0.5)


# hypothesis: the regions where the edges live ---------------------------------------------------


@given(log_scale=st.floats(-300, 300), r=st.floats(-30, 30))
def test_normal_extreme_scales(log_scale: float, r: float) -> None:
    sigma = 10.0**log_scale
    y = r * sigma
    got = eligibility.log_prob("normal", y, loc=0.0, scale=sigma)
    s = mpf(sigma)
    want = -((mpf(y) / s) ** 2) / 2 - mpmath.log(s) - mpmath.log(2 * mpmath.pi) / 2
    assert abs(float(got) - float(want)) <= 1e-13 * max(1.0, abs(float(want)))


@given(
    z=st.lists(st.floats(-60, 60), min_size=2, max_size=5),
    a=st.integers(0, 4),
)
def test_categorical_peaked_logits(z: list[float], a: int) -> None:
    a = a % len(z)
    lp = _mp_log_softmax(z)
    pi = [mpmath.exp(v) for v in lp]
    assert abs(
        float(eligibility.log_prob("categorical", a, logits=z)) - float(lp[a])
    ) <= 1e-13 * max(1.0, abs(float(lp[a])))
    f = eligibility.fisher("categorical", logits=z)
    for i in range(len(z)):
        want = pi[i] * (1 - pi[i])
        assert float(want) == 0.0 or _rel(f[i, i], want) < 1e-13
    h = -mpmath.fsum(p * v for p, v in zip(pi, lp, strict=True))
    assert (
        abs(float(eligibility.entropy("categorical", logits=z)) - float(h))
        <= 1e-14 * max(1e-300, float(h)) + 1e-300
    )


@given(log_w=st.lists(st.floats(-300, 30), min_size=2, max_size=4), n=st.integers(1, 6))
def test_multinomial_tiny_weights(log_w: list[float], n: int) -> None:
    w = [10.0**v for v in log_w]
    x = [0] * len(w)
    x[-1] = n
    s = mpmath.fsum(mpf(v) for v in w)
    want = _mp_multinomial_log_prob(x, [mpmath.log(mpf(v) / s) for v in w])
    got = eligibility.log_prob("multinomial", x, total_count=n, probs=w)
    # ln P = n (ln wₖ − ln S) + ln-gamma terms: a difference of terms up to n |ln w| in size,
    # each rounded to about ε there (w = 1e30, n = 6: terms of 414, an error of 1.3e-13 seen)
    terms = n * max(1.0, *(abs(v) * math.log(10) for v in log_w))
    assert abs(float(got) - float(want)) <= 1e-13 * max(1.0, abs(float(want))) + 4e-16 * terms


@given(
    dtype=st.sampled_from([torch.float16, torch.bfloat16]),
    k=st.integers(2, 4000),
    data=st.data(),
)
def test_half_precision_actions(dtype: torch.dtype, k: int, data: st.DataObject) -> None:
    a = data.draw(st.integers(0, k - 1))
    z = torch.cos(torch.arange(k, dtype=torch.float64) * 0.37).to(dtype)
    got = eligibility.log_prob("categorical", a, logits=z)
    want = _mp_log_softmax(z.double().tolist())[a]
    eps = 2.0**-7 if dtype == torch.bfloat16 else 2.0**-10
    assert got.dtype == dtype and _rel(got, want) < eps


@given(n=st.integers(1, 5000), p=st.floats(0.01, 0.99), data=st.data())
def test_multinomial_large_counts(n: int, p: float, data: st.DataObject) -> None:
    k0 = data.draw(st.integers(0, n))
    got = eligibility.log_prob("multinomial", [k0, n - k0], total_count=n, probs=[p, 1 - p])
    pp = mpf(p)
    qq = mpf(1 - p)  # the second weight as given, renormalised
    s = pp + qq
    want = _mp_multinomial_log_prob([k0, n - k0], [mpmath.log(pp / s), mpmath.log(qq / s)])
    assert abs(float(got) - float(want)) <= 1e-11 * max(1.0, abs(float(want))) + math.ulp(1.0)
