"""Where we differ from torch.distributions, on purpose, checked both ways.

torch clamps a normalised probability into [eps, 1 − eps] before taking its log (its
``probs_to_logits``). At a probability of exactly 0 that turns ln 0 = −∞ into ln eps, a finite
log-probability with a gradient of 0 (the clamp cuts the gradient); at a probability of exactly 1
it cuts the gradient too. We raise instead at probability 0, where the eligibility does not
exist, and give the exact (one-sided) derivative at probability 1.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import eligibility

TD = torch.distributions
EPS32 = torch.finfo(torch.float32).eps
EPS64 = torch.finfo(torch.float64).eps


def _torch_lp_grad(make, param: torch.Tensor, value: torch.Tensor) -> tuple[float, torch.Tensor]:
    param = param.clone().requires_grad_(True)
    lp = make(param).log_prob(value)
    lp.backward()
    return lp.item(), param.grad


# probability exactly 0: torch answers ln eps with a zero gradient; we raise ----------------------


def test_torch_clamps_a_zero_probability_category_to_eps_and_we_raise() -> None:
    lp, g = _torch_lp_grad(
        lambda w: TD.Categorical(probs=w), torch.tensor([1.0, 0.0]), torch.tensor(1)
    )
    assert lp == pytest.approx(math.log(EPS32), rel=1e-6)
    assert round(lp, 2) == -15.94  # the figure quoted in docs/eligibilities.md (float32)
    assert torch.all(g == 0)
    lp64, g64 = _torch_lp_grad(
        lambda w: TD.Categorical(probs=w),
        torch.tensor([1.0, 0.0], dtype=torch.float64),
        torch.tensor(1),
    )
    assert lp64 == pytest.approx(math.log(EPS64), rel=1e-12)  # −36.04 in float64
    assert torch.all(g64 == 0)
    with pytest.raises(ValueError, match=r"probability zero.*weight 0") as err:
        eligibility.score("categorical", 1, probs=torch.tensor([1.0, 0.0]))
    assert "eligibility does not exist" in str(err.value)
    with pytest.raises(ValueError, match="probability zero"):
        eligibility.log_prob("categorical", 1, probs=[1.0, 0.0])


def test_torch_clamps_a_zero_probability_bernoulli_outcome_and_we_raise() -> None:
    lp, g = _torch_lp_grad(lambda p: TD.Bernoulli(probs=p), torch.tensor(0.0), torch.tensor(1.0))
    assert round(lp, 2) == -15.94 and g.item() == 0.0
    with pytest.raises(ValueError, match=r"value: 1 has probability zero"):
        eligibility.score("bernoulli", 1, probs=torch.tensor(0.0))
    with pytest.raises(ValueError, match=r"value: 0 has probability zero"):
        eligibility.score("bernoulli", 0, probs=1.0)


def test_torch_clamps_a_count_on_a_zero_weight_and_we_raise() -> None:
    lp, g = _torch_lp_grad(
        lambda w: TD.Multinomial(2, probs=w), torch.tensor([1.0, 0.0]), torch.tensor([1.0, 1.0])
    )
    # ln 2 (two orders) + ln 1 + ln eps
    assert lp == pytest.approx(math.log(2) + math.log(EPS32), rel=1e-6)
    assert torch.all(g == 0)
    with pytest.raises(ValueError, match="falls on a category of probability zero"):
        eligibility.score("multinomial", [1, 1], total_count=2, probs=[1.0, 0.0])


def test_torch_returns_minus_inf_for_a_masked_logit_and_we_raise() -> None:
    lp, g = _torch_lp_grad(
        lambda z: TD.Categorical(logits=z), torch.tensor([0.0, -math.inf]), torch.tensor(1)
    )
    assert lp == -math.inf
    assert g.tolist() == [-1.0, 1.0]  # a finite "gradient" of a log-probability that is −∞
    with pytest.raises(ValueError, match=r"category 1 .* probability zero \(logit −inf\)"):
        eligibility.score("categorical", 1, logits=[0.0, -np.inf])


def test_a_positive_probability_below_eps_is_exact_here_and_clamped_in_torch() -> None:
    w = torch.tensor([1.0, 1e-20], dtype=torch.float64)
    lp, g = _torch_lp_grad(lambda w: TD.Categorical(probs=w), w, torch.tensor(1))
    assert lp == pytest.approx(math.log(EPS64))
    assert torch.all(g == 0)
    ours = float(eligibility.log_prob("categorical", 1, probs=w))
    assert ours == pytest.approx(math.log(1e-20) - math.log1p(1e-20), rel=1e-15)
    e = eligibility.score("categorical", 1, probs=w)["probs"]
    np.testing.assert_allclose(e.numpy(), [-1 / (1 + 1e-20), 1e20 - 1 / (1 + 1e-20)], rtol=1e-15)


# probability exactly 1: torch zeroes the gradient; ours is the one-sided derivative ---------


def test_a_certain_category_keeps_its_eligibility_here_and_loses_it_in_torch() -> None:
    w = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    _, g = _torch_lp_grad(lambda w: TD.Categorical(probs=w), w, torch.tensor(0))
    assert torch.all(g == 0)
    e = eligibility.score("categorical", 0, probs=w)["probs"].numpy()
    np.testing.assert_array_equal(e, [0.0, -1.0, -1.0])
    # one-sided difference into the domain (w ≥ 0): ln π₀ = −ln(1 + h) for w₁ = h
    for i in (1, 2):
        h = 1e-7
        step = np.zeros(3)
        step[i] = h
        f = [
            float(eligibility.log_prob("categorical", 0, probs=np.array([1.0, 0, 0]) + k * step))
            for k in (0, 1, 2)
        ]
        assert (-3 * f[0] + 4 * f[1] - f[2]) / (2 * h) == pytest.approx(e[i], rel=1e-6)


@pytest.mark.parametrize(("p", "y", "want"), [(0.0, 0.0, -1.0), (1.0, 1.0, 1.0)])
def test_a_certain_bernoulli_outcome_keeps_its_eligibility_here(p: float, y: float, want: float):
    pt = torch.tensor(p, dtype=torch.float64)
    lp, g = _torch_lp_grad(
        lambda q: TD.Bernoulli(probs=q), pt, torch.tensor(y, dtype=torch.float64)
    )
    assert g.item() == 0.0 and abs(lp) <= 2 * EPS64  # ln(1 − eps) or 0
    # ln P(y) = ln(1 − p) at p = 0 (y = 0) has derivative −1; ln p at p = 1 (y = 1) has +1
    assert float(eligibility.score("bernoulli", y, probs=p)["probs"]) == want
    assert float(eligibility.log_prob("bernoulli", y, probs=p)) == 0.0
