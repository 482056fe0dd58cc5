"""The weights' initialisations (``--init``): each row of INITS against its definition."""

from __future__ import annotations

import typing

import numpy as np
import pytest

from eligibility.backends.numpy import INITS, init_mlp
from eligibility.reinforce import Config, train


def test_the_config_offers_exactly_the_table():
    assert set(typing.get_args(typing.get_type_hints(Config)["init"])) == set(INITS)


@pytest.mark.parametrize("shape", [(32, 4), (4, 32), (16, 16)])
def test_orthogonal_rows_or_columns_are_orthonormal_times_the_gain(shape):
    fan_out, fan_in = shape
    w = INITS["orthogonal"](fan_out, fan_in, np.random.default_rng(0), False, 0.01)
    gram = w @ w.T if fan_out <= fan_in else w.T @ w  # the short side is orthonormal
    np.testing.assert_allclose(gram, 2.0 * np.eye(min(shape)), atol=1e-12)
    last = INITS["orthogonal"](fan_out, fan_in, np.random.default_rng(0), True, 0.01)
    np.testing.assert_allclose(last, w * 0.01 / np.sqrt(2.0), atol=1e-15)


def test_lecun_is_the_scaled_gaussian_draw():
    rng, ref = np.random.default_rng(3), np.random.default_rng(3)
    p = init_mlp([4, 8, 2], rng, out_scale=0.01)
    np.testing.assert_array_equal(p["W0"], ref.standard_normal((8, 4)) / 2.0)
    np.testing.assert_allclose(p["W1"], 0.01 * ref.standard_normal((2, 8)) / np.sqrt(8), rtol=1e-14)
    assert not p["b0"].any() and not p["b1"].any()


def test_both_backends_start_from_the_same_orthogonal_weights():
    """One update each (200 steps): the same weights after the same first step."""
    pytest.importorskip("torch")
    kw = dict(seed=0, total_steps=200, eval_every=0, progress=False, init="orthogonal")
    kw["baseline"] = "value"
    a = train(Config.for_env("CartPole-v1", backend="numpy", **kw))
    b = train(Config.for_env("CartPole-v1", backend="torch", **kw))
    assert a.updates == b.updates >= 1
    sa, sb = a.policy.agent.state_dict(), b.policy.agent.state_dict()
    for k in ("policy.W0", "policy.W1", "value.W0"):
        np.testing.assert_allclose(sa[k], np.asarray(sb[k]), rtol=1e-6, atol=1e-9)
