"""The Beta policy head (--continuous-head beta) for bounded Box actions (Chou et al., 2017)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

import test_reinforce_toyenvs as toy
from eligibility.reinforce import Config, train
from eligibility.reinforce.heads import BetaHead
from eligibility.reinforce.spaces import head_for_space

BOX = spaces.Box(np.array([-2.0, 0.0]), np.array([1.0, 5.0]), dtype=np.float64)


def _head_and_point(seed=0):
    head = head_for_space(BOX, "beta")
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(5, head.n_out))
    y = head.sample(z, None, rng)
    return head, z, y


def _fd(f, z, eps=1e-6):
    g = np.zeros_like(z)
    for idx in np.ndindex(*z.shape):
        zp, zm = z.copy(), z.copy()
        zp[idx] += eps
        zm[idx] -= eps
        g[idx] = (f(zp)[idx[0]] - f(zm)[idx[0]]) / (2 * eps)
    return g


def test_the_map_chooses_beta_only_when_asked_and_only_for_finite_bounds():
    assert isinstance(head_for_space(BOX, "beta"), BetaHead)
    assert head_for_space(BOX).kind == "normal"
    with pytest.raises(ValueError, match="finite action bounds"):
        head_for_space(spaces.Box(-np.inf, np.inf, (2,)), "beta")


def test_eligibility_is_the_derivative_of_log_prob_in_z():
    head, z, y = _head_and_point()
    e, none = head.score(z, None, y)
    assert none is None
    np.testing.assert_allclose(
        e, _fd(lambda zz: head.log_prob(zz, None, y), z), rtol=1e-6, atol=1e-8
    )


def test_entropy_gradient_is_the_derivative_of_entropy_in_z():
    head, z, _ = _head_and_point(1)
    g, _ = head.entropy_grad(z, None)
    np.testing.assert_allclose(g, _fd(lambda zz: head.entropy(zz, None), z), rtol=1e-6, atol=1e-8)


def test_log_prob_and_entropy_match_torch_distributions():
    head, z, y = _head_and_point(2)
    a, b = 1 + np.logaddexp(0, z[:, :2]), 1 + np.logaddexp(0, z[:, 2:])
    d = torch.distributions.Beta(torch.tensor(a), torch.tensor(b))
    np.testing.assert_allclose(
        head.log_prob(z, None, y), d.log_prob(torch.tensor(y)).sum(-1).numpy(), rtol=1e-10
    )
    np.testing.assert_allclose(head.entropy(z, None), d.entropy().sum(-1).numpy(), rtol=1e-8)


def test_torch_loss_gradient_is_minus_advantage_times_the_eligibility():
    head, z, y = _head_and_point(3)
    adv = np.random.default_rng(3).normal(size=5)
    zt = torch.tensor(z, requires_grad=True)
    head.torch_loss(zt, y, torch.tensor(adv), 0.0).backward()
    e, _ = head.score(z, None, y)
    np.testing.assert_allclose(zt.grad.numpy(), -adv[:, None] * e, rtol=1e-8, atol=1e-10)


def test_actions_lie_within_the_bounds_and_the_mode_is_the_peak():
    head, z, y = _head_and_point(4)
    act = head.to_env(y)
    assert np.all(act >= BOX.low) and np.all(act <= BOX.high)
    m = head.mode(z)
    a, b = 1 + np.logaddexp(0, z[:, :2]), 1 + np.logaddexp(0, z[:, 2:])
    np.testing.assert_allclose(m, (a - 1) / (a + b - 2))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_the_trainer_runs_with_a_beta_head(backend, tmp_path):
    cfg = Config(
        env_id=toy.TOY_IDS["box"],
        continuous_head="beta",
        backend=backend,
        episodes_per_batch=4,
        num_envs=2,
        total_steps=48,
        hidden=(4,),
        eval_every=2,
        eval_episodes=3,
        progress=False,
        target_return=1e9,
        entropy_coef=0.01,
        out=str(tmp_path / "run"),
    )
    result = train(cfg)
    assert result.updates == 3 and all(math.isfinite(r["loss"]) for r in result.history)
    import eligibility

    policy = eligibility.load(tmp_path / "run")  # the head comes back from the config
    assert policy.spaces.head.kind == "beta"
    for deterministic in (True, False):
        action = policy.predict(np.zeros(2), deterministic=deterministic)
        assert action.shape == (2,) and np.all(np.abs(action) <= 1.0)
