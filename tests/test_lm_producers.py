"""metrics.csv's columns, each written by one producer (``lm.metrics.PRODUCERS``).

A run's row is assembled from its producers' parts (``metrics_row``): the counters, the batch,
the evaluation, the update, the rollout, the phases' clocks, the loop's clock. Each column has
one owner, and no part can write another's column (a user's own names live under ``user/``:
``tests/test_user_metrics.py``)."""

from collections import Counter

import pytest
import torch

from eligibility.lm.metrics import (
    COLUMNS,
    PRODUCERS,
    WIDENING,
    batch_columns,
    frac_zero_std,
    metrics_row,
)


def test_every_column_has_exactly_one_producer():
    owners = Counter(c for columns in PRODUCERS.values() for c in columns)
    assert set(owners) == set(COLUMNS)
    assert [c for c, n in owners.items() if n > 1] == []


def test_a_part_that_writes_a_column_it_does_not_own_is_refused():
    with pytest.raises(ValueError, match="rollout wrote 'update'"):
        metrics_row(counters={"update": 1}, rollout={"update": 7})
    with pytest.raises(ValueError, match="batch wrote 'user/x'"):
        metrics_row(batch={"user/x": 1.0})
    with pytest.raises(ValueError, match="'metrics' is not a producer"):
        metrics_row(metrics={"loss": 1.0})


def test_the_rollout_widens_the_row_only_under_its_prefixes():
    row = metrics_row(rollout={"turns": 2.0, "rewards/f/mean": 0.5, "user/loss": -1.0})
    assert row == {"turns": 2.0, "rewards/f/mean": 0.5, "user/loss": -1.0}
    assert WIDENING == {"rollout": ("rewards/", "user/")}
    assert not any(c.startswith(WIDENING["rollout"]) for c in COLUMNS)


def test_the_batch_columns_against_a_plain_loop():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 1.0, 0.0])
    correct = rewards == 1.0
    lengths = torch.tensor([3.0, 5.0, 2.0, 7.0, 1.0, 4.0, 6.0, 8.0])
    got = batch_columns(rewards, correct, lengths, group_size=2)
    r, ok, n = rewards.tolist(), correct.tolist(), lengths.tolist()
    wrong = [x for x, good in zip(n, ok, strict=True) if not good]
    groups = [r[i : i + 2] for i in range(0, len(r), 2)]
    assert got == {
        "mean_reward": pytest.approx(sum(r) / len(r)),
        "min_reward": min(r),
        "max_reward": max(r),
        "accuracy": sum(ok) / len(ok),
        "frac_reward_zero_std": sum(len(set(g)) == 1 for g in groups) / len(groups),
        "mean_length": pytest.approx(sum(n) / len(n)),
        "incorrect_length": pytest.approx(sum(wrong) / len(wrong)),
    }
    assert got["frac_reward_zero_std"] == frac_zero_std(rewards, 2) == 0.5
    every = batch_columns(rewards, torch.ones(8, dtype=torch.bool), lengths, group_size=4)
    assert every["incorrect_length"] is None  # none wrong: no such length
