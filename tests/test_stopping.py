"""The greedy test's stopping rules: the sequential verdict is the full test's, and its triggers.

The reference is a plain loop over whole episodes: the full test plays every episode to its
end and compares the mean with the target. The sequential test sees the same episodes one
vector step at a time and may stop early; whenever it stops, its verdict must be the full one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from eligibility.reinforce import Config, train
from eligibility.reinforce.stopping import crossed, mean_bounds, reward_range, verdict


def _full_verdict(episodes, target):
    """The full test by a plain loop: every return summed, then the mean against the target."""
    total = 0.0
    for rewards in episodes:
        total += sum(rewards)
    return total / len(episodes) >= target


def _sequential_verdict(episodes, target, r_range, horizon):
    """Play the episodes side by side, one step each per vector step, until a verdict is sure.

    The episodes padded to T; at each step those still running take their next reward (one
    masked step for all of them, as a vector env steps its sub-environments)."""
    n = len(episodes)
    lengths = np.array([len(r) for r in episodes])
    R = np.zeros((n, horizon))
    for i, rewards in enumerate(episodes):
        R[i, : len(rewards)] = rewards
    g, t, ended = np.zeros(n), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    for step in range(horizon):
        running = ~ended
        g[running] += R[running, step]
        t[running] += 1
        ended = t == lengths
        v = verdict(g, t, ended, target, r_range, horizon)
        if v is not None:
            return v, int(t.sum())
    raise AssertionError("every episode ended, yet no verdict")


def _cartpole_like(rng, n, horizon):
    """Episodes of reward 1 per step, lengths anywhere in [1, T] (the time limit)."""
    good = rng.uniform()  # a mix of policies: some pass, some fail, some on the edge
    return [
        [1.0] * int(horizon if rng.uniform() < good else rng.integers(1, horizon + 1))
        for _ in range(n)
    ]


def _acrobot_like(rng, n, horizon):
    """Episodes of reward -1 per step but 0 at the terminal one, or -1 throughout to T."""
    out = []
    for _ in range(n):
        length = int(rng.integers(1, horizon + 1))
        out.append([-1.0] * (length - 1) + [0.0 if length < horizon else -1.0])
    return out


def _inverted_pendulum_like(rng, n, horizon):
    """InvertedPendulum-v5: 1 per step while up, 0 on the step it falls; to T if it never does."""
    good = rng.uniform()
    out = []
    for _ in range(n):
        length = horizon if rng.uniform() < good else int(rng.integers(1, horizon + 1))
        out.append([1.0] * (length - 1) + [0.0 if length < horizon else 1.0])
    return out


@pytest.mark.parametrize(
    ("make", "r_range", "horizon", "target"),
    [
        (_cartpole_like, (1.0, 1.0), 50, 45.0),
        (_acrobot_like, (-1.0, 0.0), 60, -25.0),
        (_inverted_pendulum_like, (0.0, 1.0), 100, 95.0),
    ],
    ids=["cartpole-like", "acrobot-like", "inverted-pendulum-like"],
)
def test_sequential_verdict_is_the_full_verdict(make, r_range, horizon, target):
    rng = np.random.default_rng(0)
    verdicts, saved = [], 0
    for _ in range(200):
        episodes = make(rng, 20, horizon)
        got, steps = _sequential_verdict(episodes, target, r_range, horizon)
        assert got == _full_verdict(episodes, target)
        verdicts.append(got)
        saved += sum(map(len, episodes)) - steps
    assert 0 < sum(verdicts) < len(verdicts)  # both verdicts were exercised
    assert saved > 0  # and the rule did stop early


def test_inverted_pendulum_row_bounds_the_env_rewards():
    # The row is read from Gymnasium's source; a short random rollout keeps it honest.
    gym = pytest.importorskip("gymnasium")
    pytest.importorskip("mujoco")
    r_lo, r_hi = reward_range("InvertedPendulum-v5")
    env = gym.make("InvertedPendulum-v5")
    env.reset(seed=0)
    seen = set()
    for _ in range(300):
        _, r, term, trunc, _ = env.step(env.action_space.sample())
        seen.add(float(r))
        if term or trunc:
            env.reset()
    env.close()
    assert seen <= {0.0, 1.0} and r_lo <= min(seen) and max(seen) <= r_hi
    assert seen == {0.0, 1.0}  # both rewards occur: random actions drop the pole


def test_an_early_fail_is_certain_at_the_edge():
    # T = 10, target 9.5 over 2 episodes: one episode of length 8 leaves at most (8 + 10) / 2 = 9.
    g, t = np.array([8.0, 3.0]), np.array([8, 3])
    assert verdict(g, t, np.array([True, False]), 9.5, (1.0, 1.0), 10) is False
    assert verdict(g, t, np.array([True, False]), 9.0, (1.0, 1.0), 10) is None  # 9 ≥ 9 reachable
    assert verdict(g, t, np.array([False, False]), 9.5, (1.0, 1.0), 10) is None


def test_mean_bounds_by_a_plain_loop():
    rng = np.random.default_rng(1)
    for _ in range(50):
        n, horizon = 7, 30
        g, t = rng.normal(size=n), rng.integers(0, horizon + 1, size=n)
        ended = rng.uniform(size=n) < 0.5
        r_lo, r_hi = -rng.uniform(), rng.uniform()
        lo = hi = 0.0
        for i in range(n):
            left = 0 if ended[i] else horizon - t[i]
            lo += g[i] + left * min(r_lo, 0.0)
            hi += g[i] + left * max(r_hi, 0.0)
        got = mean_bounds(g, t, ended, (r_lo, r_hi), horizon)
        assert got == pytest.approx((lo / n, hi / n), rel=1e-12)


def test_no_time_limit_and_unknown_range():
    g, t, ended = np.array([-3.0, -2.0]), np.array([3, 2]), np.array([False, False])
    # rewards ≤ 0 and no time limit: the mean can only fall; it is already below -2.6.
    assert verdict(g, t, ended, -2.4, (-1.0, 0.0), math.inf) is False
    assert verdict(g, t, ended, -2.4, None, math.inf) is None
    assert verdict(g, t, np.array([True, True]), -2.5, None, math.inf) is True
    assert reward_range("CartPole-v1") == (1.0, 1.0)
    assert reward_range("my.module:CartPole-v1") == (1.0, 1.0)
    assert reward_range("NoSuch-v0") is None


def test_crossed_from_below_only():
    assert crossed(None, 480.0, 475.0)
    assert crossed(470.0, 475.0, 475.0)
    assert not crossed(476.0, 480.0, 475.0)  # already above: not a crossing
    assert not crossed(470.0, 474.9, 475.0)
    assert not crossed(None, 1e9, None)  # no target: never


def _cartpole(**kw):
    base = dict(seed=0, total_steps=3000, eval_every=1000, eval_episodes=20, progress=False)
    return Config.for_env("CartPole-v1", **{**base, **kw})


@pytest.mark.parametrize("eval_envs", [20, 5])
def test_trainer_sequential_test_agrees_with_the_full_test_and_costs_less(eval_envs):
    # A low target (a verdict that can go either way early in training); the evaluations draw
    # from their own generator, so both runs train identically and test the same policies.
    kw = dict(target_return=60.0, eval_on_cross=False, eval_envs=eval_envs)
    full = train(_cartpole(sequential_eval=False, **kw))
    seq = train(_cartpole(**kw))
    evals_full = [r for r in full.history if r["eval_return"] is not None]
    evals_seq = [r for r in seq.history if r["eval_return"] is not None]
    assert [r["update"] for r in evals_full] == [r["update"] for r in evals_seq]
    assert [r["eval_return"] >= 60.0 for r in evals_full] == [
        r["eval_return"] >= 60.0 for r in evals_seq
    ]
    assert full.solved == seq.solved
    assert 0 < seq.eval_env_steps < full.eval_env_steps
    assert seq.history[-1]["eval_env_steps"] == seq.eval_env_steps
    assert full.env_steps == seq.env_steps  # evaluation steps never count as training steps


def test_trainer_tests_when_the_training_returns_cross_the_target():
    # Target 15: the first batch's mean crosses it; eval_every=0 leaves the crossing alone.
    on = train(_cartpole(target_return=15.0, eval_every=0, total_steps=600))
    off = train(_cartpole(target_return=15.0, eval_every=0, total_steps=600, eval_on_cross=False))
    assert on.history[0]["eval_return"] is not None and on.eval_env_steps > 0
    assert all(r["eval_return"] is None for r in off.history) and off.eval_env_steps == 0


def test_trainer_sequential_test_on_the_box_env_agrees_with_the_full_test():
    # InvertedPendulum-v5 (r in [0, 1], T = 1000): a fall loses the rest of its episode, so
    # an early policy's test is failed after a few short episodes, not 10 × 1000 steps.
    # 700 steps, a test every 250: two tests (seeds 0-2 too), in half the training of 1500.
    pytest.importorskip("mujoco")
    base = dict(seed=0, total_steps=700, eval_every=250, eval_episodes=10, progress=False)
    base |= dict(eval_on_cross=False, sampled_report=False)
    full = train(Config.for_env("InvertedPendulum-v5", sequential_eval=False, **base))
    seq = train(Config.for_env("InvertedPendulum-v5", **base))
    verdicts = [
        [r["eval_return"] >= 950.0 for r in res.history if r["eval_return"] is not None]
        for res in (full, seq)
    ]
    assert verdicts[0] == verdicts[1] and len(verdicts[0]) >= 2
    assert 0 < seq.eval_env_steps < full.eval_env_steps
    assert full.env_steps == seq.env_steps
