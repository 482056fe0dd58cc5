"""Bring your own: every observation space, action masks, module:Id envs, --env-kwargs,
--module, ``eligibility.load(run).predict(obs)`` and ``evaluate --video``."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

import byo_envs
import eligibility
import test_reinforce_toyenvs as toy
from eligibility.cli import main
from eligibility.reinforce import Config, train
from eligibility.reinforce.spaces import observation_map

QUICK = dict(progress=False, eval_episodes=10, hidden=())


# -- observations --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(byo_envs.OBS_SPACES))
def test_observation_map_is_gymnasium_flatten_row_by_row(kind):
    space = byo_envs.OBS_SPACES[kind]
    obs_map = observation_map(space)
    items = [byo_envs._encode(kind, t) for t in range(4)]
    batch = concatenate(space, items, create_empty_array(space, 4))  # as a vector env gives it
    x, mask = obs_map.batch(batch, 4)
    ref = np.stack([spaces.flatten(space, o) for o in items]).astype(np.float64)
    np.testing.assert_array_equal(x, ref)
    assert mask is None and x.shape == (4, spaces.flatdim(space))
    assert obs_map.batch_size(items[1]) is None and obs_map.batch_size(batch) == 4
    np.testing.assert_array_equal(obs_map.one(items[1])[0][0], ref[1])
    assert batch_space(space, 4).contains(batch)


NESTED = ("dict", "tuple")


@pytest.mark.parametrize(
    "kind",
    # the nested spaces (their parts: discrete, box, multibinary) in make test; each space's
    # map to the network's input is held fast above; a run on each flat space nightly
    [k if k in NESTED else pytest.param(k, marks=pytest.mark.slow) for k in byo_envs.OBS_SPACES],
)
def test_every_observation_space_trains(kind):
    """The nested spaces in 500 steps: seeds 0–9 of both evaluate 4.0 from 96 steps on (one
    evaluation every 32 steps, to 640). The flat box and multibinary take longer: 3000."""
    steps, every = (500, 250) if kind in NESTED else (3000, 1000)
    config = Config.for_env(
        "byo_envs:Obs-v0", env_kwargs={"obs": kind}, total_steps=steps, eval_every=every, **QUICK
    )
    result = train(config)
    assert result.final_eval_return == 4.0  # the parity task is learnt from every encoding


# -- action masks --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "in_obs"), [("numpy", False), ("torch", True)], ids=["info-numpy", "obs-torch"]
)
def test_masked_actions_are_never_taken_in_training_or_evaluation(tmp_path, backend, in_obs):
    out = tmp_path / "run"
    config = Config.for_env(
        "byo_envs:Masked-v0",
        env_kwargs={"in_obs": in_obs},
        backend=backend,
        total_steps=4000,
        eval_every=1000,
        target_return=None,
        out=str(out),
        **QUICK,
    )
    result = train(config)  # MaskedEnv raises on a masked action
    assert result.final_eval_return is not None and result.final_eval_return > 4.0
    for mode in ("--greedy", "--sample"):
        assert main(["evaluate", str(out), "--episodes", "20", mode]) == 0
    policy = eligibility.load(out)
    only_two = np.array([False, False, True, False])
    state = np.zeros(4)
    obs = {"state": state, "action_mask": only_two} if in_obs else state
    for deterministic in (True, False):
        for _ in range(20):
            assert policy.predict(obs, deterministic, action_mask=only_two) == 2


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_masked_logits_have_exactly_zero_eligibility(backend):
    from eligibility.backends import make_agent
    from eligibility.reinforce.heads import CategoricalHead

    config = Config("byo_envs:Masked-v0", backend=backend, hidden=(), out=None)
    agent = make_agent(config, 3, CategoricalHead(4, ()), np.random.default_rng(0))
    rng = np.random.default_rng(1)
    s = rng.standard_normal((50, 3))
    mask = np.ones((50, 4), dtype=bool)
    mask[:, 3] = False
    mask[::2, 0] = False
    a = agent.policy.act(s, rng, mask=mask)
    assert not (a == 3).any() and not (a[::2] == 0).any()
    grads, _ = agent.policy.grad_log_prob(s, a, rng.standard_normal(50), mask=mask)
    assert grads["b0"][3] == 0.0 and np.all(grads["W0"][3] == 0.0)  # exact, not small
    assert grads["b0"][0] != 0.0  # valid in half the rows


# -- your own env: module:Id, --env-kwargs, and the errors ----------------------------------------


def test_module_id_env_with_kwargs_trains_evaluates_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    common = ["--total-steps", "400", "--eval-every", "200", "--eval-episodes", "5"]
    argv = ["train", "byo_envs:Obs-v0", "--env-kwargs", "obs='dict'", "--out", str(out)]
    assert main([*argv, *common, "--no-progress", "--hidden"]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["env_id"] == "byo_envs:Obs-v0" and saved["env_kwargs"] == {"obs": "dict"}
    capsys.readouterr()
    assert main(["evaluate", str(out), "--episodes", "5", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["policy"] == "greedy"
    argv = ["train", "--resume", str(out), "--total-steps", "800", "--no-progress"]
    assert main(argv) == 0
    assert "byo_envs:Obs-v0" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["byo_envs:Nope-v0"], "did you mean"),
        (["no_such_module_xyz:Env-v0"], "cannot import 'no_such_module_xyz'"),
        (["byo_envs:Obs-v0", "--env-kwargs", "obs='graph'"], "obs must be one of"),
        (["byo_envs:Obs-v0", "--env-kwargs", "colour=1"], "colour"),
        (["CartPole-v1", "--module", "byo_envs:tiny_module"], "--backend torch"),
    ],
)
def test_bad_env_input_is_one_line_exit_2(tmp_path, capsys, argv, message):
    out = ["--out", str(tmp_path / "run"), "--no-progress", "--total-steps", "100"]
    assert main(["train", *argv, *out]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_env_kwargs_without_a_value_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "byo_envs:Obs-v0", "--env-kwargs", "obs"])
    assert exit_.value.code == 2 and "KEY=VALUE" in capsys.readouterr().err


# -- your own policy module ----------------------------------------------------------------------


def test_module_factory_is_recorded_for_evaluate_resume_and_load(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "byo_envs:Obs-v0", "--backend", "torch", "--module", "byo_envs:tiny_module"]
    common = ["--total-steps", "300", "--eval-every", "150", "--eval-episodes", "2"]
    assert main([*argv, "--out", str(out), *common, "--no-progress"]) == 0
    assert json.loads((out / "config.json").read_text())["module"] == "byo_envs:tiny_module"
    assert main(["evaluate", str(out), "--episodes", "3"]) == 0
    assert main(["train", "--resume", str(out), "--total-steps", "600", "--no-progress"]) == 0
    policy = eligibility.load(out)
    assert type(policy.agent.policy.module).__name__ == "Sequential"
    assert policy.predict(np.zeros((2, 2), np.float32)) in (0, 1)


def test_unrecorded_module_says_how_to_record_it(tmp_path):
    import torch

    out = tmp_path / "run"
    config = Config.for_env(
        "byo_envs:Obs-v0", backend="torch", total_steps=200, eval_every=0, out=str(out), **QUICK
    )
    train(config, module=torch.nn.Sequential(torch.nn.Linear(4, 2)).double())
    with pytest.raises(ValueError, match=re.escape("module='pkg.mod:factory'")):
        eligibility.load(out)


# -- load and act in one line --------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(toy.TOY_IDS))
def test_load_predict_single_and_batched_for_every_action_space(tmp_path, kind):
    import gymnasium as gym

    out = tmp_path / "run"
    config = Config.for_env(toy.TOY_IDS[kind], total_steps=100, eval_every=0, out=str(out), **QUICK)
    result = train(config)
    env = gym.make(toy.TOY_IDS[kind])
    obs, _ = env.reset(seed=0)
    for policy in (eligibility.load(out), result.policy):
        for deterministic in (True, False):
            a = policy.predict(obs, deterministic=deterministic)
            assert env.action_space.contains(a), a
            batch = policy.predict(np.stack([obs, obs, obs]), deterministic=deterministic)
            assert len(batch) == 3 and all(env.action_space.contains(b) for b in batch)
        env.step(policy.predict(obs))
    np.testing.assert_array_equal(eligibility.load(out).predict(obs), result.policy.predict(obs))


def test_result_policy_without_out():
    result = train(Config.for_env("byo_envs:Obs-v0", total_steps=200, eval_every=0, **QUICK))
    assert result.out_dir is None and result.policy.predict(np.ones((2, 2))) in (0, 1)


# -- video ---------------------------------------------------------------------------------------


def test_evaluate_video_writes_a_readable_gif(tmp_path, capfd):
    """The video is one of the run's episodes: it ends at the run's --max-episode-steps (8 here,
    against the 55 steps CartPole's greedy episode lasts at this policy: a few frames to write)."""
    from PIL import Image

    out = tmp_path / "run"
    argv = ["train", "CartPole-v1", "--out", str(out), "--total-steps", "200", "--no-progress"]
    assert main([*argv, "--eval-every", "0", "--max-episode-steps", "8"]) == 0
    gif = tmp_path / "cartpole.gif"
    assert main(["evaluate", str(out), "--episodes", "2", "--video", str(gif)]) == 0
    with Image.open(gif) as im:  # s₀ and a frame a step (Pillow merges repeated frames)
        assert im.format == "GIF" and 2 <= im.n_frames <= 9 and im.size[0] > 0
    assert capfd.readouterr().err == ""  # SDL says nothing about a missing display
    bad = main(["evaluate", str(out), "--episodes", "1", "--video", str(tmp_path / "x.avi")])
    assert bad == 2


def test_module_id_env_in_async_worker_processes():
    from eligibility.reinforce.envs import make_vec_env

    envs = make_vec_env("byo_envs:Obs-v0", 2, "async", {"obs": "tuple"})
    try:
        obs, _ = envs.reset(seed=0)
        assert envs.single_observation_space == byo_envs.OBS_SPACES["tuple"]
        np.testing.assert_array_equal(obs[0], [0, 0])
    finally:
        envs.close()
