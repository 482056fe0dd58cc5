"""Every closed form against torch.distributions autograd (float64) and central differences.

Each case draws parameters and a value with hypothesis, in the region where torch itself is
exact. torch is *not* exact where it clamps a probability to [eps, 1 − eps] (a category whose
normalised probability is 0 or 1, a Bernoulli p of 0 or 1): there its gradient is 0 and its
log-probability ln eps. Those points are excluded here by the strategies (probabilities stay
well inside (0, 1)) and the difference is tested explicitly in test_distributions_torch_diff.py.
Untaken zero-weight categories and −inf logits are inside the region where torch is exact, and
are drawn here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import eligibility
from eligibility.api import check

RTOL = 1e-9
"""Relative error allowed against torch where torch is exact (float64)."""

TD = torch.distributions


def _floats(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


# one case per distribution × parametrisation ------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A distribution × parametrisation: how to draw it and how torch builds it."""

    name: str
    dist: str
    draw: Callable[[st.DataObject, bool], tuple[dict[str, Any], Any]]
    """(data, zeros) → (params as float64 NumPy, value); zeros allows 0 weights / −inf logits."""
    torch_dist: Callable[[dict[str, torch.Tensor], dict[str, Any]], Any]
    grad_params: tuple[str, ...]
    magnitude: Callable[[dict[str, Any], Any], dict[str, float]]
    """The size of the terms an eligibility is a difference of: an entry that cancels to 0
    can only be known to about ε times this (in torch as in here)."""
    expect: Callable[[Case, dict[str, Any], Callable[[Any], Any]], Any] = lambda case, params, g: (
        _sum_over_support(case, params, g)
    )
    """E[g(value)] under the distribution: a sum over the support, or a quadrature."""
    entropy_grad_rtol: float = RTOL
    """How close torch's autograd of ``.entropy()`` is to the truth (see the Beta case)."""
    entropy_grad_floor: float = 1e-3
    """The least scale that error is relative to (the size of the terms H's gradient sums)."""

    def __repr__(self) -> str:
        return self.name


def _draw_weights(data: st.DataObject, k: int, taken: set[int], zeros: bool) -> np.ndarray:
    """Weights in [1e-3, 1e3]; with ``zeros``, some untaken ones set to 0 (one stays > 0).

    At least one weight outside ``taken`` stays positive, so no normalised probability is 1,
    where torch would clamp it.
    """
    w = np.array(data.draw(st.lists(_floats(1e-3, 1e3), min_size=k, max_size=k)))
    if zeros:
        untaken = [i for i in range(k) if i not in taken]
        zeroed = data.draw(st.sets(st.sampled_from(untaken), max_size=len(untaken) - 1))
        w[sorted(zeroed)] = 0.0
    return w


def _draw_logits(
    data: st.DataObject, k: int, taken: set[int], zeros: bool, bound: float
) -> np.ndarray:
    """Logits in [−bound, bound]; with ``zeros``, some untaken ones masked to −inf."""
    z = np.array(data.draw(st.lists(_floats(-bound, bound), min_size=k, max_size=k)))
    if zeros:
        untaken = [i for i in range(k) if i not in taken]
        masked = data.draw(st.sets(st.sampled_from(untaken), max_size=len(untaken) - 1))
        z[sorted(masked)] = -np.inf
    return z


def _draw_categorical(form: str) -> Callable[[st.DataObject, bool], tuple[dict, Any]]:
    def draw(data: st.DataObject, zeros: bool) -> tuple[dict, Any]:
        k = data.draw(st.integers(2, 5), label="k")
        a = data.draw(st.integers(0, k - 1), label="a")
        if form == "probs":
            return {"probs": _draw_weights(data, k, {a}, zeros)}, a
        # |z| ≤ 5 keeps 1 − π_a ≥ e⁻¹⁰/K: torch computes it as a difference from 1 and loses
        # about ε / (1 − π_a) of it, which must stay below RTOL.
        return {"logits": _draw_logits(data, k, {a}, zeros, 5.0)}, a

    return draw


def _draw_bernoulli(form: str) -> Callable[[st.DataObject, bool], tuple[dict, Any]]:
    def draw(data: st.DataObject, zeros: bool) -> tuple[dict, Any]:
        y = np.float64(data.draw(st.integers(0, 1), label="y"))
        if form == "probs":
            # torch goes through logit(p) and back, losing ε / min(p, 1 − p) of the gradient.
            return {"probs": np.float64(data.draw(_floats(1e-4, 1 - 1e-4)))}, y
        return {"logits": np.float64(data.draw(_floats(-10.0, 10.0)))}, y

    return draw


def _compositions(n: int, k: int) -> list[tuple[int, ...]]:
    """All count vectors of length k summing to n (the multinomial support)."""
    return [c for c in itertools.product(range(n + 1), repeat=k) if sum(c) == n]


def _draw_multinomial(form: str) -> Callable[[st.DataObject, bool], tuple[dict, Any]]:
    def draw(data: st.DataObject, zeros: bool) -> tuple[dict, Any]:
        k = data.draw(st.integers(2, 4), label="k")
        n = data.draw(st.integers(1, 5), label="n")
        x = data.draw(st.sampled_from(_compositions(n, k)), label="x")
        taken = {i for i in range(k) if x[i] > 0}
        if len(taken) == k:
            zeros = False  # nothing left to zero out
        p = (
            _draw_weights(data, k, taken, zeros)
            if form == "probs"
            else _draw_logits(data, k, taken, zeros, 5.0)
        )
        return {"total_count": n, form: p}, np.array(x, dtype=np.float64)

    return draw


def _draw_normal(data: st.DataObject, zeros: bool) -> tuple[dict, Any]:
    mu = data.draw(_floats(-10.0, 10.0), label="loc")
    sigma = data.draw(_floats(0.05, 20.0), label="scale")
    y = data.draw(_floats(-30.0, 30.0), label="value")
    return {"loc": np.float64(mu), "scale": np.float64(sigma)}, np.float64(y)


def _draw_beta(data: st.DataObject, zeros: bool) -> tuple[dict, Any]:
    # α, β ≥ 1 (the policy head's range): the tanh-sinh rule below is exact to ~1e-14 there.
    a = data.draw(_floats(1.0, 20.0), label="concentration1")
    b = data.draw(_floats(1.0, 20.0), label="concentration0")
    y = data.draw(_floats(0.01, 0.99), label="value")
    return {"concentration1": np.float64(a), "concentration0": np.float64(b)}, np.float64(y)


def _beta_magnitude(p: dict[str, Any], y: Any) -> dict[str, float]:
    # e_α = ln y − ψ(α) + ψ(α + β): each term is known to ε times its size (|ψ(x)| < x + 1).
    a, b, y = float(p["concentration1"]), float(p["concentration0"]), float(y)
    common = a + b + 1
    return {
        "concentration1": abs(np.log(y)) + a + 1 + common,
        "concentration0": abs(np.log1p(-y)) + b + 1 + common,
    }


def _multinomial_probs_magnitude(p: dict[str, Any], x: np.ndarray) -> float:
    w = p["probs"]
    ratio = np.where(x > 0, x / np.where(w > 0, w, 1.0), 0.0)
    return float(np.max(ratio) + p["total_count"] / np.sum(w))


def _normal_magnitude(p: dict[str, Any], y: Any) -> dict[str, float]:
    # y − μ is known to ε (|y| + |μ|); both eligibilities are built on it.
    mu, sigma = float(p["loc"]), float(p["scale"])
    d = abs(float(y)) + abs(mu)
    return {"loc": d / sigma**2, "scale": (d**2 + sigma**2) / sigma**3}


CASES = [
    Case(
        "categorical-probs",
        "categorical",
        _draw_categorical("probs"),
        lambda t, p: TD.Categorical(probs=t["probs"]),
        ("probs",),
        lambda p, a: {"probs": 1 / p["probs"][a] + 1 / np.sum(p["probs"])},
    ),
    Case(
        "categorical-logits",
        "categorical",
        _draw_categorical("logits"),
        lambda t, p: TD.Categorical(logits=t["logits"]),
        ("logits",),
        lambda p, a: {"logits": 1.0},
    ),
    Case(
        "bernoulli-probs",
        "bernoulli",
        _draw_bernoulli("probs"),
        lambda t, p: TD.Bernoulli(probs=t["probs"]),
        ("probs",),
        lambda p, y: {"probs": 1 / min(p["probs"], 1 - p["probs"])},
    ),
    Case(
        "bernoulli-logits",
        "bernoulli",
        _draw_bernoulli("logits"),
        lambda t, p: TD.Bernoulli(logits=t["logits"]),
        ("logits",),
        lambda p, y: {"logits": 1.0},
    ),
    Case(
        "multinomial-probs",
        "multinomial",
        _draw_multinomial("probs"),
        lambda t, p: TD.Multinomial(p["total_count"], probs=t["probs"]),
        ("probs",),
        lambda p, x: {"probs": _multinomial_probs_magnitude(p, x)},
    ),
    Case(
        "multinomial-logits",
        "multinomial",
        _draw_multinomial("logits"),
        lambda t, p: TD.Multinomial(p["total_count"], logits=t["logits"]),
        ("logits",),
        lambda p, x: {"logits": float(p["total_count"])},
    ),
    Case(
        "normal",
        "normal",
        _draw_normal,
        lambda t, p: TD.Normal(t["loc"], t["scale"]),
        ("loc", "scale"),
        _normal_magnitude,
        expect=lambda case, params, g: _gauss_hermite(params, g),
    ),
    Case(
        "beta",
        "beta",
        _draw_beta,
        lambda t, p: TD.Beta(t["concentration1"], t["concentration0"]),
        ("concentration1", "concentration0"),
        _beta_magnitude,
        expect=lambda case, params, g: _tanh_sinh(params, g),
        # torch's autograd of Beta.entropy() is off by about 1e-8 relative (docs/eligibilities.md;
        # test_beta.py holds ours to mpmath at 1e-12), relative to its digamma terms, which are
        # O(1) where their sum cancels (α = 4, β = 2.66: an entry of 5.5e-4 off by 1.8e-10)
        entropy_grad_rtol=1e-7,
        entropy_grad_floor=1.0,
    ),
]


BETA_SLOW = [pytest.param(c, marks=pytest.mark.slow) if c.dist == "beta" else c for c in CASES]
"""CASES, the Beta case marked slow where each draw takes a 107-node quadrature, and in float32
(seconds per test); test_beta_identities_by_quadrature_at_one_point and test_beta.py's torch
float32 test keep those behaviours in the default suite."""


# torch's autograd as the reference ------------------------------------------------------------


def _leaves(case: Case, params: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {
        name: torch.tensor(np.asarray(params[name], dtype=np.float64), requires_grad=True)
        for name in case.grad_params
    }


def torch_log_prob_and_grad(
    case: Case, params: dict[str, Any], value: Any
) -> tuple[float, dict[str, np.ndarray]]:
    """ln π(value) from torch.distributions and its gradient by autograd."""
    t = _leaves(case, params)
    lp = case.torch_dist(t, params).log_prob(torch.as_tensor(value))
    lp.backward()
    return lp.item(), {name: t[name].grad.numpy() for name in t}


def torch_entropy_and_grad(case: Case, params: dict[str, Any]) -> tuple[float, dict]:
    """H from torch.distributions and its gradient by autograd.

    ``.entropy()``, except for the multinomial: torch's Multinomial.entropy() is off by about
    2e-9 relative (n = 2, probs = [1, 1]: 1.0397207689352637 against the exact
    −(2·¼ ln ¼ + ½ ln ½) = 1.0397207708399179), so the reference there is −Σₓ P(x) ln P(x)
    summed over the support with torch's (exact) log_prob, differentiated by autograd.
    test_torch_multinomial_entropy_is_close_but_not_exact checks the gap.
    """
    t = _leaves(case, params)
    d = case.torch_dist(t, params)
    if case.dist == "multinomial":
        lp = torch.stack([d.log_prob(torch.as_tensor(x)) for x in support(case, params)])
        h = -(lp.exp() * lp).sum()
    else:
        h = d.entropy()
    h.backward()
    # torch's normal entropy does not involve loc at all: its gradient is None, i.e. 0.
    grads = {n: (g.grad.numpy() if g.grad is not None else np.zeros(g.shape)) for n, g in t.items()}
    return h.item(), grads


def support(case: Case, params: dict[str, Any]) -> list[Any]:
    """Every value of positive probability (the discrete ones), to sum over exactly."""
    if case.dist == "bernoulli":
        return [np.float64(0.0), np.float64(1.0)]
    form = case.grad_params[0]
    p = np.asarray(params[form])
    possible = p > 0 if form == "probs" else p > -np.inf
    if case.dist == "categorical":
        return [a for a in range(p.shape[-1]) if possible[a]]
    n = params["total_count"]
    return [
        np.array(x, dtype=np.float64)
        for x in _compositions(n, p.shape[-1])
        if all(possible[i] or x[i] == 0 for i in range(len(x)))
    ]


def _assert_close(actual: Any, expected: Any, rtol: float = RTOL, atol: float = 0.0) -> None:
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=rtol, atol=atol)


# log_prob and score against autograd -----------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=repr)
@given(data=st.data())
def test_log_prob_and_score_match_torch_autograd(case: Case, data: st.DataObject) -> None:
    params, value = case.draw(data, True)
    want_lp, want_e = torch_log_prob_and_grad(case, params, value)
    # a log-prob that cancels to 0 (Beta(1, 2) at ½: ln 2 + ln ½) is known to ε × its terms
    _assert_close(eligibility.log_prob(case.dist, value, **params), want_lp, atol=1e-14)
    got = eligibility.score(case.dist, value, **params)
    assert set(got) == set(case.grad_params)
    for name in case.grad_params:
        e, want = np.asarray(got[name]), want_e[name]
        # Relative error per entry, except that an entry which cancels to (nearly) 0, like
        # x − nπ = 1 − 4·¼, is measured against the size of the terms that cancelled.
        _assert_close(e, want, atol=RTOL * case.magnitude(params, value)[name])
        if name == "logits":  # an untaken −inf logit's eligibility is exactly 0, as in torch
            masked = np.isneginf(params[name])
            assert np.all(e[masked] == 0.0) and np.all(want[masked] == 0.0)


# score against central finite differences -----------------------------------------------------


def _finite_difference(case: Case, params: dict[str, Any], value: Any, name: str) -> np.ndarray:
    """∂ ln π / ∂θ by central differences of eligibility.log_prob, entry by entry.

    A zero weight sits on the boundary of the domain (w ≥ 0): there the one-sided
    second-order difference (−3 f(0) + 4 f(h) − f(2h)) / 2h is used.
    """
    theta = np.asarray(params[name], dtype=np.float64)

    def f(t: np.ndarray) -> float:
        return float(eligibility.log_prob(case.dist, value, **{**params, name: t}))

    out = np.zeros_like(theta)
    for idx in np.ndindex(theta.shape):
        if np.isinf(theta[idx]):
            out[idx] = np.nan  # a masked logit: no neighbourhood to difference over
            continue
        if name == "probs" and case.dist == "bernoulli":
            scale = min(theta[idx], 1 - theta[idx])  # stay inside [0, 1]
        elif name in ("probs", "scale"):
            scale = theta[idx] if theta[idx] > 0 else float(np.sum(theta))
        else:
            scale = max(1.0, abs(theta[idx]))
        h = 1e-5 * scale
        step = np.zeros_like(theta)
        step[idx] = h
        if name == "probs" and theta[idx] == 0:
            out[idx] = (-3 * f(theta) + 4 * f(theta + step) - f(theta + 2 * step)) / (2 * h)
        else:
            out[idx] = (f(theta + step) - f(theta - step)) / (2 * h)
    return out


@pytest.mark.parametrize("case", CASES, ids=repr)
@given(data=st.data())
def test_score_matches_central_differences(case: Case, data: st.DataObject) -> None:
    params, value = case.draw(data, True)
    got = eligibility.score(case.dist, value, **params)
    for name in case.grad_params:
        e = np.asarray(got[name])
        fd = _finite_difference(case, params, value, name)
        masked = np.isnan(fd)
        assert np.all(e[masked] == 0.0)
        # differences lose ~ε/h of |ln π|; measure the error against the largest entry.
        tol = 1e-6 * max(1.0, float(np.max(np.abs(e))))
        np.testing.assert_allclose(e[~masked], fd[~masked], rtol=1e-6, atol=tol)


# entropy and its gradient against autograd of torch's .entropy() ------------------------------


@pytest.mark.parametrize("case", CASES, ids=repr)
@given(data=st.data())
def test_entropy_and_gradient_match_torch_autograd(case: Case, data: st.DataObject) -> None:
    # no zero weights: the entropy gradient w.r.t. a zero weight is unbounded (and raises);
    # −inf logits are tested in test_entropy_gradient_with_masked_logits below.
    params, _ = case.draw(data, False)
    want_h, want_g = torch_entropy_and_grad(case, params)
    _assert_close(eligibility.entropy(case.dist, **params), want_h, atol=1e-12)
    got = eligibility.entropy_grad(case.dist, **params)
    assert set(got) == set(case.grad_params)
    for name in case.grad_params:
        # H sums terms of either sign, so its gradient can cancel to nearly 0: the error is
        # measured against the largest entry (torch differences the same terms).
        rtol = case.entropy_grad_rtol
        tol = rtol * max(case.entropy_grad_floor, float(np.max(np.abs(want_g[name]))))
        _assert_close(got[name], want_g[name], rtol=rtol, atol=tol)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.grad_params == ("logits",) and c.dist != "bernoulli"], ids=repr
)
def test_entropy_gradient_with_masked_logits(case: Case) -> None:
    z = np.array([0.3, -np.inf, -1.2, 2.0, -np.inf])
    params: dict[str, Any] = {"logits": z}
    if case.dist == "multinomial":
        params["total_count"] = 3
    want_h, want_g = torch_entropy_and_grad(case, params)
    _assert_close(eligibility.entropy(case.dist, **params), want_h)
    got = eligibility.entropy_grad(case.dist, **params)["logits"]
    _assert_close(got, want_g["logits"])
    assert got[1] == 0.0 and got[4] == 0.0


def test_torch_multinomial_entropy_is_close_but_not_exact() -> None:
    probs = torch.tensor([1.0, 1.0], dtype=torch.float64)
    exact = -(2 * 0.25 * np.log(0.25) + 0.5 * np.log(0.5))
    torch_h = TD.Multinomial(2, probs=probs).entropy().item()
    ours = float(eligibility.entropy("multinomial", total_count=2, probs=[1.0, 1.0]))
    assert ours == pytest.approx(exact, rel=4e-16, abs=0)  # within two ulps
    assert 1e-10 < abs(torch_h - exact) / exact < 1e-7


# Fisher information against E[e eᵀ] from autograd eligibilities --------------------------------


def _gauss_hermite(params: dict[str, Any], g: Callable[[Any], Any]) -> Any:
    """E[g(y)] for y ~ N(μ, σ²) by Gauss–Hermite quadrature, exact for polynomials of degree
    up to 2·20 − 1 (every eligibility product here is a polynomial of degree ≤ 4 in y)."""
    mu, sigma = float(params["loc"]), float(params["scale"])
    t, wt = np.polynomial.hermite_e.hermegauss(20)
    vals = np.array([g(np.float64(y)) for y in mu + sigma * t])
    return np.tensordot(wt / np.sqrt(2 * np.pi), vals, axes=([0], [0]))


def _tanh_sinh(params: dict[str, Any], g: Callable[[Any], Any], h: float = 1 / 16) -> Any:
    """E[g(y)] for y ~ Beta(α, β) by the tanh-sinh rule on (0, 1), density from log_prob.

    y = (1 + tanh(½π sinh t)) / 2 crowds the nodes double-exponentially at both ends, where the
    eligibilities' ln y and ln(1 − y) are singular; at step h = 1/16 (107 nodes) E[1], E[ln y]
    and Var[ln y] match their closed forms to 1e-14 for α, β ∈ [1, 20] (with scipy's density).
    Nodes that round to 0 or 1 carry no weight worth keeping there and are dropped.
    """
    t = np.arange(-3.5, 3.5 + h / 2, h)
    u = 0.5 * np.pi * np.sinh(t)
    y = 1.0 / (1.0 + np.exp(-2.0 * u))
    dy = h * 0.5 * np.pi * np.cosh(t) / (2.0 * np.cosh(u) ** 2)
    keep = (y > 0) & (y < 1)
    y = y[keep]
    w = dy[keep] * np.exp(np.asarray(eligibility.log_prob("beta", y, **params)))
    vals = np.array([g(np.float64(yi)) for yi in y])
    return np.tensordot(w, vals, axes=([0], [0]))


def _sum_over_support(case: Case, params: dict[str, Any], g: Callable[[Any], Any]) -> Any:
    """E[g(a)] = Σ_a π(a) g(a), exactly over the support (π from eligibility.log_prob)."""
    total = 0.0
    for a in support(case, params):
        pi = float(np.exp(eligibility.log_prob(case.dist, a, **params)))
        total = total + pi * g(a)
    return total


def _autograd_vector(case: Case, params: dict[str, Any], value: Any) -> np.ndarray:
    _, e = torch_log_prob_and_grad(case, params, value)
    return np.concatenate([np.ravel(e[name]) for name in case.grad_params])


@pytest.mark.parametrize("case", BETA_SLOW, ids=repr)
@given(data=st.data())
def test_fisher_equals_expected_outer_product_of_autograd_eligibilities(
    case: Case, data: st.DataObject
) -> None:
    params, _ = case.draw(data, True)
    got = np.asarray(eligibility.fisher(case.dist, **params))
    want = case.expect(case, params, lambda a: np.outer(*(2 * [_autograd_vector(case, params, a)])))
    if case.dist == "bernoulli":
        want = want[0, 0]
    # the sum over the support adds terms of either sign: measure against the largest entry.
    _assert_close(got, want, rtol=1e-9, atol=1e-9 * float(np.max(np.abs(want))))


# float32 agrees with float64 to float32 precision ---------------------------------------------


@pytest.mark.parametrize("case", BETA_SLOW, ids=repr)
@given(data=st.data())
def test_float32_matches_float64(case: Case, data: st.DataObject) -> None:
    params, value = case.draw(data, True)
    p32 = {
        k: (v if k == "total_count" else torch.tensor(np.asarray(v), dtype=torch.float32))
        for k, v in params.items()
    }
    got = eligibility.score(case.dist, value, **p32)
    want = eligibility.score(case.dist, value, **params)
    for name in case.grad_params:
        assert got[name].dtype == torch.float32
        e = np.asarray(want[name])
        tol = 1e-4 * max(1.0, float(np.max(np.abs(e))))
        np.testing.assert_allclose(got[name].numpy(), e, rtol=1e-4, atol=tol)


def test_cases_cover_every_distribution_and_parametrisation() -> None:
    covered = {(c.dist, c.grad_params[0]) for c in CASES}
    forms = {"probs", "logits"}
    want = {(d, f) for d in ("bernoulli", "categorical", "multinomial") for f in forms}
    assert covered == want | {("normal", "loc"), ("beta", "concentration1")}
    assert {c.dist for c in CASES} == set(eligibility.DISTRIBUTIONS)
    # and check() accepts exactly these forms
    for d, f in want:
        params: dict[str, Any] = {f: [0.5, 0.5] if d != "bernoulli" else 0.5}
        if d == "multinomial":
            params["total_count"] = 1
        assert check(d, params).form == f


# identities, exactly over the support ---------------------------------------------------------


def _expectation(case: Case, params: dict[str, Any], g: Callable[[Any], np.ndarray]) -> Any:
    """E[g(value)]: an exact sum over the support, or the case's quadrature."""
    return case.expect(case, params, g)


def _eligibility_vector(case: Case, params: dict[str, Any], value: Any) -> np.ndarray:
    e = eligibility.score(case.dist, value, **params)
    return np.concatenate([np.ravel(np.asarray(e[name])) for name in case.grad_params])


@pytest.mark.parametrize("case", CASES, ids=repr)
@given(data=st.data())
def test_probabilities_sum_to_one_over_the_enumerated_support(
    case: Case, data: st.DataObject
) -> None:
    params, _ = case.draw(data, True)
    assert _expectation(case, params, lambda a: np.float64(1.0)) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("case", BETA_SLOW, ids=repr)
@given(data=st.data())
def test_expected_eligibility_is_zero(case: Case, data: st.DataObject) -> None:
    """E_a[e] = Σ_a π_a ∂ ln π_a/∂θ = ∂(Σ_a π_a)/∂θ = ∂1/∂θ = 0.

    Except on a zero weight w_i = 0 (probs form): that category is never drawn, so the sum
    misses the one term ∂π_i/∂w_i = 1/S that would cancel the others, and E[e_i] = −n/S.
    """
    params, _ = case.draw(data, True)

    def e_and_size(a: Any) -> np.ndarray:  # both sums below in one pass over the support
        e = _eligibility_vector(case, params, a)
        return np.stack([e, np.abs(e)])

    mean, terms = _expectation(case, params, e_and_size)
    want = np.zeros_like(mean)
    if case.grad_params == ("probs",) and case.dist != "bernoulli":
        w = np.asarray(params["probs"])
        n = params.get("total_count", 1)
        want = np.where(w == 0, -n / np.sum(w), 0.0)
    # the sum cancels terms of either sign: its error is ε times the size of those terms
    np.testing.assert_allclose(mean, want, rtol=0, atol=1e-12 * float(np.max(terms)))


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.grad_params == ("probs",) and c.dist != "bernoulli"], ids=repr
)
@given(data=st.data())
def test_weighted_sum_of_probs_eligibilities_is_zero(case: Case, data: st.DataObject) -> None:
    """Σᵢ wᵢ eᵢ = 0 for every value: π(c w) = π(w), differentiate in c at c = 1 (Euler).

    Bernoulli probs are not relative weights (p is a probability, not renormalised), so it has
    no such identity and is left out.
    """
    params, _ = case.draw(data, True)
    w = np.asarray(params["probs"])
    for a in support(case, params):
        e = np.asarray(eligibility.score(case.dist, a, **params)["probs"])
        assert abs(float(np.sum(w * e))) <= 1e-12 * float(np.sum(np.abs(w * e)) + 1)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.grad_params == ("logits",) and c.dist != "bernoulli"], ids=repr
)
@given(data=st.data())
def test_sum_of_logits_eligibilities_is_zero(case: Case, data: st.DataObject) -> None:
    """Σᵢ eᵢ = 0 for every value: softmax(z + c) = softmax(z), differentiate in c.

    For a Bernoulli there is one logit and no shift invariance; it is left out.
    """
    params, _ = case.draw(data, True)
    for a in support(case, params):
        e = np.asarray(eligibility.score(case.dist, a, **params)["logits"])
        n = params.get("total_count", 1)
        assert abs(float(np.sum(e))) <= 4 * np.finfo(np.float64).eps * n * e.size


@pytest.mark.parametrize("case", BETA_SLOW, ids=repr)
@given(data=st.data())
def test_fisher_equals_expected_outer_product_of_our_eligibilities(
    case: Case, data: st.DataObject
) -> None:
    params, _ = case.draw(data, True)
    want = _expectation(
        case, params, lambda a: np.outer(*(2 * [_eligibility_vector(case, params, a)]))
    )
    got = np.asarray(eligibility.fisher(case.dist, **params))
    if case.dist == "bernoulli":
        want = want[0, 0]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10 * float(np.max(np.abs(want))))


def test_weights_times_100_give_eligibilities_100_times_smaller() -> None:
    w = np.array([0.69, 0.1, 0.2, 0.01])
    for a in range(4):
        e = eligibility.score("categorical", a, probs=w)["probs"]
        e100 = eligibility.score("categorical", a, probs=100 * w)["probs"]
        np.testing.assert_allclose(e100, e / 100, rtol=1e-14)
        # the log-probability itself does not move
        assert float(eligibility.log_prob("categorical", a, probs=100 * w)) == pytest.approx(
            float(eligibility.log_prob("categorical", a, probs=w)), rel=1e-15
        )
    x = np.array([2.0, 0.0, 1.0, 0.0])
    e = eligibility.score("multinomial", x, total_count=3, probs=w)["probs"]
    e100 = eligibility.score("multinomial", x, total_count=3, probs=100 * w)["probs"]
    np.testing.assert_allclose(e100, e / 100, rtol=1e-14)


def test_untaken_categories_get_minus_one_over_the_sum_of_weights() -> None:
    w = np.array([3.0, 0.0, 1.0, 4.0])  # Σw = 8; category 1 has weight 0 and is fine untaken
    e = eligibility.score("categorical", 2, probs=w)["probs"]
    np.testing.assert_array_equal(e, [-1 / 8, -1 / 8, 1 / 1 - 1 / 8, -1 / 8])
    x = np.array([1.0, 0.0, 2.0, 0.0])
    e = eligibility.score("multinomial", x, total_count=3, probs=w)["probs"]
    np.testing.assert_array_equal(e, [1 / 3 - 3 / 8, -3 / 8, 2 / 1 - 3 / 8, -3 / 8])


def test_masked_logits_get_exactly_zero_eligibility() -> None:
    z = np.array([0.5, -np.inf, 1.0, -np.inf])
    for a in (0, 2):
        e = eligibility.score("categorical", a, logits=z)["logits"]
        assert e[1] == 0.0 and e[3] == 0.0
        assert not np.signbit(e[1]) and not np.signbit(e[3])  # +0, not −0
    e = eligibility.score("multinomial", [2, 0, 1, 0], total_count=3, logits=z)["logits"]
    assert e[1] == 0.0 and e[3] == 0.0
    assert float(eligibility.entropy_grad("categorical", logits=z)["logits"][1]) == 0.0


def test_the_taken_logit_keeps_its_digits_when_nearly_certain() -> None:
    # 1 − π_a for z = [40, 0]: e⁻⁴⁰ / (1 + e⁻⁴⁰); computing 1 − π_a would give 0.
    z = np.array([40.0, 0.0])
    e = eligibility.score("categorical", 0, logits=z)["logits"]
    want = np.exp(-40.0) / (1 + np.exp(-40.0))
    np.testing.assert_allclose(e, [want, -want], rtol=1e-14)
    # Bernoulli y − σ(z) for y = 1 is σ(−z): checked against a 50-digit reference.
    from decimal import Decimal, getcontext

    getcontext().prec = 50
    for z_ in (-700.0, -30.0, -1.0, 0.0, 2.5, 30.0, 700.0):
        for y in (0.0, 1.0):
            exact = Decimal(y) - 1 / (1 + (-Decimal(z_)).exp())
            got = float(eligibility.score("bernoulli", y, logits=z_)["logits"])
            assert got == pytest.approx(float(exact), rel=1e-15)


def test_beta_identities_by_quadrature_at_one_point() -> None:
    """The slow Beta identities, once: E[1] = 1, E[e] = 0, F = E[e eᵀ] at α = 2.5, β = 1.5."""
    case = next(c for c in CASES if c.dist == "beta")
    params = {"concentration1": np.float64(2.5), "concentration0": np.float64(1.5)}
    e = {}  # one score per node, shared by the three expectations
    assert _expectation(case, params, lambda y: np.float64(1.0)) == pytest.approx(1.0, abs=1e-13)
    mean = _expectation(
        case, params, lambda y: e.setdefault(y, _eligibility_vector(case, params, y))
    )
    np.testing.assert_allclose(mean, 0.0, atol=1e-12)
    want = _expectation(case, params, lambda y: np.outer(e[y], e[y]))
    np.testing.assert_allclose(eligibility.fisher("beta", **params), want, rtol=1e-11)
