"""Train and evaluate against envs, modules and signals that misbehave.

Every hostile env of ``hostile_envs`` gives one line on stderr naming the env, exit status 2
(1 for a non-finite update), and never a traceback or a hang; signals stop a run within about a
second wherever it is, with the last completed update checkpointed. The process tests run real
subprocesses and real signals, bounded in time; those that take seconds are ``slow``.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from eligibility._signals import Interrupted
from eligibility.cli import main
from eligibility.reinforce import Config, train
from eligibility.reinforce.logs import TIMING_COLUMNS
from eligibility.runs import CHECKPOINT, read_metrics

TESTS = Path(__file__).parent
TINY = ["--total-steps", "200", "--eval-every", "0", "--hidden", "4", "--no-progress"]


def _run(argv: list[str]) -> tuple[int, str]:
    """``eligibility ARGV`` in this process: (exit status, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = int(exc.code or 0)
    return rc, err.getvalue()


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if "warning:" not in ln]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path / "metrics.csv", newline="") as f:
        return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in csv.DictReader(f)]


def _updates_in_checkpoint(run: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(run / CHECKPOINT), framework="numpy") as f:
        return json.loads(f.metadata()["counters"])["updates"]


# -- hostile envs: one line naming the env, exit 2 -------------------------------------------------

FAST = {
    "NanObs-v0": "non-finite observation at step 3 of an episode (sub-env 0): component 2 is nan",
    "NoValidAction-v0": "action mask that allows no action at step 2",
    "AssertStep-v0": "step() raised AssertionError: the cart left the track at",
    "OldGym-v0": "reset() returned a ndarray, not (obs, info): the old gym API",
}
SLOW = {
    "InfReward-v0": "non-finite reward at step 1 of an episode (sub-env 0): inf",
    "HugeReward-v0": "rewards are too large to sum",
    "NoSeedReset-v0": "reset() does not take seed=",
    "WrongShape-v0": "observation of shape (3,) where its observation_space has (4,)",
    "ShortTuple-v0": "step() returned a tuple of 3, not (obs, reward, terminated",
    "ObjectObs-v0": "observation of dtype object, not numbers",
    "StringReward-v0": "reward of type str ('1'), not a number",
    "RaisesOnClose-v0": "close() raised RuntimeError: the simulator's socket is already closed",
}


@pytest.mark.parametrize(
    ("env_id", "needle"),
    [*FAST.items(), *(pytest.param(*kv, marks=pytest.mark.slow) for kv in SLOW.items())],
    ids=[*FAST, *SLOW],
)
def test_a_hostile_env_is_one_line_naming_it_exit_2(tmp_path, env_id, needle):
    rc, err = _run(["train", f"hostile_envs:{env_id}", "--out", str(tmp_path / "r"), *TINY])
    line = _one_line(err)
    assert rc == 2 and f"hostile_envs:{env_id}" in line and needle in line, line


@pytest.mark.slow
def test_returns_too_large_for_the_gradient_blame_the_env_not_the_learning_rate(tmp_path):
    rc, err = _run(["train", "hostile_envs:LargeReward-v0", "--out", str(tmp_path / "r"), *TINY])
    line = _one_line(err)
    assert rc == 2 and "LargeReward-v0's returns reach" in line and "--lr" not in line, line


def test_the_learning_rate_advice_stays_when_the_env_is_not_at_fault(tmp_path, monkeypatch):
    import eligibility.reinforce.trainer as trainer

    real = trainer.policy_gradient

    def blown(agent_policy, batch, **kw):  # the weights themselves overflowed
        grads, info = real(agent_policy, batch, **kw)
        return {k: v * np.inf for k, v in grads.items()}, info

    monkeypatch.setattr(trainer, "policy_gradient", blown)
    rc, err = _run(["train", "hostile_envs:Plain-v0", "--out", str(tmp_path / "r"), *TINY])
    assert rc == 2 and "--lr 0.05 is likely too large" in _one_line(err)


def test_a_user_env_that_never_ends_is_capped_with_the_flag_named(tmp_path, monkeypatch):
    import eligibility.reinforce.envs as envs

    monkeypatch.setattr(envs, "DEFAULT_MAX_EPISODE_STEPS", 60)  # 100000 in the slow test below
    argv = ["train", "hostile_envs:NeverEnds-v0", "--out", str(tmp_path / "r"), *TINY]
    rc, err = _run([*argv, "--total-steps", "10000"])
    line = _one_line(err)
    assert rc == 2 and "NeverEnds-v0: an episode ran 60 steps without ending" in line
    assert "--max-episode-steps" in line
    # a time limit of the user's choosing truncates the episodes instead
    rc, err = _run([*argv[:3], str(tmp_path / "t"), *TINY, "--max-episode-steps", "20"])
    assert rc == 0 and not err, err
    assert json.loads((tmp_path / "t" / "config.json").read_text())["max_episode_steps"] == 20
    assert int(read_metrics(tmp_path / "t")[0]["env_steps"]) == 8 * 20


def test_a_budget_spent_before_the_first_update_says_so(tmp_path):
    argv = ["train", "hostile_envs:NeverEnds-v0", "--out", str(tmp_path / "r"), *TINY]
    rc, err = _run([*argv, "--max-episode-steps", "50"])  # a batch: 8 × 50 steps > 200
    assert rc == 0 and "--total-steps 200 ran out before the first batch" in err
    assert _updates_in_checkpoint(tmp_path / "r") == 0


def _cli(*argv: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), *sys.path])
    cmd = [sys.executable, "-m", "eligibility.cli", *argv]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


PEAK_OF_ITS_CHILD = """
import resource, subprocess, sys
code = subprocess.call(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""
"""Runs a command and writes its peak RSS (KiB). On Linux a child's ``ru_maxrss`` starts at its
parent's RSS when it is started (the exec'd process keeps the high-water mark of the memory it
replaced): a test worker that holds 3 GB would read 3 GB for any command it starts. Started from
this small interpreter, the command's peak is its own."""


@pytest.mark.slow
def test_never_ends_stops_at_the_default_cap_in_bounded_memory(tmp_path):
    """The peak memory of this command's process alone, read by a small parent of its own
    (``PEAK_OF_ITS_CHILD``), not by the test worker, whose RSS the command would inherit."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), *sys.path])
    argv = ["train", "hostile_envs:NeverEnds-v0", "--out", str(tmp_path / "r"), "--no-progress"]
    peak = tmp_path / "peak"
    command = [sys.executable, "-m", "eligibility.cli", *argv]
    with open(tmp_path / "err", "w+") as err:
        proc = subprocess.Popen([sys.executable, "-c", PEAK_OF_ITS_CHILD, str(peak), *command],
                                stdout=subprocess.DEVNULL, stderr=err, env=env,
                                start_new_session=True)  # fmt: skip
        timer = threading.Timer(300, os.killpg, (proc.pid, signal.SIGKILL))
        timer.start()
        proc.wait()
        timer.cancel()
        err.seek(0)
        text = err.read()
    assert proc.returncode == 2 and "ran 100000 steps without ending" in text, text
    peak_mb = int(peak.read_text()) / 1024
    assert peak_mb < 1500, peak_mb  # the report of #21: it grew by 30 MB/s to the whole machine


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["--backend", "torch", "--module", "hostile_envs:wide_module"],
            "maps states (N, 4) to (3,) per state; the env's policy head needs (2,)",
        ),
        (["--max-episode-steps", "0"], "max_episode_steps (--max-episode-steps) must be >= 1"),
    ],
)
def test_bad_settings_fail_before_training_and_leave_nothing(tmp_path, argv, needle):
    rc, err = _run(["train", "hostile_envs:Plain-v0", "--out", str(tmp_path / "r"), *TINY, *argv])
    assert rc == 2 and needle in _one_line(err)
    assert not (tmp_path / "r").exists()


def test_env_kwargs_the_env_chokes_on_are_one_line(tmp_path):
    argv = ["train", "FrozenLake-v1", "--env-kwargs", "map_name='99x99'"]
    rc, err = _run([*argv, "--out", str(tmp_path / "r"), *TINY])
    line = _one_line(err)
    assert rc == 2 and "FrozenLake-v1 could not be made with --env-kwargs" in line
    assert "KeyError: '99x99'" in line


# -- evaluate --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plain") / "run"
    assert _run(["train", "hostile_envs:Plain-v0", "--out", str(out), *TINY])[0] == 0
    return out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--episodes", "1000000000"], "--episodes must be in [1, 1000000]"),
        (["--episodes", "2", "--video", "x.gif"], "cannot render RGB frames"),
    ],
)
def test_evaluate_refuses_what_it_cannot_do_in_one_line(plain_run, tmp_path, argv, needle):
    rc, err = _run(["evaluate", str(plain_run), *argv])
    assert rc == 2 and needle in _one_line(err)
    assert not (tmp_path / "x.gif").exists()


# -- predict validates -----------------------------------------------------------------------------


def test_predict_names_bad_observations_and_masks():
    import byo_envs  # noqa: F401 (registers Obs-v0 and Masked-v0)

    quick = dict(total_steps=40, eval_every=0, progress=False, hidden=(4,), num_envs=2)
    quick.update(episodes_per_batch=2)
    discrete = train(Config(env_id="byo_envs:Obs-v0", env_kwargs={"obs": "discrete"}, **quick))
    with pytest.raises(ValueError, match=r"observation \[-1\] is outside Discrete\(4, start=1\)"):
        discrete.policy.predict(-1)
    with pytest.raises(ValueError, match=r"observation \[1, 0\] is outside"):
        discrete.policy.predict(np.array([1, 0]))  # a batch with one state out of range
    box = train(Config(env_id="hostile_envs:Plain-v0", **quick)).policy
    with pytest.raises(ValueError, match=r"obs holds nan \(row 0, entry 1"):
        box.predict(np.array([0.0, np.nan, 0.0, 0.0]))
    with pytest.raises(ValueError, match=r"action_mask allows no action \(row 1\)"):
        box.predict(np.zeros((2, 4)), action_mask=np.array([[1, 0], [0, 0]]))
    with pytest.raises(ValueError, match="action_mask has 3 entries per row; the env has 2"):
        box.predict(np.zeros(4), action_mask=np.ones(3))


def test_predict_returns_actions_of_the_space_dtype():
    import gymnasium as gym

    quick = dict(total_steps=40, eval_every=0, progress=False, hidden=(4,), num_envs=2)
    quick.update(episodes_per_batch=2)
    policy = train(Config(env_id="hostile_envs:BoxF32-v0", **quick)).policy
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    for deterministic in (True, False):
        a = policy.predict(np.zeros(4), deterministic=deterministic)
        assert a.dtype == np.float32 and space.contains(a)
        assert all(space.contains(b) for b in policy.predict(np.zeros((3, 4)), deterministic))


# -- a run that died before its first checkpoint ---------------------------------------------------


def test_a_run_without_a_checkpoint_resumes_from_scratch_or_is_overwritten(tmp_path):
    """With no row either it starts again; with rows (its history, which a start from
    scratch would drop: issue 72 case 5) the resume is refused and --overwrite replaces it."""
    out = tmp_path / "run"
    assert _run(["train", "hostile_envs:Plain-v0", "--out", str(out), *TINY])[0] == 0
    (out / CHECKPOINT).unlink()  # as if it had died before its first checkpoint
    rc, err = _run(["train", "hostile_envs:Plain-v0", "--out", str(out), *TINY])
    assert rc == 2 and "--overwrite" in _one_line(err)
    rc, err = _run(["train", "--resume", str(out), "--no-progress"])
    assert rc == 2 and "checkpoint.safetensors is missing while" in _one_line(err)
    header = (out / "metrics.csv").read_text().splitlines(keepends=True)[0]
    (out / "metrics.csv").write_text(header)  # as if it had died before its first update
    rc, err = _run(["train", "--resume", str(out), "--no-progress"])
    assert rc == 0 and "no checkpoint (the run stopped before its first): starting it" in err
    assert [r["update"] for r in _rows(out)] == ["1", "2"]  # from update 1 again, once
    rc, err = _run(["train", "hostile_envs:Plain-v0", "--out", str(out), *TINY, "--overwrite"])
    assert rc == 0, err
    assert [r["update"] for r in _rows(out)] == ["1", "2"]


# -- signals: the last completed update is what is saved -------------------------------------------


def _kamikaze(out: Path | None, at: int, tag: str) -> Config:
    """10-step episodes, 2 per batch on 2 envs (20 steps an update), an evaluation of 2 episodes
    after each 40 steps: step ``at`` of all its instances sends SIGTERM."""
    return Config(
        env_id="hostile_envs:Kamikaze-v0",
        env_kwargs={"at": at, "tag": tag},
        episodes_per_batch=2,
        num_envs=2,
        hidden=(4,),
        total_steps=100,
        eval_every=40,
        eval_episodes=2,
        target_return=float("inf"),
        checkpoint_every=100,
        progress=False,
        out=None if out is None else str(out),
    )


@pytest.mark.parametrize(("at", "kept"), [(50, 1), (70, 2)], ids=["evaluating", "collecting"])
def test_sigterm_keeps_the_last_completed_update_and_resume_replays_the_rest(tmp_path, at, kept):
    """Step 50 falls in the evaluation after update 2 (steps 41–60): update 2 is undone, weights
    included; step 70 falls in the batch of update 3. Either way the resumed run equals one that
    was never interrupted."""
    full, cut = tmp_path / "full", tmp_path / "cut"
    train(_kamikaze(full, 10**9, f"full{at}"))
    with pytest.raises(Interrupted) as info:
        train(_kamikaze(cut, at, f"cut{at}"))
    assert info.value.exit_status == 143 and info.value.out_dir == cut
    assert _updates_in_checkpoint(cut) == kept and len(_rows(cut)) == kept
    train(_kamikaze(None, at, f"cut{at}"), resume=cut)  # its counter is past ``at`` now
    assert _rows(cut) == _rows(full)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the run did not get going: {proc.communicate()}")
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_in_the_middle_of_a_long_batch_is_honoured_promptly(tmp_path, sig):
    out = tmp_path / "run"
    proc = _cli("train", "hostile_envs:Sleepy-v0", "--out", str(out), "--no-progress")
    _wait_for(out / "config.json", proc)
    time.sleep(1.0)  # well inside the first batch (episodes of 10000 steps at 20 ms)
    t0 = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    waited = time.monotonic() - t0
    assert proc.returncode == 128 + sig and waited < 8, (waited, err)  # ~1 s on an idle machine
    assert f"eligibility train --resume {out}" in err
    assert _updates_in_checkpoint(out) == 0  # no update completed: the initial weights


@pytest.mark.slow
def test_a_second_signal_ends_a_stuck_run_at_once(tmp_path):
    out = tmp_path / "run"
    proc = _cli("train", "hostile_envs:Sleepy-v0", "--env-kwargs", "pause=30", "--out", str(out))
    _wait_for(out / "config.json", proc)
    time.sleep(1.0)  # inside a 30 s step: the loop cannot poll
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert proc.poll() is None
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGINT and time.monotonic() - t0 < 5


# -- review bugs -----------------------------------------------------------------------------------


def test_a_resumed_run_whose_last_evaluation_was_exactly_zero_met_a_zero_target(tmp_path):
    """Review bug: ``if r["eval_return"]`` skipped 0.0, so the met target went unnoticed."""
    out = tmp_path / "run"
    argv = ["train", "hostile_envs:Zero-v0", "--out", str(out), "--no-progress", "--hidden", "4"]
    rc, _ = _run([*argv, "--eval-every", "50", "--eval-episodes", "2", "--target-return", "0"])
    assert rc == 0 and read_metrics(out)[-1]["eval_return"] == "0.0"
    rows = _rows(out)
    out_text = io.StringIO()
    with contextlib.redirect_stdout(out_text):
        assert main(["train", "--resume", str(out), "--total-steps", "5000"]) == 0
    assert "already met its target" in out_text.getvalue() and _rows(out) == rows


def test_the_sampled_evaluation_draws_from_its_own_stream(monkeypatch):
    """Review bug: the sampled evaluation's generator was built from the greedy one's seeds."""
    import eligibility.reinforce.trainer as trainer

    first_state: dict[int, dict] = {}
    real = trainer.make_agent

    def spying(*a, **k):
        agent = real(*a, **k)
        act = agent.policy.act

        def recording(s, rng, **kw):
            if rng is not None and id(rng) not in first_state:
                first_state[id(rng)] = rng.bit_generator.state
            return act(s, rng, **kw)

        agent.policy.act = recording
        return agent

    monkeypatch.setattr(trainer, "make_agent", spying)
    cfg = _kamikaze(None, 10**9, "stream")
    result = train(cfg)
    assert result.sampled_eval_return is not None
    eval_stream = np.random.SeedSequence(cfg.seed).spawn(4)[3]  # the greedy evaluation's
    eval_state = np.random.default_rng(eval_stream).bit_generator.state
    states = list(first_state.values())
    assert len(states) == 2  # the training draws and the sampled evaluation's
    assert all(st != eval_state for st in states)


def test_the_beta_head_uses_the_stable_sigmoid():
    """Review bug: its own 0.5 (1 + tanh(z/2)) gave σ(−40) = 0, the core's 4.248e-18."""
    from eligibility.distributions import beta
    from eligibility.reinforce.heads import BetaHead

    head = BetaHead(2, (1,), low=(0.0,), high=(1.0,))
    z = np.array([[-40.0, 0.0]])
    y = np.array([[0.3]])
    e, _ = head.score(z, None, y)
    e_alpha, _ = beta.score(1.0 + np.logaddexp(0.0, -40.0), 1.0 + np.log(2.0), y)
    sigma = 1.0 / (1.0 + np.exp(40.0))  # 4.248e-18, exact to rounding at this z
    np.testing.assert_allclose(e[0, 0], e_alpha[0, 0] * sigma, rtol=1e-12)
    assert e[0, 0] != 0.0


# -- fast stand-ins for the process tests of test_faults.py (run directories) ---------------------


def test_a_locked_run_directory_is_refused_at_once(tmp_path):
    from eligibility.runs import lock_run_dir

    held = lock_run_dir(tmp_path)
    try:
        with pytest.raises(ValueError, match="in use by another eligibility process"):
            lock_run_dir(tmp_path)  # another open file: flock refuses it as it would a process
    finally:
        held.close()
    lock_run_dir(tmp_path).close()  # released with the file


def test_default_run_names_differ_within_one_second():
    from eligibility.cli.convention import fresh_run_dir

    names = {fresh_run_dir("byo:Env-v0", 0) for _ in range(50)}
    assert len(names) == 50 and all(n.startswith("runs/byo_Env-v0-") for n in names)


def test_evaluate_is_interrupted_promptly_too(tmp_path):
    out = tmp_path / "run"
    cfg = _kamikaze(out, 30, "evaluate")
    train(Config(**{**cfg.__dict__, "total_steps": 20, "eval_every": 0}))  # steps 1–20
    rc, err = _run(["evaluate", str(out), "--episodes", "4"])  # step 30 is in its second
    assert rc == 143 and "interrupted by SIGTERM" in err and "Traceback" not in err
