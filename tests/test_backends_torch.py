"""Gradient parity: same weights, same batch → the same gradient on both backends (float64)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

import test_reinforce_toyenvs as toy

torch = pytest.importorskip("torch")

from eligibility.backends.numpy import MLPPolicy  # noqa: E402
from eligibility.backends.torch import Agent, MLPModule, TorchPolicy  # noqa: E402
from eligibility.reinforce.envs import make_vec_env  # noqa: E402
from eligibility.reinforce.estimator import Batch, collect_episodes, policy_gradient  # noqa: E402
from eligibility.reinforce.spaces import head_for_space  # noqa: E402

SPACES = {
    "discrete": spaces.Discrete(3),
    "multidiscrete": spaces.MultiDiscrete([2, 3]),
    "multibinary": spaces.MultiBinary(3),
    "box": spaces.Box(-1.0, 1.0, (2,)),
}


def _pair(kind, hidden=(8, 5), activation="tanh", seed=0, obs_dim=4, space=None):
    head = head_for_space(space or SPACES[kind])
    np_policy = MLPPolicy(obs_dim, head, hidden, activation, rng=np.random.default_rng(seed))
    module = MLPModule([obs_dim, *hidden, head.n_out], activation, rng=np.random.default_rng(99))
    th_policy = TorchPolicy(module, head)
    rng = np.random.default_rng(seed + 1)
    for k in np_policy.params:
        np_policy.net.params[k] += 0.3 * rng.standard_normal(np_policy.net.params[k].shape)
    th_policy.params = np_policy.params
    return np_policy, th_policy


def _rel(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


@pytest.mark.parametrize("kind", list(SPACES))
@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_same_weights_same_batch_same_gradient(kind, activation, beta):
    np_policy, th_policy = _pair(kind, activation=activation)
    rng = np.random.default_rng(5)
    s = rng.standard_normal((40, 4))
    a = np_policy.act(s, rng)
    psi = rng.standard_normal(40)
    g_np, i_np = np_policy.grad_log_prob(s, a, psi, entropy_coef=beta)
    g_th, i_th = th_policy.grad_log_prob(s, a, psi, entropy_coef=beta)
    assert set(g_np) == set(g_th)
    for k in g_np:
        assert _rel(g_th[k], g_np[k]) <= 1e-8, k
    assert i_np["surrogate"] == pytest.approx(i_th["surrogate"], rel=1e-12)


@pytest.mark.parametrize("baseline", ["none", "batch-mean", "rloo"])
def test_policy_gradient_parity_on_a_collected_batch(baseline):
    """The trainer's estimator, fed one real batch, gives the same ĝ on both backends."""
    np_policy, th_policy = _pair(
        "discrete", hidden=(6,), obs_dim=2, space=spaces.Discrete(3, start=1)
    )
    envs = make_vec_env(toy.TOY_IDS["discrete"], 3, "sync")
    head = np_policy.head
    rng = np.random.default_rng(0)
    batch = collect_episodes(
        envs, lambda s, m: np_policy.act(s, rng), 5, seed=1, to_env=head.to_env
    )
    envs.close()
    g_np, _ = policy_gradient(np_policy, batch, gamma=0.9, baseline=baseline)
    g_th, _ = policy_gradient(th_policy, batch, gamma=0.9, baseline=baseline)
    for k in g_np:
        assert _rel(g_th[k], g_np[k]) <= 1e-8, k


def test_sampling_is_backend_independent():
    np_policy, th_policy = _pair("discrete")
    s = np.random.default_rng(0).standard_normal((50, 4))
    a1 = np_policy.act(s, np.random.default_rng(7))
    a2 = th_policy.act(s, np.random.default_rng(7))
    np.testing.assert_array_equal(a1, a2)


def test_user_module_and_state_dict_round_trip():
    head = head_for_space(spaces.Discrete(2))
    module = torch.nn.Sequential(torch.nn.Linear(4, 7), torch.nn.ReLU(), torch.nn.Linear(7, 2))
    module = module.double()
    kw = dict(hidden=(), activation="tanh", optimizer="adam", lr=0.01, value=True, value_lr=0.01)
    agent = Agent(4, head, rng=np.random.default_rng(0), module=module, **kw)
    assert set(agent.policy.params) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    s = np.random.default_rng(1).standard_normal((9, 4))
    a = agent.policy.act(s, np.random.default_rng(2))
    grads, _ = agent.policy.grad_log_prob(s, a, np.ones(9))
    agent.apply(grads)
    agent.fit_value(s, np.ones(9), 2)
    state = agent.state_dict()
    assert "policy_opt.0.weight.exp_avg" in state
    module2 = torch.nn.Sequential(torch.nn.Linear(4, 7), torch.nn.ReLU(), torch.nn.Linear(7, 2))
    other = Agent(4, head, rng=np.random.default_rng(5), module=module2.double(), **kw)
    other.load_state_dict(state)
    for k, v in state.items():
        np.testing.assert_array_equal(other.state_dict()[k], v)
    # a further identical step keeps them identical (optimiser state restored, not reset)
    agent.apply(grads)
    other.apply(grads)
    for k in agent.policy.params:
        np.testing.assert_array_equal(agent.policy.params[k], other.policy.params[k])


def test_non_module_is_rejected():
    head = head_for_space(spaces.Discrete(2))
    kw = dict(hidden=(), activation="tanh", optimizer="adam", lr=0.01, value=False, value_lr=0.01)
    with pytest.raises(ValueError, match=r"nn\.Module"):
        Agent(4, head, rng=np.random.default_rng(0), module=object(), **kw)


def test_batch_type_is_shared():
    assert Batch._fields[:5] == ("obs", "actions", "rewards", "mask", "terminated")


@pytest.mark.parametrize("name", ["adam", "sgd"])
def test_the_backends_optimiser_is_torch_optims_update(name):
    from eligibility.backends.torch import _Optimizer

    torch.manual_seed(0)
    ours = torch.nn.Parameter(torch.randn(3, 4, dtype=torch.float64))
    ref = torch.nn.Parameter(ours.detach().clone())
    opt = _Optimizer(name, [ours], 0.05)
    ref_opt = (torch.optim.Adam if name == "adam" else torch.optim.SGD)([ref], lr=0.05)
    for _ in range(6):
        g = torch.randn(3, 4, dtype=torch.float64)
        ours.grad, ref.grad = g.clone(), g.clone()
        opt.step()
        ref_opt.step()
        torch.testing.assert_close(ours.detach(), ref.detach(), rtol=1e-12, atol=1e-14)
    if name == "adam":  # the same state, by the same names (checkpoints read either way)
        for k in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt.state[ours][k], ref_opt.state[ref][k])
        assert float(opt.state[ours]["step"]) == float(ref_opt.state[ref]["step"]) == 6


def test_acting_through_numpy_gives_the_modules_own_z():
    from eligibility.backends.torch import MLPModule

    for activation in ("tanh", "relu"):
        m = MLPModule([4, 8, 8, 3], activation, rng=np.random.default_rng(0), out_scale=1.0)
        s = np.random.default_rng(1).normal(size=(6, 4))
        with torch.no_grad():
            ref = m(torch.as_tensor(s)).numpy()
        np.testing.assert_allclose(m.forward_numpy(s), ref, rtol=1e-12, atol=1e-14)


def test_params_are_copies_in_both_backends():
    """Review bug: the NumPy policy gave its live dict, the torch one copies; now both copy."""
    np_policy, th_policy = _pair("discrete")
    for policy in (np_policy, th_policy):
        before = {k: np.array(v) for k, v in policy.params.items()}
        got = policy.params
        for v in got.values():
            v += 1.0
        for k, v in policy.params.items():
            np.testing.assert_array_equal(v, before[k], err_msg=k)
