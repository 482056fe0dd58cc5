"""The public functions: the issue's example, bad input, array libraries and dtypes, batching."""

from __future__ import annotations

import doctest
import itertools
from typing import Any

import numpy as np
import pytest
import torch

import eligibility

# the issue's example ----------------------------------------------------------------------------


def test_done_when_example() -> None:
    e = eligibility.score("categorical", 0, probs=[0.69, 0.1, 0.2, 0.01])["probs"]
    assert isinstance(e, np.ndarray) and e.dtype == np.float64
    np.testing.assert_array_equal(np.round(e, 4), [0.4493, -1.0, -1.0, -1.0])
    assert e[0] == pytest.approx(1 / 0.69 - 1)


def test_pytorch_snippet_of_the_issue_is_pi_a_times_eligibility() -> None:
    """∂ exp(ln π_a)/∂w = π_a e: torch's [0.31, −0.69, −0.69, −0.69], from the core."""
    w = torch.tensor([[0.69, 0.1, 0.2, 0.01]], requires_grad=True)
    torch.distributions.Categorical(probs=w).log_prob(torch.tensor([0])).exp().sum().backward()
    pi_a = torch.exp(eligibility.log_prob("categorical", 0, probs=w.detach()))
    e = eligibility.score("categorical", 0, probs=w.detach())["probs"]
    assert e.dtype == torch.float32
    torch.testing.assert_close(pi_a[..., None] * e, w.grad)
    np.testing.assert_allclose(w.grad.numpy()[0], [0.31, -0.69, -0.69, -0.69], atol=1e-6)


def test_package_doctest_runs() -> None:
    failures, tried = doctest.testmod(eligibility, verbose=False)
    assert tried >= 3 and failures == 0


# bad input: ValueError naming the parameter (and index/value) ----------------------------------

BAD = [
    # (dist, value, params, words the message must contain)
    ("categorical", 0, {"probs": [0.5, -0.1, 0.6]}, ["probs", "negative", "-0.1", "(1,)"]),
    ("categorical", 0, {"probs": [0.5, np.nan]}, ["probs", "NaN", "(1,)"]),
    ("categorical", 0, {"logits": [0.5, np.nan]}, ["logits", "NaN", "(1,)"]),
    ("categorical", 0, {"probs": [0.0, 0.0]}, ["probs", "sum to 0"]),
    ("categorical", 0, {"probs": [[1.0, 1.0], [0.0, 0.0]]}, ["probs", "sum to 0", "(1,)"]),
    ("categorical", 0, {"probs": [1.0, np.inf]}, ["probs", "infinite", "(1,)"]),
    ("categorical", 0, {"probs": [1e308, 1e308]}, ["probs", "sum to infinity"]),
    ("categorical", 0, {"logits": [np.inf, 0.0]}, ["logits", "+inf", "(0,)"]),
    ("categorical", 0, {"logits": [-np.inf, -np.inf]}, ["logits", "every entry is −inf"]),
    ("categorical", 0, {"probs": [1.0, 1.0], "logits": [1.0, 1.0]}, ["probs=", "logits=", "both"]),
    ("categorical", 0, {}, ["probs=", "logits=", "neither"]),
    ("categorical", 0, {"probs": 0.5}, ["probs", "scalar"]),
    ("categorical", 0, {"probs": []}, ["probs", "empty"]),
    ("categorical", 0, {"probs": "abc"}, ["probs", "numbers"]),
    ("categorical", 0, {"prob": [1.0]}, ["'prob'", "probs="]),
    ("categorical", 3, {"probs": [1.0, 1.0, 1.0]}, ["value", "category 3", "outside {0, …, 2}"]),
    ("categorical", -1, {"probs": [1.0, 1.0]}, ["value", "-1", "outside"]),
    ("categorical", 0.5, {"probs": [1.0, 1.0]}, ["value", "0.5", "not an integer"]),
    ("categorical", [0, 1.5], {"probs": [1.0, 1.0]}, ["value", "1.5", "(1,)"]),
    ("categorical", np.nan, {"probs": [1.0, 1.0]}, ["value", "nan", "not a finite"]),
    ("categorical", None, {"probs": [1.0, 1.0]}, ["value", "action"]),
    ("categorical", 1, {"probs": [1.0, 0.0]}, ["value", "category 1", "probability zero"]),
    ("categorical", 1, {"logits": [0.0, -np.inf]}, ["value", "probability zero", "−inf"]),
    ("categorical", [0, 1, 0], {"probs": [[1.0, 1.0], [1.0, 1.0]]}, ["value", "broadcast"]),
    ("bernoulli", 1, {"probs": 1.5}, ["probs", "1.5", "outside [0, 1]"]),
    ("bernoulli", 1, {"probs": [0.5, -0.2]}, ["probs", "-0.2", "(1,)", "outside [0, 1]"]),
    ("bernoulli", 1, {"logits": np.inf}, ["logits", "inf", "finite"]),
    ("bernoulli", 2, {"probs": 0.5}, ["value", "2", "0 or 1"]),
    ("bernoulli", 0.5, {"logits": 0.0}, ["value", "0.5", "0 or 1"]),
    ("bernoulli", 1, {"probs": 0.0}, ["value", "probability zero"]),
    ("bernoulli", [0, 0], {"probs": [0.5, 1.0]}, ["value", "(1,)", "probability zero"]),
    ("multinomial", [1, 1], {"probs": [1.0, 1.0]}, ["total_count="]),
    ("multinomial", [1, 1], {"total_count": 2.5, "probs": [1.0, 1.0]}, ["total_count", "2.5"]),
    ("multinomial", [1, 1], {"total_count": -1, "probs": [1.0, 1.0]}, ["total_count", "-1"]),
    ("multinomial", [1, 1], {"total_count": "a", "probs": [1.0, 1.0]}, ["total_count", "'a'"]),
    ("multinomial", [1, 1], {"total_count": [2], "probs": [1.0, 1.0]}, ["total_count", "single"]),
    ("multinomial", [1, 2], {"total_count": 2, "probs": [1.0, 1.0]}, ["value", "sum to 3", "2"]),
    ("multinomial", [1, 1, 0], {"total_count": 2, "probs": [1.0, 1.0]}, ["value", "length 2"]),
    ("multinomial", [2.5, -0.5], {"total_count": 2, "probs": [1, 1]}, ["value", "2.5", "(0,)"]),
    ("multinomial", [1, 1], {"total_count": 2, "probs": [1.0, -1.0]}, ["probs", "negative"]),
    ("multinomial", [1, 1], {"total_count": 2, "probs": [1.0, 0.0]}, ["value", "(1,)", "zero"]),
    ("multinomial", [0, 2], {"total_count": 2, "logits": [0.0, -np.inf]}, ["value", "zero"]),
    ("normal", 0.0, {"loc": 0.0, "scale": 0.0}, ["scale", "0", "> 0"]),
    ("normal", 0.0, {"loc": 0.0, "scale": [1.0, -2.0]}, ["scale", "-2", "(1,)"]),
    ("normal", 0.0, {"loc": 0.0, "scale": np.inf}, ["scale", "inf"]),
    ("normal", 0.0, {"loc": np.nan, "scale": 1.0}, ["loc", "NaN"]),
    ("normal", 0.0, {"loc": np.inf, "scale": 1.0}, ["loc", "inf"]),
    ("normal", 0.0, {"loc": 0.0}, ["scale"]),
    ("normal", np.inf, {"loc": 0.0, "scale": 1.0}, ["value", "inf"]),
    ("beta", 0.3, {"concentration1": 0.0, "concentration0": 1.0}, ["concentration1", "0", "> 0"]),
    (
        "beta",
        0.3,
        {"concentration1": 2.0, "concentration0": [1.0, -1.0]},
        ["concentration0", "(1,)"],
    ),
    ("beta", 0.3, {"concentration1": np.inf, "concentration0": 1.0}, ["concentration1", "inf"]),
    ("beta", 0.3, {"concentration1": np.nan, "concentration0": 1.0}, ["concentration1", "NaN"]),
    ("beta", 0.3, {"concentration1": 2.0}, ["concentration0"]),
    ("beta", 0.3, {"alpha": 2.0, "beta": 3.0}, ["'alpha'", "concentration1="]),
    ("beta", 1.0, {"concentration1": 2.0, "concentration0": 3.0}, ["value", "1", "(0, 1)"]),
    ("beta", [0.5, 0.0], {"concentration1": 2.0, "concentration0": 3.0}, ["value", "(1,)"]),
    ("beta", np.nan, {"concentration1": 2.0, "concentration0": 3.0}, ["value", "nan"]),
    ("poisson", 0, {"rate": 1.0}, ["'poisson'", "categorical"]),
]


@pytest.mark.parametrize(("dist", "value", "params", "words"), BAD)
def test_bad_input_raises_value_error_naming_it(
    dist: str, value: Any, params: dict[str, Any], words: list[str]
) -> None:
    for fn in (eligibility.score, eligibility.log_prob):
        with pytest.raises(ValueError) as err:
            fn(dist, value, **params)
        for word in words:
            assert word in str(err.value), (word, str(err.value))


@pytest.mark.parametrize(
    ("fn", "dist", "params", "words"),
    [
        (eligibility.entropy_grad, "categorical", {"probs": [1.0, 0.0]}, ["probs", "(1,)"]),
        (
            eligibility.entropy_grad,
            "multinomial",
            {"total_count": 2, "probs": [0.0, 1.0]},
            ["(0,)"],
        ),
        (eligibility.entropy_grad, "bernoulli", {"probs": [0.5, 1.0]}, ["probs", "1", "(1,)"]),
        (eligibility.fisher, "bernoulli", {"probs": 0.0}, ["probs", "0", "unbounded"]),
        (eligibility.entropy, "categorical", {"probs": [-1.0, 2.0]}, ["probs", "negative"]),
        (eligibility.fisher, "normal", {"loc": 0.0, "scale": -1.0}, ["scale", "-1"]),
        (
            eligibility.entropy_grad,
            "beta",
            {"concentration1": -1.0, "concentration0": 1.0},
            ["concentration1", "-1"],
        ),
    ],
)
def test_bad_input_to_entropy_and_fisher(fn: Any, dist: str, params: dict, words: list) -> None:
    with pytest.raises(ValueError) as err:
        fn(dist, **params)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_mixing_numpy_parameters_and_a_torch_value_says_so() -> None:
    with pytest.raises(ValueError, match="torch array but the parameters are numpy"):
        eligibility.score("categorical", torch.tensor(0), probs=np.array([1.0, 1.0]))
    with pytest.raises(ValueError, match="different libraries"):
        eligibility.score("normal", 0.0, loc=np.float64(0.0), scale=torch.tensor(1.0))


def test_zero_weights_untaken_and_masked_logits_are_fine() -> None:
    """An untaken zero weight or −inf logit has an eligibility, worked out by hand here."""
    # probs: eᵢ = δᵢₐ / w_a − 1 / Σw, the zero weight included (it sits in the normaliser)
    e = eligibility.score("categorical", 0, probs=[1.0, 0.0, 2.0])["probs"]
    np.testing.assert_allclose(e, [1 - 1 / 3, -1 / 3, -1 / 3], rtol=1e-15)
    # logits: e = onehot(a) − softmax(z), exactly +0 on the masked category
    pi0, pi2 = 1 / (1 + np.e), np.e / (1 + np.e)  # softmax([1, −inf, 2])
    e = eligibility.score("categorical", 0, logits=[1.0, -np.inf, 2.0])["logits"]
    np.testing.assert_allclose(e, [pi2, 0.0, -pi2], rtol=1e-15)
    assert e[1] == 0.0 and not np.signbit(e[1])
    # multinomial logits: e = x − n softmax(z), exactly 0 on the masked category
    e = eligibility.score("multinomial", [1, 0, 1], total_count=2, logits=[1.0, -np.inf, 2.0])
    np.testing.assert_allclose(e["logits"], [1 - 2 * pi0, 0.0, 1 - 2 * pi2], rtol=1e-14)
    assert e["logits"][1] == 0.0
    # a Bernoulli unit with p = 0 and y = 0: probability 1, ln P = 0, e = −1/(1 − p) = −1
    assert float(eligibility.log_prob("bernoulli", 0, probs=0.0)) == 0.0
    assert float(eligibility.score("bernoulli", 0, probs=0.0)["probs"]) == -1.0


# array library, dtype and device in = out -------------------------------------------------------

ONE_OF_EACH = [
    ("categorical", 1, {"probs": [0.2, 0.3, 0.5]}),
    ("categorical", 2, {"logits": [0.2, -np.inf, 0.5]}),
    ("bernoulli", 1, {"probs": 0.3}),
    ("bernoulli", 0, {"logits": -0.4}),
    ("multinomial", [1, 0, 2], {"total_count": 3, "probs": [0.2, 0.3, 0.5]}),
    ("multinomial", [1, 0, 2], {"total_count": 3, "logits": [0.2, 0.3, 0.5]}),
    ("normal", 0.7, {"loc": 0.2, "scale": 1.5}),
    ("beta", 0.3, {"concentration1": 2.0, "concentration0": 3.0}),
]


def _convert(params: dict[str, Any], to: Any) -> dict[str, Any]:
    return {k: (v if k == "total_count" else to(v)) for k, v in params.items()}


def _outputs(dist: str, value: Any, params: dict[str, Any]) -> list[Any]:
    out = [eligibility.log_prob(dist, value, **params), eligibility.entropy(dist, **params)]
    out += list(eligibility.score(dist, value, **params).values())
    out.append(eligibility.fisher(dist, **params))
    if "probs" not in params or dist == "normal":
        out += list(eligibility.entropy_grad(dist, **params).values())
    return out


@pytest.mark.parametrize(("dist", "value", "params"), ONE_OF_EACH)
def test_python_lists_give_float64_numpy(dist: str, value: Any, params: dict) -> None:
    for out in _outputs(dist, value, params):
        assert isinstance(out, np.ndarray | np.floating), type(out)
        assert out.dtype == np.float64


@pytest.mark.parametrize(("dist", "value", "params"), ONE_OF_EACH)
def test_numpy_in_numpy_out(dist: str, value: Any, params: dict) -> None:
    """float32 and float64 in one test, a failure's message naming the dtype."""
    want = _outputs(dist, value, params)
    for dtype in (np.float32, np.float64):
        np_params = _convert(params, lambda v, d=dtype: np.asarray(v, dtype=d))
        for got, ref in zip(_outputs(dist, value, np_params), want, strict=True):
            assert isinstance(got, np.ndarray | np.floating) and got.dtype == dtype, dtype
            rtol = 1e-5 if dtype == np.float32 else 1e-15
            np.testing.assert_allclose(got, ref, rtol=rtol, err_msg=str(dtype))


def _torch_rtol(dtype: Any) -> float:
    """Every distribution, Beta's trigamma terms included, within a few ulps in float64."""
    return 1e-5 if dtype == torch.float32 else 1e-14


@pytest.mark.parametrize(("dist", "value", "params"), ONE_OF_EACH)
def test_torch_in_torch_out(dist: str, value: Any, params: dict) -> None:
    """float32 and float64 in one test, a failure's message naming the dtype."""
    want = _outputs(dist, value, params)
    tv = torch.tensor(value)
    for dtype in (torch.float32, torch.float64):
        t_params = _convert(params, lambda v, d=dtype: torch.tensor(v, dtype=d))
        for got, ref in zip(_outputs(dist, value, t_params), want, strict=True):
            assert isinstance(got, torch.Tensor) and got.dtype == dtype, dtype
            assert got.device == torch.device("cpu")
            # torch's lgamma and libm's (NumPy's) differ in the last bits: a few ulps, not 1
            np.testing.assert_allclose(
                got.numpy(), ref, rtol=_torch_rtol(dtype), err_msg=str(dtype)
            )
        # a torch value with torch parameters
        for got in eligibility.score(dist, tv, **t_params).values():
            assert isinstance(got, torch.Tensor) and got.dtype == dtype, dtype
    # a torch value with list parameters
    for got in eligibility.score(dist, tv, **params).values():
        assert isinstance(got, torch.Tensor)


# batches broadcast like torch, checked against a plain loop -------------------------------------


def _loop_reference(dist: str, value: np.ndarray, params: dict[str, Any], event: int) -> dict:
    """score() one example at a time over the broadcast batch shape."""
    arrays = {k: np.asarray(v) for k, v in params.items() if k != "total_count"}
    batch_shapes = [a.shape[: a.ndim - event] for a in arrays.values()]
    batch_shapes.append(value.shape[: value.ndim - (1 if dist == "multinomial" else 0)])
    batch = np.broadcast_shapes(*batch_shapes)
    out: dict[str, np.ndarray] = {}
    for idx in itertools.product(*(range(n) for n in batch)):

        def pick(a: np.ndarray, ev: int, idx: tuple[int, ...] = idx) -> np.ndarray:
            b = np.broadcast_to(a, batch + a.shape[a.ndim - ev :])
            return b[idx]

        one = {k: pick(v, event) for k, v in arrays.items()}
        if "total_count" in params:
            one["total_count"] = params["total_count"]
        v = pick(value, 1 if dist == "multinomial" else 0)
        for name, e in eligibility.score(dist, v, **one).items():
            out.setdefault(name, np.zeros(batch + np.shape(e)))[idx] = e
    return out


BATCHED = [
    # value batch against parameter batch
    ("categorical", np.array([[0], [2]]), {"probs": np.array([[1.0, 2, 3], [3, 0, 1], [1, 1, 1]])}),
    ("categorical", np.array([0, 1, 2]), {"logits": np.array([0.1, -0.3, 2.0])}),
    ("categorical", np.array(2), {"logits": np.array([[0.1, -np.inf, 2.0], [1, 2, 3]])}),
    ("bernoulli", np.array([[0.0, 1.0]]), {"probs": np.array([[0.2], [0.7], [0.5]])}),
    ("bernoulli", np.array([1.0, 0.0, 1.0]), {"logits": np.array(0.3)}),
    (
        "multinomial",
        np.array([[2.0, 0, 1], [0, 3, 0]]),
        {"total_count": 3, "probs": np.array([[[1.0, 2, 3]], [[2.0, 1, 1]]])},
    ),
    ("multinomial", np.array([[1.0, 1, 1], [3, 0, 0]]), {"total_count": 3, "logits": np.zeros(3)}),
    (
        "normal",
        np.array([[0.1, 2.0, -1.0]]),
        {"loc": np.array([[0.0], [1.0]]), "scale": np.array([1.0, 2.0, 0.5])},
    ),
]


@pytest.mark.parametrize(("dist", "value", "params"), BATCHED)
def test_batched_score_matches_a_plain_loop(dist: str, value: np.ndarray, params: dict) -> None:
    event = 1 if dist in ("categorical", "multinomial") else 0
    got = eligibility.score(dist, value, **params)
    want = _loop_reference(dist, value, params, event)
    assert set(got) == set(want)
    for name in want:
        assert got[name].shape == want[name].shape
        np.testing.assert_allclose(got[name], want[name], rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize(("dist", "value", "params"), BATCHED)
def test_batched_log_prob_matches_torch_broadcasting(
    dist: str, value: np.ndarray, params: dict
) -> None:
    t = {k: (v if k == "total_count" else torch.tensor(v)) for k, v in params.items()}
    if dist == "categorical":
        d = torch.distributions.Categorical(**t)
        tv = torch.tensor(value)
    elif dist == "bernoulli":
        d = torch.distributions.Bernoulli(**t)
        tv = torch.tensor(value)
    elif dist == "multinomial":
        d = torch.distributions.Multinomial(**t)
        tv = torch.tensor(value)
    else:
        d = torch.distributions.Normal(t["loc"], t["scale"])
        tv = torch.tensor(value)
    want = d.log_prob(tv).numpy()
    got = eligibility.log_prob(dist, value, **params)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_batched_entropy_and_fisher_match_a_plain_loop() -> None:
    w = np.array([[1.0, 2, 3], [3, 0.5, 1]])
    z = np.array([[0.1, -np.inf, 2.0], [1, 2, 3]])
    for dist, params, n in [
        ("categorical", {"probs": w}, None),
        ("categorical", {"logits": z}, None),
        ("multinomial", {"probs": w}, 4),
        ("multinomial", {"logits": z}, 4),
    ]:
        extra = {} if n is None else {"total_count": n}
        for fn in (eligibility.entropy, eligibility.fisher):
            got = fn(dist, **params, **extra)
            rows = [fn(dist, **{k: v[i] for k, v in params.items()}, **extra) for i in range(2)]
            np.testing.assert_allclose(got, np.stack(rows), rtol=1e-15)
        if "logits" in params:
            got = eligibility.entropy_grad(dist, **params, **extra)["logits"]
            rows = [
                eligibility.entropy_grad(dist, logits=z[i], **extra)["logits"] for i in range(2)
            ]
            np.testing.assert_allclose(got, np.stack(rows), rtol=1e-15)
    sigma = np.array([0.5, 1.0, 2.0])
    f = eligibility.fisher("normal", loc=0.0, scale=sigma)
    assert f.shape == (3, 2, 2)
    for i, s in enumerate(sigma):
        np.testing.assert_allclose(f[i], [[1 / s**2, 0], [0, 2 / s**2]])
