"""Beta(concentration1 α, concentration0 β): the kernels against torch autograd, scipy and
finite differences, on NumPy and torch, and the checks of its parameters and values."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
import torch.distributions as TD

import eligibility
from eligibility._array import digamma, lgamma, trigamma

CASES = [  # (α, β, y): symmetric, skewed, below 1 (a U shape), large, a value near the edge
    (2.0, 3.0, 0.3),
    (0.5, 0.5, 0.9),
    (0.3, 4.0, 1e-6),
    (50.0, 20.0, 0.7),
    (1.0, 1.0, 0.5),
    (7.5, 0.8, 0.999),
]


def _torch_score(a: float, b: float, y: float) -> tuple[float, float, float]:
    ta = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    lp = TD.Beta(ta, tb).log_prob(torch.tensor(y, dtype=torch.float64))
    ga, gb = torch.autograd.grad(lp, (ta, tb))
    return lp.item(), ga.item(), gb.item()


@pytest.mark.parametrize(("a", "b", "y"), CASES)
def test_log_prob_and_score_against_torch_autograd(a: float, b: float, y: float) -> None:
    lp, ga, gb = _torch_score(a, b, y)
    got = eligibility.score("beta", y, concentration1=a, concentration0=b)
    assert float(eligibility.log_prob("beta", y, concentration1=a, concentration0=b)) == (
        pytest.approx(lp, rel=1e-12, abs=1e-12)
    )
    assert float(got["concentration1"]) == pytest.approx(ga, rel=1e-9, abs=1e-9)
    assert float(got["concentration0"]) == pytest.approx(gb, rel=1e-9, abs=1e-9)


# slow: importing scipy.stats takes 0.6 s of a worker, and no other test of the default suite
# imports it. Fast cover, each case at rel 1e-12: the log-probability against torch's,
# test_log_prob_and_score_against_torch_autograd; the entropy against torch's,
# test_entropy_and_its_gradient_against_torch_and_mpmath.
@pytest.mark.slow
@pytest.mark.parametrize(("a", "b", "y"), CASES)
def test_log_prob_and_entropy_against_scipy(a: float, b: float, y: float) -> None:
    import scipy.stats

    kw = {"concentration1": a, "concentration0": b}
    want = scipy.stats.beta(a, b)
    assert float(eligibility.log_prob("beta", y, **kw)) == pytest.approx(want.logpdf(y), rel=1e-12)
    assert float(eligibility.entropy("beta", **kw)) == pytest.approx(
        want.entropy(), rel=1e-11, abs=1e-12
    )


def _fd(f, x: float, h: float = 1e-6) -> float:
    return (f(x + h) - f(x - h)) / (2 * h)


@pytest.mark.parametrize(("a", "b", "y"), CASES)
def test_score_and_entropy_grad_against_finite_differences(a: float, b: float, y: float) -> None:
    e = eligibility.score("beta", y, concentration1=a, concentration0=b)
    g = eligibility.entropy_grad("beta", concentration1=a, concentration0=b)

    def lp(a_: float, b_: float) -> float:
        return float(eligibility.log_prob("beta", y, concentration1=a_, concentration0=b_))

    def h(a_: float, b_: float) -> float:
        return float(eligibility.entropy("beta", concentration1=a_, concentration0=b_))

    step = 1e-6 * min(a, b)
    assert float(e["concentration1"]) == pytest.approx(_fd(lambda t: lp(t, b), a, step), rel=1e-5)
    assert float(e["concentration0"]) == pytest.approx(_fd(lambda t: lp(a, t), b, step), rel=1e-5)
    gs = (_fd(lambda t: h(t, b), a, step), _fd(lambda t: h(a, t), b, step))
    assert float(g["concentration1"]) == pytest.approx(gs[0], rel=1e-5, abs=1e-7)
    assert float(g["concentration0"]) == pytest.approx(gs[1], rel=1e-5, abs=1e-7)


@pytest.mark.parametrize(("a", "b", "y"), CASES)
def test_entropy_and_its_gradient_against_torch_and_mpmath(a: float, b: float, y: float) -> None:
    # torch's autograd of its entropy is off by ~1e-8 relative here (at α=2, β=3 it gives
    # 0.0190348001648; −ψ′(2) + 3ψ′(5) = 0.0190348003631), so the gradient's truth is mpmath's
    ta = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    h = TD.Beta(ta, tb).entropy()
    ga, gb = torch.autograd.grad(h, (ta, tb))
    kw = {"concentration1": a, "concentration0": b}
    assert float(eligibility.entropy("beta", **kw)) == pytest.approx(h.item(), rel=1e-12, abs=1e-13)
    g = eligibility.entropy_grad("beta", **kw)
    assert float(g["concentration1"]) == pytest.approx(ga.item(), rel=1e-6, abs=1e-9)
    assert float(g["concentration0"]) == pytest.approx(gb.item(), rel=1e-6, abs=1e-9)
    with mpmath.workdps(40):
        ma, mb = mpmath.mpf(a), mpmath.mpf(b)

        def mh(s: mpmath.mpf, t: mpmath.mpf) -> mpmath.mpf:
            lbeta = mpmath.loggamma(s) + mpmath.loggamma(t) - mpmath.loggamma(s + t)
            d = mpmath.digamma
            return lbeta - (s - 1) * d(s) - (t - 1) * d(t) + (s + t - 2) * d(s + t)

        want_a = float(mpmath.diff(lambda s: mh(s, mb), ma))
        want_b = float(mpmath.diff(lambda t: mh(ma, t), mb))
    assert float(g["concentration1"]) == pytest.approx(want_a, rel=1e-12, abs=1e-14)
    assert float(g["concentration0"]) == pytest.approx(want_b, rel=1e-12, abs=1e-14)


@pytest.mark.parametrize(("a", "b", "y"), CASES)
def test_fisher_is_minus_the_expected_hessian(a: float, b: float, y: float) -> None:
    # ∂² ln Beta / ∂θ² does not depend on y, so −(the Hessian at any y) is the Fisher information
    def lp(theta: torch.Tensor) -> torch.Tensor:
        return TD.Beta(theta[0], theta[1]).log_prob(torch.tensor(y, dtype=torch.float64))

    theta = torch.tensor([a, b], dtype=torch.float64)
    want = -torch.autograd.functional.hessian(lp, theta).numpy()
    got = eligibility.fisher("beta", concentration1=a, concentration0=b)
    assert got.shape == (2, 2)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_fisher_is_the_second_moment_of_the_score() -> None:
    # E[e eᵀ] by quadrature over y, at a smooth case
    a, b = 3.0, 4.0
    y = np.linspace(0.0, 1.0, 20001)[1:-1]
    e = eligibility.score("beta", y, concentration1=a, concentration0=b)
    stacked = np.stack([e["concentration1"], e["concentration0"]], axis=-1)
    w = np.exp(eligibility.log_prob("beta", y, concentration1=a, concentration0=b))
    outer = stacked[:, :, None] * stacked[:, None, :] * w[:, None, None]
    second = np.trapezoid(outer, y, axis=0)
    np.testing.assert_allclose(
        eligibility.fisher("beta", concentration1=a, concentration0=b), second, rtol=1e-5
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_in_torch_out_batched(dtype: torch.dtype) -> None:
    a = np.array([[2.0, 0.5, 9.0], [1.5, 3.0, 0.7]])
    b = np.array([3.0, 0.5, 2.0])
    y = np.array([[0.2, 0.5, 0.9], [0.05, 0.6, 0.4]])
    ref = eligibility.score("beta", y, concentration1=a, concentration0=b)
    got = eligibility.score(
        "beta",
        torch.tensor(y, dtype=dtype),
        concentration1=torch.tensor(a, dtype=dtype),
        concentration0=torch.tensor(b, dtype=dtype),
    )
    rtol = 1e-5 if dtype == torch.float32 else 1e-13
    for k in ("concentration1", "concentration0"):
        assert got[k].dtype == dtype and got[k].shape == (2, 3)
        np.testing.assert_allclose(got[k].numpy(), ref[k], rtol=rtol)
    f = eligibility.fisher("beta", concentration1=a, concentration0=b)
    assert f.shape == (2, 3, 2, 2)
    want = [
        eligibility.fisher("beta", concentration1=a[i, j], concentration0=b[j])
        for i in range(2)
        for j in range(3)
    ]
    np.testing.assert_allclose(f.reshape(6, 2, 2), np.stack(want), rtol=1e-15)


@pytest.mark.parametrize("x", [1e-300, 1e-5, 0.5, 1.0, 1.5, 3.0, 15.9, 16.0, 40.0, 1e6])
def test_numpy_special_functions_against_scipy(x: float) -> None:
    import scipy.special as sp

    xs = np.array([x])
    assert lgamma(np, xs)[0] == pytest.approx(sp.gammaln(x), rel=1e-14, abs=1e-14)
    assert digamma(np, xs)[0] == pytest.approx(sp.digamma(x), rel=1e-13, abs=1e-14)
    if x > 1e-100:  # ψ′(1e-300) = 1e600 overflows
        assert trigamma(np, xs)[0] == pytest.approx(sp.polygamma(1, x), rel=1e-13)


def test_torch_float64_trigamma_against_mpmath() -> None:
    """One batch on torch float64 against mpmath point by point: ψ′ within a few ulps (torch's
    own polygamma(1, 2.0) is 3.7e-10 off), and its autograd derivative ψ″ too."""
    xs = [1e-5, 0.1, 0.5, 1.0, 1.5, 2.0, 3.0, 7.3, 15.9, 16.0, 40.0, 1e6]
    t = torch.tensor(xs, dtype=torch.float64, requires_grad=True)
    got = trigamma(torch, t)
    (d,) = torch.autograd.grad(got.sum(), t)
    assert got.dtype == torch.float64 and got.shape == (len(xs),)
    with mpmath.workdps(30):
        for i, x in enumerate(xs):
            assert got[i].item() == pytest.approx(float(mpmath.polygamma(1, x)), rel=1e-14)
            assert d[i].item() == pytest.approx(float(mpmath.polygamma(2, x)), rel=1e-13)


@pytest.mark.parametrize("y", [0.0, 1.0, -0.1, 1.5])
def test_a_value_outside_the_open_interval_is_refused(y: float) -> None:
    with pytest.raises(ValueError, match=r"value: .* is outside \(0, 1\)"):
        eligibility.score("beta", y, concentration1=2.0, concentration0=3.0)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"concentration1": 0.0, "concentration0": 1.0}, r"concentration1: 0; .* finite and > 0"),
        ({"concentration1": 1.0, "concentration0": -2.0}, r"concentration0: -2; .* finite and > 0"),
        ({"concentration1": np.inf, "concentration0": 1.0}, r"concentration1: inf"),
        ({"concentration1": 1.0}, r"beta needs concentration1= and concentration0=; missing "),
        ({"concentration1": 1.0, "concentration0": 1.0, "scale": 1.0}, r"unexpected parameter"),
    ],
)
def test_bad_concentrations_are_named(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        eligibility.entropy("beta", **kw)


def test_the_object_view() -> None:
    """The object's numbers are the functions'; Beta(2, 3)'s density is y (1 − y)² / B(2, 3),
    B(2, 3) = 1!·2!/4! = 1/12."""
    d = eligibility.Beta(2.0, 3.0)
    want = eligibility.log_prob("beta", 0.3, concentration1=2.0, concentration0=3.0)
    assert float(d.log_prob(0.3)) == float(want)
    assert float(want) == pytest.approx(math.log(12 * 0.3 * 0.7**2), rel=1e-14)
    assert set(d.score(0.3)) == {"concentration1", "concentration0"}
    assert repr(d).startswith("Beta(concentration1=")
