"""The hand-written backward pass against central finite differences; Adam against a loop."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from eligibility.backends.numpy import MLP, SGD, Adam, MLPPolicy
from eligibility.reinforce.spaces import head_for_space

SPACES = {
    "discrete": spaces.Discrete(3),
    "multidiscrete": spaces.MultiDiscrete([2, 3]),
    "multibinary": spaces.MultiBinary(3),
    "box": spaces.Box(-1.0, 1.0, (2,)),
}


def _objective(policy, s, a, psi, beta):
    """J(θ) = Σᵢ ψᵢ ln π(aᵢ | sᵢ) + β (1/N) Σ Hᵢ, computed forward only."""
    z, _ = policy.net.forward(s)
    lp = policy.head.log_prob(z, policy.log_std, a)
    h = policy.head.entropy(z, policy.log_std)
    return float(psi @ lp + beta * h.mean())


@pytest.mark.parametrize("kind", list(SPACES))
@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("beta", [0.0, 0.3])
def test_grad_log_prob_matches_finite_differences(kind, activation, beta):
    rng = np.random.default_rng(0)
    head = head_for_space(SPACES[kind])
    policy = MLPPolicy(4, head, hidden=(5, 3), activation=activation, rng=rng)
    for k in policy.params:  # a policy far from uniform, so every term matters
        policy.net.params[k] += 0.5 * rng.standard_normal(policy.net.params[k].shape)
    s = rng.standard_normal((7, 4))
    a = policy.act(s, rng)
    psi = rng.standard_normal(7)
    grads, info = policy.grad_log_prob(s, a, psi, entropy_coef=beta)
    assert info["surrogate"] == pytest.approx(_objective(policy, s, a, psi, 0.0))
    eps = 1e-6
    for name, p in policy.net.params.items():  # perturbed in place
        fd = np.zeros_like(p)
        for idx in np.ndindex(p.shape):
            old = p[idx]
            p[idx] = old + eps
            up = _objective(policy, s, a, psi, beta)
            p[idx] = old - eps
            down = _objective(policy, s, a, psi, beta)
            p[idx] = old
            fd[idx] = (up - down) / (2 * eps)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-5, atol=1e-7, err_msg=name)


def test_linear_policy_gradient_is_eligibility_outer_state():
    """hidden=(): ∂/∂W Σ ψ ln π = Σᵢ ψᵢ (onehot(aᵢ) − softmax(zᵢ)) sᵢᵀ, written out per row."""
    rng = np.random.default_rng(1)
    policy = MLPPolicy(3, head_for_space(spaces.Discrete(4)), hidden=(), rng=rng)
    s = rng.standard_normal((6, 3))
    a = rng.integers(0, 4, 6)
    psi = rng.standard_normal(6)
    grads, _ = policy.grad_log_prob(s, a, psi)
    w, b = policy.params["W0"], policy.params["b0"]
    gw = np.zeros_like(w)
    gb = np.zeros_like(b)
    for i in range(6):
        z = w @ s[i] + b
        pi = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        e = -pi
        e[a[i]] += 1.0
        gw += psi[i] * np.outer(e, s[i])
        gb += psi[i] * e
    np.testing.assert_allclose(grads["W0"], gw, rtol=1e-12)
    np.testing.assert_allclose(grads["b0"], gb, rtol=1e-12)


def test_value_mlp_backward_matches_finite_differences():
    rng = np.random.default_rng(2)
    net = MLP([3, 4, 1], "tanh", rng=rng, out_scale=1.0)
    s = rng.standard_normal((5, 3))
    delta = rng.standard_normal((5, 1))
    _, hs = net.forward(s)
    grads = net.backward(hs, delta)

    def f():
        return float(np.sum(net.forward(s)[0] * delta))

    for name, p in net.params.items():
        for idx in np.ndindex(p.shape):
            old = p[idx]
            p[idx] = old + 1e-6
            up = f()
            p[idx] = old - 1e-6
            down = f()
            p[idx] = old
            assert grads[name][idx] == pytest.approx((up - down) / 2e-6, rel=1e-5, abs=1e-8)


def test_adam_matches_plain_loop():
    rng = np.random.default_rng(3)
    theta = {"w": rng.standard_normal(3)}
    ref = theta["w"].copy()
    opt = Adam(theta, lr=0.1)
    m = np.zeros(3)
    v = np.zeros(3)
    for t in range(1, 6):
        g = rng.standard_normal(3)
        opt.step({"w": g}, ascent=True)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        ref = ref + 0.1 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    np.testing.assert_allclose(theta["w"], ref, rtol=1e-12)
    state = opt.state_dict()
    opt2 = Adam({"w": theta["w"].copy()}, lr=0.1)
    opt2.load_state_dict(state)
    assert opt2.t == 5
    np.testing.assert_array_equal(opt2.m["w"], opt.m["w"])


def test_sgd_descent_and_ascent():
    theta = {"w": np.array([1.0, 2.0])}
    opt = SGD(theta, lr=0.5)
    opt.step({"w": np.array([1.0, -1.0])}, ascent=False)
    np.testing.assert_allclose(theta["w"], [0.5, 2.5])


def test_params_setter_checks_keys_and_shapes():
    policy = MLPPolicy(2, head_for_space(spaces.Discrete(2)), rng=np.random.default_rng(0))
    new = {"W0": np.ones((2, 2)), "b0": np.zeros(2)}
    policy.params = new
    np.testing.assert_array_equal(policy.params["W0"], np.ones((2, 2)))
    with pytest.raises(ValueError, match="keys"):
        policy.params = {"W0": np.ones((2, 2))}
    with pytest.raises(ValueError, match="shape"):
        policy.params = {"W0": np.ones((3, 2)), "b0": np.zeros(2)}
