"""The exact quantities and the sampler that ``eligibility check`` adds to the lab.

The γᵗ-less expectation Σ_s d₁(s) Σ_a π Q e is held against a plain loop that propagates the
state distribution step by step (an independent computation) and against Monte Carlo with the
trainer's own estimator (``discount_weighting=False``); the bulk sampler against the exact J
and E[T].
"""

from __future__ import annotations

import numpy as np
import pytest

from eligibility.checker.problems import CHECK_PROBLEMS, bandit_mdp, get_check_problems
from eligibility.lab import mdp as mdp_
from eligibility.lab.estimate import estimates, z_scores, z_threshold
from eligibility.lab.sampling import sample_episodes
from eligibility.reinforce.rollout import Batch


def _plain_loop_without_discount_weighting(m, W, b, steps=2000):
    """Σ_t Σ_s Pr(s_t = s) Σ_a π(a|s) Q(s, a) e(a|s), the state law propagated step by step."""
    sol = mdp_.solve(m, W, b)
    n = m.nonterminal
    mu = m.rho0.copy()
    gW, gb = np.zeros_like(W), np.zeros_like(b)
    for _ in range(steps):
        for s in n:
            for a in range(m.n_actions):
                e = -sol.pi[s].copy()
                e[a] += 1.0
                w = mu[s] * sol.pi[s, a] * sol.Q[s, a]
                gW += w * np.outer(e, m.phi[s])
                gb += w * e
        P_pi = np.einsum("sa,sat->st", sol.pi, m.P)
        mu = mu @ P_pi
        mu[m.terminal] = 0.0
    return {"W": gW, "b": gb}


@pytest.mark.parametrize("name", list(CHECK_PROBLEMS))
def test_gradient_without_discount_weighting_is_the_plain_loop(name):
    (p,) = get_check_problems(name)
    W, b = p.problem.theta["W"], p.problem.theta["b"]
    got = mdp_.gradient_without_discount_weighting(p.mdp, W, b)
    want = _plain_loop_without_discount_weighting(p.mdp, W, b)
    np.testing.assert_allclose(got["W"], want["W"], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(got["b"], want["b"], rtol=1e-8, atol=1e-10)
    if p.problem.gamma == 1.0:  # d₁ = d: the same vector as ∇J
        np.testing.assert_allclose(p.exact_without_discount_weighting(), p.exact, rtol=1e-10)
    else:
        assert np.linalg.norm(p.exact_without_discount_weighting() - p.exact) > 1.0


def test_undiscounted_visitation_sums_to_the_expected_length():
    (p,) = get_check_problems("gridworld")
    th = p.problem.theta
    d1 = mdp_.undiscounted_visitation(p.mdp, th["W"], th["b"])
    assert d1.sum() == pytest.approx(p.problem.expected_length, rel=1e-12)


def test_gridworld_estimate_without_gamma_t_has_the_exact_expectation():
    """Monte Carlo with the trainer's own estimator, weighting dropped: z-test at α = 10⁻³."""
    (p,) = get_check_problems("gridworld")
    th = p.problem.theta
    big = sample_episodes(p.mdp, th["W"], th["b"], 300 * 16, np.random.default_rng(5))
    batches = [Batch(*(x[i * 16 : (i + 1) * 16] for x in big)) for i in range(300)]
    G = estimates(p.problem, batches, "none", discount_weighting=False)
    _, _, z = z_scores(G, p.exact_without_discount_weighting())
    assert np.abs(z).max() < z_threshold(1e-3, G.shape[1], G.shape[0])
    _, _, z_right = z_scores(G, p.exact)
    assert np.abs(z_right).max() > z_threshold(1e-3, G.shape[1], G.shape[0])


@pytest.mark.parametrize("name", list(CHECK_PROBLEMS))
def test_sampler_plays_the_exact_problem(name):
    """Mean discounted return against J, mean length against E[T] (z-tests at α = 10⁻³)."""
    (p,) = get_check_problems(name)
    th = p.problem.theta
    batch = sample_episodes(
        p.mdp, th["W"], th["b"], 4000, np.random.default_rng(1), reward_std=p.reward_std
    )
    assert batch.mask[:, 0].all() and not np.any(np.diff(batch.mask.astype(int), axis=1) > 0)
    discount = p.problem.gamma ** np.arange(batch.mask.shape[1])
    ret = (batch.rewards * discount).sum(axis=1)
    t = z_threshold(1e-3, 2, 4000)
    z_ret = (ret.mean() - p.problem.J) / (ret.std(ddof=1) / np.sqrt(ret.size))
    L = batch.lengths
    z_len = (L.mean() - p.problem.expected_length) / (L.std(ddof=1) / np.sqrt(L.size) + 1e-12)
    assert abs(z_ret) < t and abs(z_len) < t
    # Every recorded step is an action taken in a non-terminal state.
    s_obs = batch.obs[batch.mask]
    assert np.all(np.abs(s_obs).sum(axis=1) > 0)


def test_bandit_mdp_is_the_labs_bandit():
    from eligibility.lab import bandits
    from eligibility.lab.problems import BANDIT_REWARDS

    m = bandit_mdp(BANDIT_REWARDS)
    z = np.array([0.5, 0.0, -0.5, 0.2])
    g = mdp_.gradient(m, z[:, None], np.zeros(4))
    want = bandits.categorical_gradient(BANDIT_REWARDS, logits=z)["logits"]
    np.testing.assert_allclose(g["W"][:, 0], want, rtol=1e-12)
    np.testing.assert_allclose(g["b"], want, rtol=1e-12)
