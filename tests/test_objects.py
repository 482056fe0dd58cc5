"""The object API delegates to the functions: same answers, checks at construction."""

from __future__ import annotations

import dataclasses
import doctest
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch

import eligibility
import eligibility.objects
from eligibility import Bernoulli, Beta, Categorical, Multinomial, Normal
from eligibility.distributions import REGISTRY

CASES: list[tuple[Any, str, dict[str, Any], Any]] = [
    (lambda: Bernoulli(probs=[0.3, 0.9]), "bernoulli", {"probs": [0.3, 0.9]}, [1.0, 0.0]),
    (lambda: Bernoulli(logits=-0.4), "bernoulli", {"logits": -0.4}, 1.0),
    (
        lambda: Categorical(probs=[0.69, 0.1, 0.2, 0.01]),
        "categorical",
        {"probs": [0.69, 0.1, 0.2, 0.01]},
        0,
    ),
    (
        lambda: Categorical(logits=[[0.1, -np.inf, 2.0], [1.0, 2.0, 3.0]]),
        "categorical",
        {"logits": [[0.1, -np.inf, 2.0], [1.0, 2.0, 3.0]]},
        [2, 1],
    ),
    (
        lambda: Multinomial(3, probs=[1.0, 2.0, 3.0]),
        "multinomial",
        {"total_count": 3, "probs": [1.0, 2.0, 3.0]},
        [1.0, 0.0, 2.0],
    ),
    (
        lambda: Multinomial(total_count=2, logits=[0.0, -np.inf, 1.0]),
        "multinomial",
        {"total_count": 2, "logits": [0.0, -np.inf, 1.0]},
        [1.0, 0.0, 1.0],
    ),
    (lambda: Normal(0.5, [1.0, 2.0]), "normal", {"loc": 0.5, "scale": [1.0, 2.0]}, 1.5),
    (
        lambda: Beta([2.0, 0.5], 3.0),
        "beta",
        {"concentration1": [2.0, 0.5], "concentration0": 3.0},
        [0.3, 0.9],
    ),
]


@pytest.mark.parametrize(("make", "dist", "params", "value"), CASES)
def test_methods_equal_the_functions(make: Any, dist: str, params: dict, value: Any) -> None:
    d = make()
    np.testing.assert_array_equal(d.log_prob(value), eligibility.log_prob(dist, value, **params))
    got, want = d.score(value), eligibility.score(dist, value, **params)
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    np.testing.assert_array_equal(d.entropy(), eligibility.entropy(dist, **params))
    np.testing.assert_array_equal(d.fisher(), eligibility.fisher(dist, **params))
    got, want = d.entropy_grad(), eligibility.entropy_grad(dist, **params)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_parameters_are_checked_once_at_construction() -> None:
    d = Categorical(probs=[0.2, 0.3, 0.5])
    with mock.patch.object(eligibility.objects, "check", side_effect=AssertionError("re-check")):
        for a in range(3):
            d.score(a)
            d.log_prob(a)
        d.entropy()
        d.entropy_grad()
        d.fisher()


def test_the_math_is_not_repeated_here() -> None:
    # the methods call the kernels the registry's spec holds: a changed kernel changes the object
    d = Categorical(logits=[0.0, 1.0])
    spec = REGISTRY["categorical"]
    k = mock.Mock(return_value=(np.array([7.0, 8.0]),))
    patched = dataclasses.replace(
        spec, forms={**spec.forms, "logits": dataclasses.replace(spec.forms["logits"], score=k)}
    )
    with mock.patch.dict(REGISTRY, {"categorical": patched}):
        assert d.score(0)["logits"].tolist() == [7.0, 8.0]
    k.assert_called_once()


@pytest.mark.parametrize("cls", [Bernoulli, Categorical])
def test_exactly_one_of_probs_or_logits(cls: Any) -> None:
    with pytest.raises(ValueError, match=r"exactly one of probs= or logits=, got both"):
        cls(probs=[0.5, 0.5], logits=[0.0, 0.0])
    with pytest.raises(ValueError, match=r"exactly one of probs= or logits=, got neither"):
        cls()
    with pytest.raises(TypeError):
        cls([0.5, 0.5])  # keyword-only, as the view must be named


def test_multinomial_and_normal_constructors() -> None:
    with pytest.raises(ValueError, match="probs= or logits=, got both"):
        Multinomial(2, probs=[1.0, 1.0], logits=[0.0, 0.0])
    with pytest.raises(ValueError, match="total_count"):
        Multinomial(-1, probs=[1.0, 1.0])
    assert Multinomial(probs=[1.0, 1.0]).total_count == 1  # torch's default
    assert Multinomial(4, logits=[0.0, 0.0]).total_count == 4
    with pytest.raises(ValueError, match=r"scale: -1; scale must be finite and > 0"):
        Normal(0.0, -1.0)
    with pytest.raises(ValueError, match=r"probs: negative weight -1 at index \(0,\)"):
        Categorical(probs=[-1.0, 2.0])
    with pytest.raises(ValueError, match=r"probs: 2 is outside \[0, 1\]"):
        Bernoulli(probs=2.0)
    with pytest.raises(
        ValueError, match=r"concentration0: 0; concentration0 must be finite and > 0"
    ):
        Beta(1.0, 0.0)
    with pytest.raises(TypeError):
        Beta(1.0)  # both concentrations, as torch


def test_values_are_checked_on_every_call() -> None:
    d = Categorical(probs=[1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="category 3"):
        d.score(3)
    with pytest.raises(ValueError, match="probability zero"):
        d.log_prob(1)
    with pytest.raises(ValueError, match="entropy gradient is unbounded"):
        d.entropy_grad()


def test_torch_in_torch_out_and_params_and_repr() -> None:
    d = Normal(torch.tensor([0.0, 1.0]), torch.tensor(2.0))
    e = d.score(torch.tensor([1.0, 1.0]))
    assert e["loc"].dtype == torch.float32 and e["scale"].shape == (2,)
    assert set(d.params) == {"loc", "scale"}
    assert repr(Multinomial(2, probs=[1.0, 1.0])).startswith("Multinomial(total_count=2, probs=")
    assert repr(Categorical(logits=[0.0])).startswith("Categorical(logits=")
    assert repr(Beta(2.0, 3.0)).startswith("Beta(concentration1=")


def test_module_doctest_runs() -> None:
    failures, tried = doctest.testmod(eligibility.objects, verbose=False)
    assert tried >= 3 and failures == 0
