"""The trainer's estimator held against the exact gradients: unbiasedness by z-tests, variance
reduction, known biases reported, and the lab's wiring checked against a plain loop.

False alarms: each case's z-test rejects "E[ĝ] = ∇J" when max_i |zᵢ| exceeds the two-sided
Student-t quantile at α/p (Bonferroni over the p components), so a true H₀ is rejected with
probability ≤ α = 10⁻³ per case; over the 28 unbiased cases of the built-in problems the
family-wise rate is ≤ 2.8 %. The seeds are fixed, so the outcome is deterministic; the
threshold is what makes a pass evidence rather than luck.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from eligibility import api
from eligibility.lab import PROBLEMS, LabConfig, get_problem, run_lab, run_problem
from eligibility.lab.estimate import (
    NO_DISCOUNT_WEIGHTING,
    ProbsPolicy,
    collect_batches,
    estimates,
    make_policy,
    t_quantile,
    z_scores,
    z_threshold,
)
from eligibility.lab.mdp import policy_logits
from eligibility.reinforce.estimator import BASELINES, policy_gradient


@pytest.fixture(scope="module")
def lab_result():
    """Every problem × baseline at N = 60, E = 16; the 16 episodes of a batch played side by side
    (num_envs=16: half the vector steps of the default 8, a quarter of the fixture's time).

    A false alarm of an unbiased case is at most α at any N; what N buys is the tests below
    that read a bias or a variance, whose margins at N = 60 each states."""
    return run_lab(LabConfig(problem="all", samples=60, episodes=16, seed=0, num_envs=16))


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_every_unbiased_baseline_passes_its_z_test(lab_result, name):
    cases = [c for c in lab_result.cases if c.problem == name]
    assert {c.baseline for c in cases} >= set(BASELINES)
    for c in cases:
        assert c.biased == (c.baseline in ("batch-mean", NO_DISCOUNT_WEIGHTING)), c.baseline
        if not c.biased:
            assert c.passed, (c.baseline, c.max_abs_z, c.threshold, c.labels[np.argmax(abs(c.z))])
        assert c.discount_weighting == (
            get_problem(name).gamma < 1 and c.baseline != NO_DISCOUNT_WEIGHTING
        )


def test_unweighted_discounted_estimate_is_reported_biased(lab_result):
    """Without γᵗ, the estimate points elsewhere (here 90 % of ‖∇J‖ off): reported, not hidden.

    Its bias is 5.7 times the size noise alone gives it at N = 60 (7.7 at N = 100: as √N),
    where an unbiased case's is about 1."""
    (c,) = [c for c in lab_result.cases if c.baseline == NO_DISCOUNT_WEIGHTING]
    assert c.problem == "gridworld" and c.biased and not c.passed
    assert c.bias > 4 * c.bias_noise


@pytest.mark.parametrize(
    "name, baseline, at_most",
    [("bandit-logits", "rloo", 0.25), ("bandit-logits", "value", 0.25), ("chain", "value", 0.6)],
)
def test_baselines_reduce_variance_where_they_must(lab_result, name, baseline, at_most):
    """Rewards ≈ 6 ± 1 (bandit) or −1 per step (chain): without a baseline every return's
    common offset multiplies the eligibility; a baseline removes it (measured ratios: 0.03, 0.03,
    0.31 at N = 200, 0.031, 0.030, 0.392 at N = 100, and 0.038, 0.037, 0.419 at the fixture's
    N = 60, whose sampling error is ~18 %)."""
    (c,) = [c for c in lab_result.cases if c.problem == name and c.baseline == baseline]
    assert c.variance_ratio < at_most


def test_batch_mean_bias_is_the_predicted_one():
    """One-step episodes: b = (1/E) Σ_e' G_e' includes G_e, so E[ĝ] = (1 − 1/E) ∇J exactly.
    The z-test rejects ∇J and accepts (1 − 1/E) ∇J (E = 2, N = 600: the bias ∇J/2 sits at a
    largest |z| of 8.4–10.2 against ∇J on seeds 1–3, t* = 3.7; at E = 4 it took N = 1500 to
    reach 7–9, the bias a quarter)."""
    p = get_problem("bandit-logits")
    E = 2
    batches = collect_batches(p, 600, E, num_envs=2, seed=1)
    G = estimates(p, batches, "batch-mean", discount_weighting=False)
    exact = p.flatten(p.exact)
    t_star = z_threshold(1e-3, exact.size, G.shape[0])
    assert np.abs(z_scores(G, exact)[2]).max() > t_star
    assert np.abs(z_scores(G, (1 - 1 / E) * exact)[2]).max() < t_star


# the wiring: the trainer's estimate equals a plain loop over the episodes ------------------------


def plain_reinforce(p, batch, baseline: str, weighting: bool) -> np.ndarray:
    """(1/E) Σ_e Σ_t w_t (G_et − b_et) e(a_et | s_et) by loops, eligibilities from the checked
    public API, laid out as the problem's θ (a reference for the lab's wiring)."""
    n_ep = batch.mask.shape[0]
    lengths = batch.mask.sum(axis=1)
    G = np.zeros(batch.rewards.shape)
    for e in range(n_ep):
        acc = 0.0
        for t in reversed(range(lengths[e])):
            acc = batch.rewards[e, t] + p.gamma * acc
            G[e, t] = acc
    total = {k: np.zeros_like(v) for k, v in p.theta.items()}
    for e in range(n_ep):
        for t in range(lengths[e]):
            if baseline == "none":
                b = 0.0
            else:  # rloo: the mean over the other episodes still running at t
                others = [G[f, t] for f in range(n_ep) if f != e and t < lengths[f]]
                b = float(np.mean(others)) if others else 0.0
            psi = (p.gamma**t if weighting else 1.0) * (G[e, t] - b) / n_ep
            s, a = batch.obs[e, t], batch.actions[e, t]
            if "W" in p.theta:
                z = policy_logits(p.extra["mdp"], p.theta["W"], p.theta["b"])
                z_s = p.theta["W"] @ s + p.theta["b"]
                assert np.any(np.all(np.isclose(z, z_s), axis=1))
                el = api.score("categorical", int(a), logits=z_s)["logits"]
                total["W"] += psi * np.outer(el, s)
                total["b"] += psi * el
            elif "probs" in p.theta:
                total["probs"] += (
                    psi * api.score("categorical", int(a), probs=p.theta["probs"])["probs"]
                )
            elif "loc" in p.theta:
                mu, sigma = p.theta["loc"], np.exp(p.theta["log_scale"])
                el = api.score("normal", a, loc=mu, scale=sigma)
                total["loc"] += psi * el["loc"]
                total["log_scale"] += psi * sigma * el["scale"]  # ∂/∂ ln σ = σ ∂/∂σ
            elif p.extra.get("table") is not None:
                total["logits"] += (
                    psi * api.score("bernoulli", a, logits=p.theta["logits"])["logits"]
                )
            else:
                total["logits"] += (
                    psi * api.score("categorical", int(a), logits=p.theta["logits"])["logits"]
                )
    return p.flatten(total)


@pytest.mark.parametrize(
    "name, baseline",
    [
        ("chain", "rloo"),
        ("gridworld", "none"),
        ("short-corridor", "rloo"),
        ("bandit-logits", "rloo"),
        ("bandit-probs", "none"),
        ("bandit-bernoulli", "none"),
        ("bandit-gaussian", "rloo"),
    ],
)
def test_lab_estimate_is_the_plain_reinforce_loop(name, baseline):
    p = get_problem(name)
    (batch,) = collect_batches(p, 1, 6, num_envs=3, seed=4)
    weighting = p.gamma < 1
    (g,) = estimates(p, [batch], baseline, discount_weighting=weighting)
    np.testing.assert_allclose(g, plain_reinforce(p, batch, baseline, weighting), atol=1e-10)


def test_lab_policy_is_the_trainers_linear_softmax_with_theta_set():
    from eligibility.backends.numpy import MLPPolicy

    p = get_problem("gridworld")
    policy = make_policy(p, np.random.default_rng(0))
    assert isinstance(policy, MLPPolicy) and policy.net.n_layers == 1  # hidden=()
    np.testing.assert_array_equal(policy.params["W0"], p.theta["W"])
    np.testing.assert_array_equal(policy.params["b0"], p.theta["b"])


def test_probs_policy_eligibility_is_the_cores():
    w = np.array([0.5, 1.5, 2.0])
    policy = ProbsPolicy(w)
    a = np.array([0, 2, 2, 1])
    psi = np.array([0.3, -1.0, 2.0, 0.5])
    g, _ = policy.grad_log_prob(np.ones((4, 1)), a, psi)
    loop = sum(psi[i] * api.score("categorical", int(a[i]), probs=w)["probs"] for i in range(4))
    np.testing.assert_allclose(g["probs"], loop, atol=1e-12)
    draws = policy.act(np.ones((20000, 1)), np.random.default_rng(0))
    freq = np.bincount(draws, minlength=3) / 20000
    np.testing.assert_allclose(freq, w / w.sum(), atol=0.02)  # ≈ 6 standard errors


def test_policy_gradient_is_called_with_the_value_oracle():
    """value baseline: b_et = V̄(φ(s_et)); on a bandit that is J, so ĝ_value = ĝ_none − J ĝ_1."""
    p = get_problem("bandit-logits")
    (batch,) = collect_batches(p, 1, 8, num_envs=4, seed=2)
    policy = make_policy(p, np.random.default_rng(0))
    (g_value,) = estimates(p, [batch], "value", discount_weighting=False, policy=policy)
    (g_none,) = estimates(p, [batch], "none", discount_weighting=False, policy=policy)
    ones = batch._replace(rewards=np.where(batch.mask, 1.0, 0.0))
    grads, _ = policy_gradient(policy, ones, gamma=1.0, baseline="none")
    np.testing.assert_allclose(g_value, g_none - p.J * p.flatten(p.from_policy(grads)))


# the statistics --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "p, df, expected",  # Student-t quantiles from standard tables
    [(0.975, 30, 2.0423), (0.995, 60, 2.6603), (0.9995, 30, 3.6460), (0.999, 100, 3.1737)],
)
def test_t_quantile_matches_tables(p, df, expected):
    assert abs(t_quantile(p, df) - expected) < 2e-3


def test_z_test_false_alarm_rate_is_at_most_alpha():
    """Under H₀ with Gaussian estimates: 4000 repetitions of N = 50 estimates of p = 4
    components at α = 0.2. Bonferroni on independent components gives 1 − (1 − α/4)⁴ = 0.185;
    the bounds are that ± 4 standard errors of a rate (0.006)."""
    rng = np.random.default_rng(0)
    n, p, reps, alpha = 50, 4, 4000, 0.2
    G = rng.normal(size=(reps, n, p))
    z = (G.mean(axis=1)) / (G.std(axis=1, ddof=1) / math.sqrt(n))
    rate = np.mean(np.abs(z).max(axis=1) > z_threshold(alpha, p, n))
    assert 0.16 < rate < 0.21, rate


def test_z_scores_of_constant_components():
    G = np.array([[1.0, 2.0], [1.0, 3.0], [1.0, 4.0]])
    _, se, z = z_scores(G, np.array([1.0, 3.0]))
    assert se[0] == 0 and z[0] == 0 and z[1] == 0
    _, _, z = z_scores(G, np.array([0.5, 3.0]))
    assert np.isinf(z[0])


def test_run_problem_rejects_bad_settings():
    p = get_problem("bandit-logits")
    with pytest.raises(ValueError, match="samples must be at least 30"):
        run_problem(p, samples=10)
    with pytest.raises(ValueError, match="episodes must be at least 2"):
        run_problem(p, samples=30, episodes=1)
    with pytest.raises(ValueError, match="unknown baseline"):
        run_problem(p, samples=30, baselines=("median",))
    with pytest.raises(ValueError, match="unknown problem"):
        LabConfig(problem="nope")
