"""Returns, baselines, episode collection and the estimate against plain-loop references."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import test_reinforce_toyenvs as toy
from eligibility.backends.numpy import MLPPolicy
from eligibility.reinforce.baselines import baseline
from eligibility.reinforce.envs import make_vec_env
from eligibility.reinforce.estimator import (
    BASELINES,
    Batch,
    advantages,
    collect_episodes,
    normalise,
    policy_gradient,
    reward_to_go,
)
from eligibility.reinforce.rollout import evaluate_returns
from eligibility.reinforce.spaces import head_for_space, obs_dim_for_space


def _random_mask(rng, n_ep, horizon):
    lengths = rng.integers(1, horizon + 1, n_ep)
    lengths[0] = horizon
    return np.arange(horizon)[None, :] < lengths[:, None]


# -- returns ---------------------------------------------------------------------------------


def _rtg_loop(rewards, mask, gamma, bootstrap=None):
    out = np.zeros_like(rewards)
    for e in range(rewards.shape[0]):
        length = int(mask[e].sum())
        for t in range(length):
            g = sum(gamma ** (k - t) * rewards[e, k] for k in range(t, length))
            if bootstrap is not None:
                g += gamma ** (length - t) * bootstrap[e]
            out[e, t] = g
    return out


@pytest.mark.parametrize("gamma", [0.0, 0.9, 1.0])
def test_reward_to_go_matches_loop(gamma):
    rng = np.random.default_rng(0)
    mask = _random_mask(rng, 6, 9)
    rewards = rng.standard_normal((6, 9)) * mask
    np.testing.assert_allclose(reward_to_go(rewards, mask, gamma), _rtg_loop(rewards, mask, gamma))
    boot = rng.standard_normal(6)
    np.testing.assert_allclose(
        reward_to_go(rewards, mask, gamma, boot), _rtg_loop(rewards, mask, gamma, boot)
    )


def test_reward_to_go_single_episode_by_hand():
    g = reward_to_go(np.array([[1.0, 2.0, 3.0, 0.0]]), np.array([[1, 1, 1, 0]], bool), 0.5)
    np.testing.assert_allclose(g, [[1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3.0, 0.0]])


# -- baselines -------------------------------------------------------------------------------


def _baseline_loop(kind, g, mask, b_bar=None, seen=None, decay=0.9):
    n_ep, horizon = g.shape
    b = np.zeros_like(g)
    for e in range(n_ep):
        for t in range(horizon):
            if not mask[e, t]:
                continue
            active = [i for i in range(n_ep) if mask[i, t]]
            if kind == "batch-mean":
                b[e, t] = np.mean([g[i, t] for i in active])
            elif kind == "rloo":
                others = [g[i, t] for i in active if i != e]
                b[e, t] = np.mean(others) if others else 0.0
            elif kind == "moving-average":
                b[e, t] = b_bar[t] if t < len(b_bar) else 0.0
    return b


@pytest.mark.parametrize("kind", ["none", "batch-mean", "rloo"])
def test_batch_baselines_match_loop(kind):
    rng = np.random.default_rng(1)
    mask = _random_mask(rng, 5, 7)
    g = rng.standard_normal((5, 7)) * mask
    b, _ = baseline(kind, g, mask)
    np.testing.assert_allclose(b, _baseline_loop(kind, g, mask), atol=1e-15)


def test_moving_average_baseline_matches_loop_over_batches():
    rng = np.random.default_rng(2)
    state = None
    b_ref = np.zeros(0)
    seen = np.zeros(0, bool)
    for horizon in (4, 7, 5):
        mask = _random_mask(rng, 4, horizon)
        g = rng.standard_normal((4, horizon)) * mask
        b, state = baseline("moving-average", g, mask, state, decay=0.8)
        # reference: b used = previous b̄ (0 where unseen); then b̄_t ← 0.8 b̄_t + 0.2 Ḡ_t
        b_used = np.array([[b_ref[t] if t < len(b_ref) else 0.0 for t in range(horizon)]] * 4)
        np.testing.assert_allclose(b, b_used * mask)
        new = list(b_ref) + [0.0] * max(0, horizon - len(b_ref))
        new_seen = list(seen) + [False] * max(0, horizon - len(seen))
        for t in range(horizon):
            col = [g[e, t] for e in range(4) if mask[e, t]]
            if col:
                m = float(np.mean(col))
                new[t] = 0.8 * new[t] + 0.2 * m if new_seen[t] else m
                new_seen[t] = True
        b_ref, seen = np.array(new), np.array(new_seen)
        np.testing.assert_allclose(state["b_bar"], b_ref)


def test_value_baseline_and_errors():
    mask = np.array([[True, True], [True, False]])
    g = np.array([[1.0, 2.0], [3.0, 0.0]])
    v = np.array([[0.5, 0.5], [0.5, 9.0]])
    b, _ = baseline("value", g, mask, values=v)
    np.testing.assert_allclose(b, [[0.5, 0.5], [0.5, 0.0]])
    with pytest.raises(ValueError, match="values"):
        baseline("value", g, mask)
    with pytest.raises(ValueError, match="baseline must be one of"):
        baseline("median", g, mask)
    assert BASELINES == ("none", "moving-average", "batch-mean", "rloo", "value")


def test_rloo_is_unbiased_and_batch_mean_is_not():
    """E[(G − b) e] for a one-step bandit with E episodes: rloo matches b = 0, batch-mean shrinks.

    One Bernoulli unit p = σ(z), reward r = y; E[r e] = p(1 − p). With b = batch mean the
    own-episode term scales the expectation by (1 − 1/E); rloo leaves it exact.
    """
    p, n_ep = 0.3, 4
    exact = p * (1 - p)
    # enumerate every joint outcome of the E draws: exact expectations, no sampling noise
    ys = np.array(np.meshgrid(*[[0, 1]] * n_ep)).reshape(n_ep, -1).T
    probs = np.prod(np.where(ys == 1, p, 1 - p), axis=1)
    est = {}
    for kind in ("none", "rloo", "batch-mean"):
        total = 0.0
        for y, w in zip(ys, probs, strict=True):
            g = y[:, None].astype(float)
            b, _ = baseline(kind, g, np.ones_like(g, bool))
            e = y - p
            total += w * np.mean((g[:, 0] - b[:, 0]) * e)
        est[kind] = total
    assert est["none"] == pytest.approx(exact)
    assert est["rloo"] == pytest.approx(exact)
    assert est["batch-mean"] == pytest.approx(exact * (1 - 1 / n_ep))


# -- the estimate ------------------------------------------------------------------------------


def _batch(rng, n_ep=4, horizon=6, obs_dim=3, k=3):
    mask = _random_mask(rng, n_ep, horizon)
    return Batch(
        obs=rng.standard_normal((n_ep, horizon, obs_dim)),
        actions=rng.integers(0, k, (n_ep, horizon)),
        rewards=rng.standard_normal((n_ep, horizon)) * mask,
        mask=mask,
        terminated=np.ones(n_ep, bool),
    )


@pytest.mark.parametrize("kind", ["none", "batch-mean", "rloo"])
@pytest.mark.parametrize("discount_weighting", [False, True])
def test_policy_gradient_is_the_explicit_double_sum(kind, discount_weighting):
    rng = np.random.default_rng(3)
    batch = _batch(rng)
    policy = MLPPolicy(3, head_for_space(spaces.Discrete(3)), hidden=(4,), rng=rng)
    gamma = 0.9
    grads, info = policy_gradient(
        policy, batch, gamma=gamma, baseline=kind, discount_weighting=discount_weighting
    )
    g = _rtg_loop(batch.rewards, batch.mask, gamma)
    b = _baseline_loop(kind, g, batch.mask)
    ref = {k: np.zeros_like(v) for k, v in policy.params.items()}
    n_ep, horizon = batch.mask.shape
    for e in range(n_ep):
        for t in range(horizon):
            if not batch.mask[e, t]:
                continue
            w = gamma**t if discount_weighting else 1.0
            one, _ = policy.grad_log_prob(
                batch.obs[e, t][None], batch.actions[e, t][None], np.array([1.0])
            )
            for k in ref:
                ref[k] += w * (g[e, t] - b[e, t]) * one[k] / n_ep
    for k in ref:
        np.testing.assert_allclose(grads[k], ref[k], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(info["returns"], g)


def test_normalise_and_advantages_options():
    rng = np.random.default_rng(4)
    batch = _batch(rng)
    psi, _ = advantages(batch, gamma=1.0, baseline="none")
    z = normalise(psi, batch.mask)
    assert z[batch.mask].mean() == pytest.approx(0.0, abs=1e-12)
    assert z[batch.mask].std() == pytest.approx(1.0, rel=1e-6)
    assert np.all(z[~batch.mask] == 0)
    with pytest.raises(ValueError, match="baseline must be one of"):
        policy_gradient(None, batch, gamma=1.0, baseline="bogus")


# -- collecting episodes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_envs", "n_episodes", "mode"),
    [(1, 5, "NextStep"), (3, 7, "NextStep"), (4, 4, "NextStep"), (3, 8, "SameStep")],
)
def test_episodes_split_across_autoreset_and_truncation(n_envs, n_episodes, mode):
    from gymnasium.vector import AutoresetMode

    am = AutoresetMode.NEXT_STEP if mode == "NextStep" else AutoresetMode.SAME_STEP
    envs = gym.make_vec(
        toy.COUNT_ID,
        num_envs=n_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": am},
    )
    rng = np.random.default_rng(0)
    batch = collect_episodes(envs, lambda s, m: rng.integers(0, 2, len(s)), n_episodes, seed=3)
    envs.close()
    assert batch.mask.shape[0] == n_episodes
    for e in range(n_episodes):
        length = int(batch.mask[e].sum())
        assert batch.mask[e, :length].all() and not batch.mask[e, length:].any()  # a prefix
        natural = int(batch.obs[e, 0, 1])  # the length drawn at reset, carried in s_t
        # rewards 1, 2, …, T: the steps are in order, none lost, none from a neighbour
        np.testing.assert_array_equal(batch.rewards[e, :length], np.arange(1, length + 1))
        np.testing.assert_allclose(batch.obs[e, :length, 0], np.arange(length) / 10)
        assert (batch.obs[e, :length, 1] == natural).all()  # one episode, not two glued
        if natural <= 5:
            assert length == natural and batch.terminated[e]
        else:  # the TimeLimit cut it: truncated, not terminal
            assert length == 5 and not batch.terminated[e]
        assert batch.final_obs[e, 0] == pytest.approx(length / 10)
    assert not batch.terminated.all() and batch.terminated.any()  # both kinds occurred


def test_collect_is_seeded():
    envs = make_vec_env(toy.COUNT_ID, 2, "sync")
    b1 = collect_episodes(envs, lambda s, m: np.zeros(len(s), int), 5, seed=11)
    b2 = collect_episodes(envs, lambda s, m: np.zeros(len(s), int), 5, seed=11)
    envs.close()
    np.testing.assert_array_equal(b1.obs, b2.obs)
    with pytest.raises(ValueError, match="n_episodes"):
        collect_episodes(envs, lambda s, m: s, 0)


def test_cartpole_vector_env_episodes_are_complete():
    envs = make_vec_env("CartPole-v1", 4)
    assert type(envs).__name__ == "CartPoleVectorEnv"  # the fast NumPy-vectorised env
    rng = np.random.default_rng(0)
    batch = collect_episodes(envs, lambda s, m: rng.integers(0, 2, len(s)), 6, seed=0)
    assert batch.terminated.all()  # random play falls well before 500 steps
    np.testing.assert_array_equal(batch.rewards.sum(1), batch.lengths)
    ret = evaluate_returns(envs, lambda s, m: rng.integers(0, 2, len(s)), 6, seed=0)
    assert ret.shape == (6,) and (ret >= 8).all()
    # the lean evaluator against the full collector: a deterministic policy and the same reset
    # seed give the same episodes, so the same returns in the same order
    lean = lambda s, m: (s[:, 2] > 0).astype(np.int64)  # noqa: E731 (push towards the lean)
    ref = collect_episodes(envs, lean, 7, seed=5).returns
    np.testing.assert_array_equal(evaluate_returns(envs, lean, 7, seed=5), ref)
    assert len(set(ref.tolist())) > 1  # episodes differ: an order or quota slip would show
    envs.close()


# -- spaces --------------------------------------------------------------------------------------


def test_head_for_space_every_supported_space():
    assert head_for_space(spaces.Discrete(3)).kind == "categorical"
    h = head_for_space(spaces.MultiDiscrete([2, 3]))
    assert (h.kind, h.n_out) == ("multi-categorical", 5)
    h = head_for_space(spaces.MultiBinary((2, 2)))
    assert (h.kind, h.n_out, h.action_shape) == ("bernoulli", 4, (2, 2))
    h = head_for_space(spaces.Box(-2.0, 2.0, (3,)))
    assert (h.kind, h.n_out) == ("normal", 3)
    np.testing.assert_allclose(h.to_env(np.array([[-5.0, 0.5, 9.0]])), [[-2.0, 0.5, 2.0]])
    assert head_for_space(spaces.Discrete(3, start=1)).to_env(np.array([0, 2])).tolist() == [1, 3]


@pytest.mark.parametrize(
    "space",
    [spaces.Dict({"a": spaces.Discrete(2)}), spaces.Tuple([spaces.Discrete(2)]), spaces.Text(5)],
)
def test_unsupported_space_is_named(space):
    with pytest.raises(ValueError, match=type(space).__name__):
        head_for_space(space)


@pytest.mark.parametrize(
    "space", [spaces.Text(5), spaces.Graph(spaces.Box(0, 1, (2,)), None)], ids=["Text", "Graph"]
)
def test_unsupported_observation_space_is_named(space):
    with pytest.raises(ValueError, match=type(space).__name__):
        obs_dim_for_space(space)


def test_unknown_env_lists_close_ids():
    with pytest.raises(ValueError, match="CartPole-v1"):
        make_vec_env("CartPol-v1", 1)
