"""The training loop: every action space, determinism, resume, NaN stop, a run that improves."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

import eligibility.reinforce.trainer as train_module
import test_reinforce_toyenvs as toy
from eligibility.reinforce import Config, NonFiniteError, train
from eligibility.reinforce.logs import TIMING_COLUMNS
from eligibility.reinforce.runs import load_agent


def _rows(path):
    with open(path / "metrics.csv", newline="") as f:
        return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in csv.DictReader(f)]


def _toy(kind, **kw):
    base = dict(
        env_id=toy.TOY_IDS[kind],
        episodes_per_batch=4,
        num_envs=2,
        total_steps=48,
        hidden=(4,),
        eval_every=2,
        eval_episodes=3,
        progress=False,
        target_return=math.inf,  # no target: every run trains its 3 updates
    )
    base.update(kw)
    return Config(**base)


@pytest.mark.parametrize("kind", list(toy.TOY_IDS))
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_every_action_space_trains(kind, backend):
    result = train(_toy(kind, backend=backend, entropy_coef=0.01, max_grad_norm=1.0))
    assert result.updates == 3 and result.env_steps == 48 and result.episodes == 12
    assert result.target_return is None and not result.solved
    assert result.final_eval_return is not None
    for row in result.history:
        assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])


def test_a_met_target_ends_the_run_at_that_evaluation():
    result = train(_toy("discrete", target_return=-1e9))  # any return meets it
    assert result.solved and result.updates == 1 and result.target_return == -1e9
    assert not train(_toy("discrete", target_return=1e9)).solved  # none meets it: 3 updates


@pytest.mark.parametrize("baseline", ["none", "moving-average", "batch-mean", "rloo", "value"])
def test_every_baseline_runs(baseline):
    result = train(_toy("box", baseline=baseline, normalize_advantages=True, optimizer="sgd"))
    assert result.updates == 3
    if baseline == "value":
        assert all(math.isfinite(r["value_loss"]) for r in result.history)


def test_same_seed_same_metrics(tmp_path):
    cfg = dict(total_steps=600, episodes_per_batch=4, eval_every=2, eval_episodes=3, progress=False)
    train(Config.for_env("CartPole-v1", seed=4, out=str(tmp_path / "a"), **cfg))
    train(Config.for_env("CartPole-v1", seed=4, out=str(tmp_path / "b"), **cfg))
    train(Config.for_env("CartPole-v1", seed=5, out=str(tmp_path / "c"), **cfg))
    a, b, c = _rows(tmp_path / "a"), _rows(tmp_path / "b"), _rows(tmp_path / "c")
    assert len(a) >= 3 and a == b
    assert a != c


@pytest.mark.parametrize("backend", ["numpy", pytest.param("torch", marks=pytest.mark.slow)])
def test_resume_after_interruption_gives_the_same_run(tmp_path, monkeypatch, backend):
    cfg = dict(
        backend=backend,
        baseline="value",
        total_steps=1000,
        episodes_per_batch=4,
        eval_every=2,
        eval_episodes=2,
        checkpoint_every=3,
        progress=False,
    )
    train(Config.for_env("CartPole-v1", seed=1, out=str(tmp_path / "full"), **cfg))

    real = train_module.collect_episodes
    calls = {"n": 0}

    def dying(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:  # dies collecting update 5: checkpoint at 3, row 4 already logged
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(train_module, "collect_episodes", dying)
    with pytest.raises(KeyboardInterrupt):
        train(Config.for_env("CartPole-v1", seed=1, out=str(tmp_path / "cut"), **cfg))
    assert len(_rows(tmp_path / "cut")) == 4
    monkeypatch.setattr(train_module, "collect_episodes", real)
    result = train(Config.for_env("CartPole-v1", seed=1, **cfg), resume=tmp_path / "cut")
    assert _rows(tmp_path / "cut") == _rows(tmp_path / "full")
    assert 500 < result.env_steps <= 1000  # the batch that would pass the budget is dropped


def test_short_cartpole_run_improves():
    """6,500 steps (9 updates): the last three batches' mean return is 3.9× the first three's
    (seeds 0–9: 2.7× to 4.5×; at 8,000 steps 3.0× to 6.3×, at 25,000 steps 8–10×), against the
    2.5× asked; a run that does not learn stays near 1×."""
    result = train(
        Config.for_env("CartPole-v1", seed=0, total_steps=6_500, eval_every=0, progress=False)
    )
    returns = [r["mean_return"] for r in result.history]
    assert np.mean(returns[-3:]) > 2.5 * np.mean(returns[:3])


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_nan_stops_the_run_and_keeps_the_checkpoint(tmp_path, monkeypatch, backend):
    out = tmp_path / "run"
    cfg = Config.for_env(
        "CartPole-v1",
        backend=backend,
        total_steps=10**6,
        eval_every=0,
        checkpoint_every=2,
        progress=False,
        out=str(out),
    )
    real = train_module.policy_gradient
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        calls["n"] += 1
        grads, info = real(*args, **kwargs)
        if calls["n"] == 3:
            grads = {k: np.full_like(v, np.nan) for k, v in grads.items()}
        return grads, info

    monkeypatch.setattr(train_module, "policy_gradient", poisoned)
    with pytest.raises(NonFiniteError, match="update 3"):
        train(cfg)
    _, agent, _ = load_agent(out)  # the checkpoint of update 2 loads and is finite
    assert all(np.isfinite(v).all() for v in agent.policy.params.values())
    assert len(_rows(out)) == 2


def test_existing_run_is_not_overwritten(tmp_path):
    cfg = Config.for_env(
        "CartPole-v1", total_steps=200, eval_every=0, progress=False, out=str(tmp_path)
    )
    train(cfg)
    with pytest.raises(ValueError, match="resume"):
        train(cfg)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("gamma", 1.5, "gamma"),
        ("lr", 0.0, "lr"),
        ("baseline", "median", "baseline"),
        ("episodes_per_batch", 0, "episodes-per-batch"),
        ("hidden", (0,), "hidden"),
        ("max_grad_norm", -1.0, "max-grad-norm"),
    ],
)
def test_bad_config_values_name_the_option(field, value, match):
    with pytest.raises(ValueError, match=match):
        Config.for_env("CartPole-v1", **{field: value})


def test_config_round_trips_through_dict():
    cfg = Config.for_env("CartPole-v1", hidden=(8, 8), target_return=100.0)
    assert Config.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown config keys"):
        Config.from_dict({**cfg.to_dict(), "bogus": 1})


def test_progress_prints_log_lines_when_piped(capsys):
    train(Config.for_env("CartPole-v1", total_steps=800, eval_every=1, eval_episodes=3))
    out, err = capsys.readouterr()
    assert "update 1  steps" in err and "eval" in err and "steps/s" in err
    assert out == ""  # progress is not a result: stderr only (docs/cli.md)


def test_callback_sees_each_row_and_can_stop_the_run(tmp_path):
    seen = []

    def stop_after_two(row):
        seen.append(row)
        return len(seen) < 2

    result = train(
        _toy("box", total_steps=10_000, out=str(tmp_path / "run")), callback=stop_after_two
    )
    assert result.updates == 2 and [r["update"] for r in seen] == [1, 2]
    assert seen[-1] == result.history[-1]
    metrics = _rows(tmp_path / "run")
    assert [r["update"] for r in metrics] == ["1", "2"]
    resumed = train(_toy("box", total_steps=80), resume=tmp_path / "run")
    # stopped cleanly: the checkpoint holds update 2, and the resume goes on from 3
    assert [int(r["update"]) for r in resumed.history[:3]] == [1, 2, 3]
