"""The lab's exact side: J(θ) and ∇J(θ) against finite differences, autograd, plain loops,
hand-derived numbers and Monte Carlo rollouts; and the checks on bad input."""

from __future__ import annotations

import bisect
import math

import numpy as np
import pytest
import torch

from eligibility import api
from eligibility.lab import bandits, mdp
from eligibility.lab.envs import BanditEnv, MDPEnv
from eligibility.lab.estimate import z_scores
from eligibility.lab.mdp import FiniteMDP
from eligibility.lab.problems import (
    PROBLEMS,
    chain_mdp,
    get_problem,
    gridworld_mdp,
    mdp_problem,
    observation_values,
    short_corridor_mdp,
)

# Monte Carlo checks reject at |z| > 4.5 per component, a two-sided false-alarm rate of 6.8e-6
# per component (normal approximation; ≥ 2000 episodes each): over the ≤ 40 components of one
# check, family-wise ≤ 2.7e-4 (Bonferroni). The seeds are fixed, so each check is deterministic.
Z_MC = 4.5


def fd_gradient(f, theta: dict[str, np.ndarray], h: float = 1e-5) -> dict[str, np.ndarray]:
    """Central differences (f(θ + h eᵢ) − f(θ − h eᵢ)) / 2h, one component at a time."""
    out = {}
    for k, v in theta.items():
        g = np.zeros_like(v, dtype=np.float64)
        for idx in np.ndindex(*v.shape):
            plus = {kk: np.array(vv, dtype=np.float64) for kk, vv in theta.items()}
            minus = {kk: np.array(vv, dtype=np.float64) for kk, vv in theta.items()}
            plus[k][idx] += h
            minus[k][idx] -= h
            g[idx] = (f(plus) - f(minus)) / (2 * h)
        out[k] = g
    return out


def random_mdp(seed: int, S: int = 6, A: int = 3, d: int = 3, gamma: float = 1.0) -> FiniteMDP:
    """A random MDP whose last state is terminal and reachable from every state."""
    rng = np.random.default_rng(seed)
    P = rng.random((S, A, S)) ** 3
    P[:, :, S - 1] += 0.05  # every state reaches the terminal one
    P /= P.sum(axis=2, keepdims=True)
    R = rng.normal(size=(S, A))
    rho0 = np.r_[rng.random(S - 1), 0.0]
    rho0 /= rho0.sum()
    phi = rng.normal(size=(S, d))
    phi[1] = phi[2]  # two aliased states
    return FiniteMDP(P, R, rho0, gamma, [S - 1], phi, name=f"random{seed}")


# bandits ---------------------------------------------------------------------------------------

R4 = np.array([1.0, -0.5, 2.0, 0.3])


@pytest.mark.parametrize("form", ["logits", "probs"])
def test_categorical_bandit_gradient_matches_fd_autograd_and_loop(form):
    theta = np.array([0.3, -0.2, 0.1, 0.5]) if form == "logits" else np.array([0.5, 1.0, 0.7, 2])
    g = bandits.categorical_gradient(R4, **{form: theta})[form]
    fd = fd_gradient(lambda p: bandits.categorical_objective(R4, **{form: p["t"]}), {"t": theta})
    np.testing.assert_allclose(g, fd["t"], atol=1e-8)
    t = torch.tensor(theta, requires_grad=True)
    pi = torch.softmax(t, 0) if form == "logits" else t / t.sum()
    (pi @ torch.tensor(R4)).backward()
    np.testing.assert_allclose(g, t.grad.numpy(), atol=1e-12)
    # plain loop: Σ_a π_a r_a e(a) with e from the checked public API
    pi_np = pi.detach().numpy()
    loop = sum(
        pi_np[a] * R4[a] * api.score("categorical", a, **{form: theta})[form] for a in range(4)
    )
    np.testing.assert_allclose(g, loop, atol=1e-12)


def test_categorical_bandit_hand_derived():
    # uniform logits over r = (0, 1): J = 1/2, ∇_z J = π ⊙ (r − J) = (−1/4, 1/4)
    np.testing.assert_allclose(bandits.categorical_objective([0, 1], logits=[0, 0]), 0.5)
    np.testing.assert_allclose(
        bandits.categorical_gradient([0, 1], logits=[0, 0])["logits"], [-0.25, 0.25]
    )
    # probs w = (1, 3): ∇_w J = (r − J)/Σw with J = 3/4 → (−3/16, 1/16)
    np.testing.assert_allclose(
        bandits.categorical_gradient([0, 1], probs=[1, 3])["probs"], [-3 / 16, 1 / 16]
    )


@pytest.mark.parametrize("form", ["logits", "probs"])
def test_bernoulli_bandit_gradient_matches_fd_and_autograd(form):
    table = np.array([[[0.0, 1.0], [2.0, -1.0]], [[0.5, 3.0], [1.0, 4.0]]])  # 3 units
    theta = np.array([0.2, -0.7, 1.1]) if form == "logits" else np.array([0.3, 0.6, 0.8])
    g = bandits.bernoulli_gradient(table, **{form: theta})[form]
    fd = fd_gradient(lambda p: bandits.bernoulli_objective(table, **{form: p["t"]}), {"t": theta})
    np.testing.assert_allclose(g, fd["t"], atol=1e-8)
    t = torch.tensor(theta, requires_grad=True)
    p = torch.sigmoid(t) if form == "logits" else t
    q = torch.stack([1 - p, p], dim=1)  # q[i, y] = P(y_i = y)
    J = torch.einsum("i,j,k,ijk->", q[0], q[1], q[2], torch.tensor(table))
    J.backward()
    np.testing.assert_allclose(g, t.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(bandits.bernoulli_objective(table, **{form: theta}), J.item())


def test_gaussian_bandit_closed_form_matches_fd_and_quadrature():
    c, mu, sigma = np.array([1.0, -0.5]), np.array([0.2, 0.3]), np.array([0.7, 1.5])
    g = bandits.gaussian_gradient(c, mu, sigma)
    fd = fd_gradient(
        lambda p: bandits.gaussian_objective(c, p["loc"], p["scale"]), {"loc": mu, "scale": sigma}
    )
    np.testing.assert_allclose(g["loc"], fd["loc"], atol=1e-8)
    np.testing.assert_allclose(g["scale"], fd["scale"], atol=1e-8)
    np.testing.assert_allclose(g["log_scale"], sigma * g["scale"])
    # ∇J = E[r(a) e(a)] by Gauss–Hermite quadrature, with the core's normal eligibility; the
    # reward is separable, so each dimension is a 1-d integral (other dims add a constant).
    x, w = np.polynomial.hermite_e.hermegauss(40)
    w = w / w.sum()
    for i in range(2):
        a = mu[i] + sigma[i] * x
        r = -((a - c[i]) ** 2) - np.sum(np.delete((mu - c) ** 2 + sigma**2, i))
        e = api.score("normal", a, loc=mu[i], scale=sigma[i])
        np.testing.assert_allclose(w @ (r * e["loc"]), g["loc"][i], atol=1e-10)
        np.testing.assert_allclose(w @ (r * e["scale"]), g["scale"][i], atol=1e-10)
        np.testing.assert_allclose(w @ r, bandits.gaussian_objective(c, mu, sigma), atol=1e-10)


# finite MDPs -----------------------------------------------------------------------------------


def policy_evaluation_loop(m: FiniteMDP, pi: np.ndarray, sweeps: int = 5000) -> np.ndarray:
    """V by plain iterative policy evaluation (a reference for the linear solve)."""
    V = np.zeros(m.n_states)
    for _ in range(sweeps):
        new = np.zeros(m.n_states)
        for s in range(m.n_states):
            if m.terminal[s]:
                continue
            for a in range(m.n_actions):
                new[s] += pi[s, a] * (
                    m.R[s, a] + m.gamma * sum(m.P[s, a, t] * V[t] for t in range(m.n_states))
                )
        if np.abs(new - V).max() < 1e-13:
            return new
        V = new
    return V


def mdp_cases():
    rng = np.random.default_rng(5)
    out = []
    for name in ("chain", "gridworld", "short-corridor"):
        p = get_problem(name)
        out.append((p.extra["mdp"], p.theta["W"], p.theta["b"]))
    for seed, gamma in ((1, 1.0), (2, 0.8)):
        m = random_mdp(seed, gamma=gamma)
        out.append((m, rng.normal(size=(3, 3)), rng.normal(size=3)))
    return out


@pytest.mark.parametrize("case", range(5))
def test_mdp_objective_matches_policy_evaluation_loop(case):
    m, W, b = mdp_cases()[case]
    sol = mdp.solve(m, W, b)
    V = policy_evaluation_loop(m, sol.pi)
    np.testing.assert_allclose(sol.V, V, atol=1e-9)
    np.testing.assert_allclose(sol.J, m.rho0 @ V, atol=1e-9)
    np.testing.assert_allclose(float(mdp.objective(m, W, b)), sol.J, atol=1e-12)


@pytest.mark.parametrize("case", range(5))
def test_mdp_gradient_matches_finite_differences_and_autograd(case):
    m, W, b = mdp_cases()[case]
    g = mdp.gradient(m, W, b)
    fd = fd_gradient(lambda p: float(mdp.objective(m, p["W"], p["b"])), {"W": W, "b": b})
    np.testing.assert_allclose(g["W"], fd["W"], atol=1e-7)
    np.testing.assert_allclose(g["b"], fd["b"], atol=1e-7)
    Wt = torch.tensor(W, requires_grad=True)
    bt = torch.tensor(np.asarray(b, dtype=np.float64), requires_grad=True)
    mdp.objective(m, Wt, bt).backward()
    np.testing.assert_allclose(g["W"], Wt.grad.numpy(), atol=1e-10)
    np.testing.assert_allclose(g["b"], bt.grad.numpy(), atol=1e-10)


def test_short_corridor_hand_derived():
    """Sutton & Barto (2018, Ex. 13.1): J(p) = (4 − 2p) / (p (p − 1)) for P(right) = p,
    maximised at p* = 2 − √2, where the gradient vanishes."""
    m = short_corridor_mdp()
    for p in (0.3, 0.5, 0.8):
        b = [0.0, math.log(p / (1 - p))]
        J = mdp.solve(m, [[0.0], [0.0]], b).J
        np.testing.assert_allclose(J, (4 - 2 * p) / (p * (p - 1)), rtol=1e-12)
    p_star = 2 - math.sqrt(2)
    g = mdp.gradient(m, [[0.0], [0.0]], [0.0, math.log(p_star / (1 - p_star))])
    np.testing.assert_allclose(g["b"], 0.0, atol=1e-10)
    assert get_problem("short-corridor").aliased


def test_chain_two_states_hand_derived():
    # state 0 → terminal 1 with q = π_r (1 − slip) + π_l slip per step: E[T] = 1/q, J = −1/q.
    m = chain_mdp(n=2, slip=0.1)
    pi_r = 1 / (1 + math.exp(-0.4))
    q = pi_r * 0.9 + (1 - pi_r) * 0.1
    sol = mdp.solve(m, [[0.0], [0.0]], [0.0, 0.4])
    np.testing.assert_allclose(sol.J, -1 / q, rtol=1e-12)
    np.testing.assert_allclose(sol.expected_length, 1 / q, rtol=1e-12)
    # ∂J/∂b_r = (1/q²) ∂q/∂b_r = (1/q²) · 0.8 π_r (1 − π_r)
    g = mdp.gradient(m, [[0.0], [0.0]], [0.0, 0.4])
    np.testing.assert_allclose(g["b"][1], 0.8 * pi_r * (1 - pi_r) / q**2, rtol=1e-12)


def rollouts(m: FiniteMDP, W, b, n: int, seed: int):
    """Plain-loop episodes: per-episode discounted return and Σ_t γᵗ G_t ∇ ln π (REINFORCE),
    with the eligibility from the checked public API (independent of the trainer).

    The steps are played one by one in Python (lists and ``bisect``: a NumPy call per step was
    most of the time); an episode's Σ_t γᵗ G_t ∇ ln π(a_t|s_t) is Σ_{s,a} w[s, a] ∇ ln π(a|s)
    with w[s, a] the Σ of γᵗ G_t over its steps at (s, a), ∇ ln π(a|s) = e ⊗ φ(s) (and e, for
    the bias) laid out once per (s, a)."""
    rng = np.random.default_rng(seed)
    z = mdp.policy_logits(m, np.asarray(W, float), np.asarray(b, float))
    pi = mdp.policy_probs(m, np.asarray(W, float), np.asarray(b, float))
    S, A = m.n_states, m.n_actions
    # ∇ ln π(a|s) flattened as (W, b), from the public API once per (s, a) (speed)
    score = np.zeros((S, A, np.asarray(W).size + A))
    for s in range(S):
        for a in range(A):
            e = api.score("categorical", a, logits=z[s])["logits"]
            score[s, a] = np.concatenate([np.outer(e, m.phi[s]).ravel(), e])
    cdf_pi, cdf_P = np.cumsum(pi, 1).tolist(), np.cumsum(m.P, 2).tolist()
    cdf_0, terminal, R = np.cumsum(m.rho0).tolist(), m.terminal.tolist(), m.R.tolist()

    def draw(cdf):
        return min(bisect.bisect_right(cdf, rng.random() * cdf[-1]), len(cdf) - 1)

    returns, grads = [], []
    for _ in range(n):
        s = draw(cdf_0)
        traj = []
        while not terminal[s]:
            a = draw(cdf_pi[s])
            traj.append((s, a, R[s][a]))
            s = draw(cdf_P[s][a])
        G, w = 0.0, np.zeros((S, A))
        for t in reversed(range(len(traj))):
            s_t, a_t, r_t = traj[t]
            G = r_t + m.gamma * G
            w[s_t, a_t] += m.gamma**t * G
        returns.append(G)
        grads.append(np.einsum("sa,sap->p", w, score))
    return np.array(returns), np.array(grads)


@pytest.mark.parametrize("name", ["chain", "short-corridor", "gridworld"])
def test_mdp_exact_J_and_gradient_match_monte_carlo(name):
    p = get_problem(name)
    m, W, b = p.extra["mdp"], p.theta["W"], p.theta["b"]
    ret, G = rollouts(m, W, b, n=2000, seed=11)
    _, _, z_J = z_scores(ret[:, None], np.array([p.J]))
    assert abs(z_J[0]) < Z_MC, z_J
    exact = np.concatenate([p.exact["W"].ravel(), p.exact["b"]])
    _, se, z = z_scores(G, exact)
    live = se > 0
    assert np.abs(z[live]).max() < Z_MC, z
    np.testing.assert_allclose(exact[~live], 0.0, atol=1e-12)


def test_the_envs_steps_are_numpys_searchsorted_draws():
    """MDPEnv draws by ``bisect`` on lists: the states, rewards and ends that NumPy's
    ``searchsorted`` gives on the same uniforms (the env as first written, replayed here on a
    copy of its generator), step for step across episodes, reward noise on."""
    from gymnasium.utils import seeding

    m = get_problem("gridworld").extra["mdp"]
    env = MDPEnv(m, reward_std=0.5)
    gen, _ = seeding.np_random(5)
    cdf_0, cdf_P = np.cumsum(m.rho0), np.cumsum(m.P, axis=2)

    def draw(cdf, u):
        return min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), cdf.shape[0] - 1)

    _, info = env.reset(seed=5)
    s = draw(cdf_0, gen.random())
    actions, ends = np.random.default_rng(0).integers(0, m.n_actions, 600), 0
    for a in actions:
        assert info["state"] == s
        obs, r, term, trunc, info = env.step(a)
        want_r = float(m.R[s, a]) + 0.5 * float(gen.standard_normal())
        s = draw(cdf_P[s, a], gen.random())
        assert (r, term, trunc, info["state"]) == (want_r, bool(m.terminal[s]), False, s)
        assert (obs == m.phi[s]).all()
        if term:
            ends += 1
            _, info = env.reset()
            s = draw(cdf_0, gen.random())
    assert ends > 10  # many episodes, each start drawn too


def test_mdp_env_returns_match_J():
    p = get_problem("gridworld")
    env = p.make_env()
    rng = np.random.default_rng(3)
    pi = mdp.policy_probs(p.extra["mdp"], p.theta["W"], p.theta["b"])
    cdf_pi = np.cumsum(pi, 1).tolist()  # a ~ π(·|s) by inverse CDF: rng.choice was half the time
    returns = []
    obs, info = env.reset(seed=7)
    for _ in range(2000):
        G, t, done = 0.0, 0, False
        while not done:
            s = info["state"]
            # a plain comparison: assert_array_equal's bookkeeping was half the test's time
            phi = p.extra["mdp"].phi[s]
            assert obs.shape == phi.shape and (obs == phi).all(), (s, obs)
            a = min(bisect.bisect_right(cdf_pi[s], rng.random() * cdf_pi[s][-1]), 3)
            obs, r, done, trunc, info = env.step(a)
            assert not trunc
            G += p.gamma**t * r
            t += 1
        returns.append(G)
        obs, info = env.reset()
    _, _, z = z_scores(np.array(returns)[:, None], np.array([p.J]))
    assert abs(z[0]) < Z_MC, z


@pytest.mark.filterwarnings("ignore:.*(infinity|symmetric and normalized).*:UserWarning")
def test_envs_pass_gymnasium_checker():
    from gymnasium.utils.env_checker import check_env

    check_env(MDPEnv(chain_mdp()), skip_render_check=True)
    for name in ("bandit-logits", "bandit-bernoulli", "bandit-gaussian"):
        env = get_problem(name).make_env()
        assert isinstance(env, BanditEnv)
        check_env(env, skip_render_check=True)


def test_observation_values_average_aliased_states_by_visitation():
    m = short_corridor_mdp()
    sol = mdp.solve(m, [[0.0], [0.2]], [0.0, 0.0])
    v = observation_values(m, sol)(np.ones((2, 1)))
    n = m.nonterminal
    expected = sol.d[n] @ sol.V[n] / sol.d[n].sum()
    np.testing.assert_allclose(v, expected)
    m2 = gridworld_mdp()
    sol2 = mdp.solve(m2, np.zeros((4, 8)), np.zeros(4))
    np.testing.assert_allclose(observation_values(m2, sol2)(m2.phi), sol2.V)  # goal row: 0


def test_every_builtin_problem_gradient_matches_fd():
    for name in PROBLEMS:
        p = get_problem(name)
        fd = fd_gradient(p.objective, p.theta)
        np.testing.assert_allclose(p.flatten(p.exact), p.flatten(fd), atol=1e-7, err_msg=name)
        assert len(p.labels()) == p.flatten(p.exact).size


# bad input -------------------------------------------------------------------------------------


def chain_arrays():
    m = chain_mdp(n=3)
    return dict(
        P=m.P.copy(), R=m.R.copy(), rho0=m.rho0.copy(), gamma=1.0, terminal=[2], phi=m.phi.copy()
    )


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda k: k["P"].__setitem__((0, 1, 1), 0.5), r"P\[0, 1, :\] sums to 0.6"),
        (lambda k: k["P"].__setitem__((1, 0), [1.2, -0.2, 0.0]), r"P\[1, 0, 1\] = -0.2.*negative"),
        (lambda k: k.__setitem__("rho0", [1.1, -0.1, 0.0]), r"rho0\[1\] = -0.1.*negative"),
        (lambda k: k.__setitem__("R", np.zeros((3, 3))), r"R must have shape \(S, A\) = \(3, 2\)"),
        (lambda k: k.__setitem__("phi", np.zeros((2, 2))), r"phi must have shape \(S, d\)"),
        (lambda k: k.__setitem__("rho0", [1.0, 0.0]), r"rho0 must have shape \(S,\) = \(3,\)"),
        (lambda k: k.__setitem__("P", np.ones((3, 2, 2)) / 2), r"P must have shape \(S, A, S\)"),
        (lambda k: k.__setitem__("gamma", 1.5), r"gamma must lie in \[0, 1\]"),
        (lambda k: k.__setitem__("terminal", []), r"terminal is empty"),
        (lambda k: k.__setitem__("terminal", [5]), r"terminal must list state indices"),
        (lambda k: k.__setitem__("rho0", [0.0, 0.0, 1.0]), r"rho0\[2\] = 1 starts episodes"),
        (lambda k: k["R"].__setitem__((0, 0), np.nan), r"R\[0, 0\] is nan"),
    ],
)
def test_bad_mdp_arrays_raise_value_error_naming_them(change, match):
    kw = chain_arrays()
    change(kw)
    with pytest.raises(ValueError, match=match):
        FiniteMDP(**kw)


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_no_reachable_terminal_raises(gamma):
    kw = chain_arrays()
    kw["gamma"] = gamma
    # state 1 only ever moves to itself or state 0, state 0 only to 0 or 1: the terminal 2 is
    # unreachable, so episodes never end (and with γ = 1, I − P_π is singular).
    kw["P"][1] = [[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]]
    with pytest.raises(ValueError, match=r"no terminal state is reachable from state 0"):
        FiniteMDP(**kw)


def test_singular_at_extreme_parameters_raises():
    m = short_corridor_mdp()
    # P(right) = e^{−800} ≈ 0: the policy never leaves state 0, I − P_π is singular (γ = 1).
    with pytest.raises(ValueError, match=r"I − γP_π is singular"):
        mdp.solve(m, [[0.0], [0.0]], [0.0, -800.0])


def test_bad_policy_parameters_raise():
    m = chain_mdp()
    with pytest.raises(ValueError, match=r"W must have shape \(A, d\) = \(2, 4\)"):
        mdp_problem(m, W=np.zeros((4, 2)), b=[0.0, 0.0])
    with pytest.raises(ValueError, match=r"b must have shape \(A,\) = \(2,\)"):
        mdp.gradient(m, np.zeros((2, 4)), [0.0])


def test_bad_bandit_input_raises():
    from eligibility.lab import categorical_bandit, gaussian_bandit

    with pytest.raises(ValueError, match="exactly one of probs= or logits="):
        categorical_bandit([1.0, 2.0], logits=[0.0, 0.0], probs=[0.5, 0.5])
    with pytest.raises(ValueError, match="negative weight"):
        categorical_bandit([1.0, 2.0], probs=[-0.5, 1.5])
    with pytest.raises(ValueError, match=r"logits has shape \(3,\) but r has shape \(2,\)"):
        categorical_bandit([1.0, 2.0], logits=[0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="scale"):
        gaussian_bandit([0.0], loc=[0.0], scale=[0.0])
    with pytest.raises(ValueError, match="unknown problem 'nope'"):
        get_problem("nope")
