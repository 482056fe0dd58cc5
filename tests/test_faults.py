"""No run is ever lost or silently wrong: run directories, resume rules, interrupts, bad input.

``python tests/test_faults.py`` runs the whole bad-input table by hand and prints
``N inputs, 0 tracebacks`` (or the cases that failed).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import errno
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from eligibility.cli import main
from eligibility.reinforce.config import Config
from eligibility.reinforce.logs import TIMING_COLUMNS
from eligibility.runs import CHECKPOINT, read_metrics

TINY = ["--total-steps", "300", "--eval-every", "0", "--hidden", "4", "--no-progress"]


def _train_tiny(out: Path, *extra: str) -> None:
    """A tiny CartPole run in ``out``; without ``extra``, a copy of the module's one.

    The tiny run is seeded: the copy holds the files a fresh one writes (config, checkpoint,
    metrics), and no test here reads its timings. Trained once a worker (about 40 ms, where
    some 40 tests set one up), copied in well under a millisecond.
    """
    if extra or not _TINY_HOME:
        _train(out, *extra)
        return
    template = _TINY_HOME[0] / "run"
    if not template.exists():
        _train(template)
    shutil.copytree(template, out)


def _train(out: Path, *extra: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["train", "CartPole-v1", "--out", str(out), *TINY, *extra]) == 0


_TINY_HOME: list[Path] = []
"""Where the module's tiny run is kept (set by :func:`_tiny_home`; empty: train each one)."""


@pytest.fixture(scope="module", autouse=True)
def _tiny_home(tmp_path_factory: pytest.TempPathFactory):
    _TINY_HOME[:] = [tmp_path_factory.mktemp("tiny")]
    yield
    _TINY_HOME.clear()


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path / "metrics.csv", newline="") as f:
        return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in csv.DictReader(f)]


def _cli(*argv: str, env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    cmd = [sys.executable, "-m", "eligibility.cli", *argv]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw
    )


def _endless_run(out: Path, *extra: str, **popen) -> subprocess.Popen:
    """A CartPole run in a subprocess that only a signal ends (no evaluation, no target)."""
    return _cli(
        "train",
        "CartPole-v1",
        "--out",
        str(out),
        "--total-steps",
        "100000000",
        "--eval-every",
        "0",
        "--target-return",
        "inf",  # no target: the greedy test on crossing it would end the run
        "--no-progress",
        *extra,
        **popen,
    )


def _wait_for_rows(run: Path, n: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(read_metrics(run)) >= n:
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended early: {proc.communicate()}")
        time.sleep(0.02)
    pytest.fail("the run did not get going")


# -- run directories ----------------------------------------------------------------------------


@pytest.mark.slow  # fast: tests/test_faults_envs.py, the lock and the names in process
def test_concurrent_default_runs_get_their_own_directories(tmp_path):
    procs = [_cli("train", "CartPole-v1", "--seed", str(s), *TINY, cwd=tmp_path) for s in (0, 1, 2)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == 3
    seeds = set()
    for run in runs:
        config = json.loads((run / "config.json").read_text())
        from safetensors import safe_open

        with safe_open(str(run / CHECKPOINT), framework="numpy") as f:
            saved = json.loads(f.metadata()["config"])
        assert saved["seed"] == config["seed"]  # self-consistent: one run per directory
        assert f"-s{config['seed']}-" in run.name
        seeds.add(config["seed"])
    assert seeds == {0, 1, 2}


@pytest.mark.slow  # fast: tests/test_faults_envs.py, the lock and the names in process
def test_a_second_process_on_the_same_directory_fails_at_once(tmp_path):
    out = tmp_path / "run"
    first = _endless_run(out)
    try:
        _wait_for_rows(out, 2, first)
        for argv in (
            ["train", "CartPole-v1", "--out", str(out), *TINY],
            ["train", "--resume", str(out), "--no-progress"],
        ):
            second = _cli(*argv)
            _, err = second.communicate(timeout=60)
            assert second.returncode == 2
            assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
            assert "already holds a run" in err or "in use by another" in err
        assert first.poll() is None  # the first run goes on
    finally:
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=60)
    assert first.returncode == 143 and "resume with" in err
    # its directory is intact: a resume goes on from it
    steps = int(read_metrics(out)[-1]["env_steps"])
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(["train", "--resume", str(out), "--total-steps", str(steps + 300)])
    assert rc == 0


@pytest.mark.slow  # fast: tests/test_faults_envs.py, the lock and the names in process
def test_a_stale_lock_of_a_killed_run_is_taken_over(tmp_path):
    out = tmp_path / "run"
    proc = _endless_run(out, "--checkpoint-every", "1")
    _wait_for_rows(out, 2, proc)
    proc.kill()
    proc.wait()
    assert (out / ".lock").exists()
    steps = int(read_metrics(out)[-1]["env_steps"])
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["train", "--resume", str(out), "--total-steps", str(steps + 300)]) == 0


# -- resume rules -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--lr", "99"], ["--lr 99.0", "0.05"]),
        (["--backend", "torch"], ["--backend 'torch'", "'numpy'"]),
        (["--seed", "3"], ["--seed 3", "(the run has 0)"]),
        (["--hidden", "8", "8"], ["--hidden (8, 8) (the run has (4,))"]),
        (["--baseline", "rloo"], ["--baseline 'rloo'", "the run has 'value'"]),
        (["--optimizer", "sgd"], ["--optimizer 'sgd'"]),
        (["--gamma", "0.5"], ["--gamma 0.5"]),
        (["--lr", "99", "--seed", "3"], ["--lr 99.0", "--seed 3"]),
    ],
)
def test_resume_refuses_options_that_change_the_run(tmp_path, capsys, extra, needles):
    out = tmp_path / "run"
    _train_tiny(out)
    before = (out / "config.json").read_bytes(), (out / CHECKPOINT).read_bytes()
    rc = main(["train", "--resume", str(out), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    for needle in needles:
        assert needle in err, (needle, err)
    assert ((out / "config.json").read_bytes(), (out / CHECKPOINT).read_bytes()) == before


def test_resume_refuses_another_env_id(tmp_path, capsys):
    out = tmp_path / "run"
    _train_tiny(out)
    assert main(["train", "Acrobot-v1", "--resume", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--env-id 'Acrobot-v1' (the run has 'CartPole-v1')" in err


def test_resume_applies_the_changeable_options_and_records_them(tmp_path):
    out = tmp_path / "run"
    _train_tiny(out)
    with contextlib.redirect_stdout(io.StringIO()):
        argv = ["train", "--resume", str(out), "--total-steps", "700", "--eval-every", "500"]
        assert main([*argv, "--eval-episodes", "3", "--lr", "0.05"]) == 0  # lr: same value
    saved = json.loads((out / "config.json").read_text())
    assert saved["total_steps"] == 700 and saved["eval_every"] == 500
    assert saved["eval_episodes"] == 3
    assert 300 < int(read_metrics(out)[-1]["env_steps"]) <= 700  # the budget bounds the batch


def test_resume_in_python_refuses_another_identity(tmp_path):
    from eligibility.reinforce import train

    cfg = Config.for_env(
        "CartPole-v1",
        hidden=(4,),
        total_steps=300,
        eval_every=0,
        progress=False,
        out=str(tmp_path / "run"),
    )
    train(cfg)
    with pytest.raises(ValueError, match=r"--lr 0\.5 \(the run has 0\.05\)"):
        train(dataclasses.replace(cfg, lr=0.5, out=None), resume=tmp_path / "run")


def test_a_solved_run_is_not_retrained(tmp_path, capsys):
    """Solved at its first evaluation; then 600 steps more, with the target switched off, train
    one more update (its batch: 339 steps)."""
    out = tmp_path / "run"
    argv = ["train", "CartPole-v1", "--out", str(out), "--total-steps", "5000", "--no-progress"]
    assert main([*argv, "--eval-every", "200", "--eval-episodes", "3", "--target-return", "9"]) == 0
    assert "solved" in capsys.readouterr().out
    rows = _rows(out)
    assert main(["train", "--resume", str(out), "--total-steps", "9000"]) == 0
    assert "already met its target" in capsys.readouterr().out
    assert _rows(out) == rows  # nothing trained
    # raised, or switched off: it trains on
    assert (
        main(
            [
                "train",
                "--resume",
                str(out),
                "--target-return",
                "inf",
                "--total-steps",
                str(int(rows[-1]["env_steps"]) + 600),
            ]
        )
        == 0
    )
    assert "no target" in capsys.readouterr().out
    assert len(_rows(out)) > len(rows)
    assert json.loads((out / "config.json").read_text())["target_return"] == "none"


# -- interrupts -----------------------------------------------------------------------------------


@pytest.mark.slow  # fast: test_faults_envs.py::test_sigterm_keeps_the_last_completed_update_…
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_checkpoints_and_resume_equals_an_uninterrupted_run(tmp_path, sig):
    common = [
        "--seed",
        "2",
        "--eval-every",
        "1500",
        "--eval-episodes",
        "3",
        "--no-progress",
        "--checkpoint-every",
        "1000",
        "--target-return",
        "inf",
    ]
    total = 6000
    with contextlib.redirect_stdout(io.StringIO()):
        assert (
            main(
                [
                    "train",
                    "CartPole-v1",
                    "--out",
                    str(tmp_path / "full"),
                    *common,
                    "--total-steps",
                    str(total),
                ]
            )
            == 0
        )
    cut = tmp_path / "cut"
    proc = _cli("train", "CartPole-v1", "--out", str(cut), *common, "--total-steps", "10000000")
    _wait_for_rows(cut, 2, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig
    assert err.strip().splitlines()[-1].endswith(f"eligibility train --resume {cut}")
    done = int(read_metrics(cut)[-1]["env_steps"])
    assert done < total, "interrupted too late to compare"
    # every logged update is in the checkpoint: nothing is redone
    from safetensors import safe_open

    with safe_open(str(cut / CHECKPOINT), framework="numpy") as f:
        assert json.loads(f.metadata()["counters"])["updates"] == len(read_metrics(cut))
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["train", "--resume", str(cut), "--total-steps", str(total)]) == 0
    assert _rows(cut) == _rows(tmp_path / "full")


@pytest.mark.slow
def test_tensorboard_gets_no_replayed_steps_after_a_resume(tmp_path):
    """A CartPole run killed (SIGKILL) after a checkpoint, then resumed: each step once.

    fast cover: tests/test_runs.py::
    test_tensorboard_gets_each_step_once_when_a_run_that_stopped_after_its_checkpoint_resumes
    (the run layer in process; the kill of a real run: test_cli_train.py::test_kill_9_then_resume).
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    proc = _endless_run(out, "--checkpoint-every", "3")
    _wait_for_rows(out, 5, proc)
    proc.kill()  # after the checkpoint at 3: rows 4, 5, … are replayed by the resume
    proc.wait()
    steps = int(read_metrics(out)[-1]["env_steps"])
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["train", "--resume", str(out), "--total-steps", str(steps + 600)]) == 0
    acc = EventAccumulator(str(out))
    acc.Reload()
    logged = [e.step for e in acc.Scalars("charts/mean_return")]
    assert len(logged) == len(set(logged))
    assert sorted(logged) == [int(r["env_steps"]) for r in read_metrics(out)]


# -- disk full --------------------------------------------------------------------------------


def test_disk_full_keeps_the_last_checkpoint_and_leaves_no_temporary_file(
    tmp_path, monkeypatch, capsys
):
    import eligibility._io as io_module

    out = tmp_path / "run"
    real_fsync = os.fsync
    writes = {"checkpoints": 0}

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").split("/")[-1].startswith(f".{CHECKPOINT}."):
            writes["checkpoints"] += 1
            if writes["checkpoints"] == 3:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(io_module.os, "fsync", fsync)
    argv = ["train", "CartPole-v1", "--out", str(out), "--checkpoint-every", "1", *TINY]
    rc = main([*argv[:-7], "--total-steps", "100000", "--eval-every", "0", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "No space left on device" in err and "intact" in err
    assert f"cannot write: {out / CHECKPOINT} (" in err  # the file the write was for, named
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    monkeypatch.setattr(io_module.os, "fsync", real_fsync)
    from safetensors import safe_open

    with safe_open(str(out / CHECKPOINT), framework="numpy") as f:
        assert json.loads(f.metadata()["counters"])["updates"] == 2  # the last good one


# -- the bad-input table ------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    """One bad input: the argv, a word the one-line error must hold, and what to set up first."""

    name: str
    argv: list[str]
    needle: str
    setup: Callable[[Path], None] = lambda d: None


def _run_dir(d: Path) -> None:
    _train_tiny(d / "run")


def _with_checkpoint(data: bytes) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        _run_dir(d)
        (d / "run" / CHECKPOINT).write_bytes(data)

    return setup


def _with_random_checkpoint(d: Path) -> None:
    _run_dir(d)
    size = (d / "run" / CHECKPOINT).stat().st_size
    (d / "run" / CHECKPOINT).write_bytes(os.urandom(size))


def _with_truncated_checkpoint(d: Path) -> None:
    _run_dir(d)
    data = (d / "run" / CHECKPOINT).read_bytes()
    (d / "run" / CHECKPOINT).write_bytes(data[: len(data) // 2])


def _with_reshaped_checkpoint(d: Path) -> None:
    """config.json and the checkpoint's own record say hidden 8; its tensors are of width 4."""
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    _run_dir(d)
    path = d / "run" / CHECKPOINT
    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
    config = json.loads(meta["config"])
    meta["config"] = json.dumps({**config, "hidden": [8]})
    save_file(load_file(str(path)), str(path), metadata=meta)
    (d / "run" / "config.json").write_text(json.dumps({**config, "hidden": [8]}))


def _with_config(edit: Callable[[dict], object]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        _run_dir(d)
        path = d / "run" / "config.json"
        config = json.loads(path.read_text())
        path.write_text(json.dumps(edit(config)))

    return setup


def _edited(**changes) -> Callable[[dict], dict]:
    return lambda c: {**c, **changes}


def _a_file(name: str) -> Callable[[Path], None]:
    return lambda d: (d / name).write_text("not a directory")


def _missing_box2d(monkeypatch: pytest.MonkeyPatch) -> None:
    import gymnasium

    def make_vec(*a, **k):
        raise gymnasium.error.DependencyNotInstalled(
            "Box2D is not installed, you can install it by run `pip install swig` followed by "
            '`pip install "gymnasium[box2d]"`'
        )

    monkeypatch.setattr(gymnasium, "make_vec", make_vec)


_ZERO_IS_VALID = {"gamma", "seed", "eval_every", "entropy_coef", "baseline_decay"}
_NUMERIC = [
    f.name
    for f in dataclasses.fields(Config)
    if str(f.type).split(" |")[0] in ("int", "float") and f.name != "target_return"
]


def _numeric_cases() -> list[Case]:
    cases = []
    for name in _NUMERIC:
        flag = "--" + name.replace("_", "-")
        is_int = str(next(f.type for f in dataclasses.fields(Config) if f.name == name))
        values = ["nan", "inf", "-1"] + ([] if name in _ZERO_IS_VALID else ["0"])
        for v in values:
            if is_int.startswith("int") and v in ("nan", "inf"):
                needle = "invalid int value"  # argparse's own one line
            else:
                needle = flag
            cases.append(Case(f"{flag} {v}", ["train", "CartPole-v1", flag, v], needle))
    cases.append(
        Case(
            "--target-return nan",
            ["train", "CartPole-v1", "--target-return", "nan"],
            "--target-return",
        )
    )
    cases.append(
        Case(
            "--target-return -inf",
            ["train", "CartPole-v1", "--target-return", "-inf"],
            "--target-return",
        )
    )
    cases.append(Case("--hidden 0", ["train", "CartPole-v1", "--hidden", "0"], "--hidden"))
    return cases


NAMED: list[Case] = [
    Case("--out is a file", ["train", "CartPole-v1", "--out", "f"], "is a file", _a_file("f")),
    Case(
        "--out under a file",
        ["train", "CartPole-v1", "--out", "f/run"],
        "f is a file",
        _a_file("f"),
    ),
    Case("--out empty", ["train", "CartPole-v1", "--out", ""], "--out"),
    Case(
        "--out holds a run",
        ["train", "CartPole-v1", "--out", "run"],
        "already holds a run",
        _run_dir,
    ),
    Case("--out with --resume", ["train", "--resume", "run", "--out", "x"], "--resume", _run_dir),
    Case(
        "resume: empty checkpoint",
        ["train", "--resume", "run"],
        "not a readable checkpoint",
        _with_checkpoint(b""),
    ),
    Case(
        "resume: truncated checkpoint",
        ["train", "--resume", "run"],
        CHECKPOINT,
        _with_truncated_checkpoint,
    ),
    Case(
        "resume: random checkpoint",
        ["train", "--resume", "run"],
        CHECKPOINT,
        _with_random_checkpoint,
    ),
    Case(
        "evaluate: truncated checkpoint",
        ["evaluate", "run"],
        CHECKPOINT,
        _with_truncated_checkpoint,
    ),
    Case("evaluate: empty checkpoint", ["evaluate", "run"], CHECKPOINT, _with_checkpoint(b"")),
    Case("evaluate: random checkpoint", ["evaluate", "run"], CHECKPOINT, _with_random_checkpoint),
    Case(
        "config: lr is text",
        ["train", "--resume", "run"],
        "lr (--lr) must be a number",
        _with_config(_edited(lr="fast")),
    ),
    Case(
        "evaluate: lr is text", ["evaluate", "run"], "config.json", _with_config(_edited(lr="fast"))
    ),
    Case(
        "config: a JSON list",
        ["train", "--resume", "run"],
        "JSON object",
        _with_config(lambda c: [1, 2]),
    ),
    Case(
        "evaluate: a JSON list", ["evaluate", "run"], "config.json", _with_config(lambda c: [1, 2])
    ),
    Case(
        "config: not JSON",
        ["evaluate", "run"],
        "config.json",
        lambda d: (_run_dir(d), (d / "run" / "config.json").write_text("{lr: ")),
    ),
    Case(
        "config: unknown key",
        ["evaluate", "run"],
        "unknown config keys",
        _with_config(_edited(speed=3)),
    ),
    Case(
        "config: another env",
        ["evaluate", "run"],
        "env_id 'CartPole-v1' (checkpoint)",
        _with_config(_edited(env_id="Acrobot-v1")),
    ),
    Case(
        "config: another width",
        ["evaluate", "run"],
        "hidden [4] (checkpoint) vs [8] (config.json)",
        _with_config(_edited(hidden=[8])),
    ),
    Case(
        "resume: another width",
        ["train", "--resume", "run"],
        "hidden [4] (checkpoint) vs [8] (config.json)",
        _with_config(_edited(hidden=[8])),
    ),
    Case(
        "evaluate: tensors of another shape",
        ["evaluate", "run"],
        "policy.W0 has shape (4, 4) where the config gives (8, 4)",
        _with_reshaped_checkpoint,
    ),
    Case(
        "resume: tensors of another shape",
        ["train", "--resume", "run"],
        "policy.W1 has shape",
        _with_reshaped_checkpoint,
    ),
    Case("resume: no run", ["train", "--resume", "nowhere"], "no training run"),
    Case("evaluate: no run", ["evaluate", "nowhere"], "no training run"),
    Case("evaluate: 0 episodes", ["evaluate", "run", "--episodes", "0"], "--episodes", _run_dir),
    Case("plot: --plot a directory", ["plot", "run", "--plot", "run"], "is a directory", _run_dir),
    Case(
        "plot: unknown format",
        ["plot", "run", "--plot", "x.gif"],
        "unknown picture format",
        _run_dir,
    ),
    Case(
        "plot: no suffix", ["plot", "run", "--plot", "curves"], "unknown picture format", _run_dir
    ),
    Case(
        "plot: under a file",
        ["plot", "run", "--plot", "f/x.png"],
        "is a file",
        lambda d: (_run_dir(d), _a_file("f")(d)),
    ),
    Case(
        "plot: --out a file",
        ["plot", "run", "--out", "f"],
        "is a file",
        lambda d: (_run_dir(d), _a_file("f")(d)),
    ),
    Case("plot: not a run", ["plot", "nowhere"], "not a run directory"),
    Case(
        "lab: --plot under a file",
        ["lab", "--problem", "bandit-bernoulli", "--plot", "f/lab.png"],
        "is a file",
        _a_file("f"),
    ),
    Case(
        "lab: --plot unknown format",
        ["lab", "--problem", "bandit-bernoulli", "--plot", "lab.bmp"],
        "unknown picture format",
    ),
    Case(
        "--vectorization-mode vector_entry_point",
        ["train", "Acrobot-v1", "--vectorization-mode", "vector_entry_point"],
        "vector entry point",
    ),
    Case("unknown env", ["train", "CartPol-v1"], "did you mean CartPole-v1"),
    Case("--seed -1 (names --seed)", ["train", "CartPole-v1", "--seed", "-1"], "--seed"),
    Case("--lr fast", ["train", "CartPole-v1", "--lr", "fast"], "invalid float value"),
    Case("missing box2d", ["train", "LunarLander-v3"], 'pip install "gymnasium[box2d]"'),
]
NUMERIC = _numeric_cases()
"""Each numeric option of ``train`` given nan, inf, -1 and 0 (where 0 means nothing)."""
CASES = [*NAMED, *NUMERIC]


def run_case(case: Case, workdir: Path) -> tuple[int, str, list[str]]:
    """Run one case in ``workdir``; returns (exit status, stderr, files it left behind)."""
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            case.setup(workdir)
        before = {str(p) for p in workdir.rglob("*")}
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                rc = main(case.argv)
            except SystemExit as exc:  # argparse's own errors
                rc = int(exc.code or 0)
            except Exception:
                import traceback

                traceback.print_exc(file=err)
                rc = -1
        after = {str(p) for p in workdir.rglob("*")}
        return rc, err.getvalue(), sorted(after - before)
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("case", NAMED, ids=[c.name for c in NAMED])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(case, tmp_path, monkeypatch):
    if case.name == "missing box2d":
        _missing_box2d(monkeypatch)
    rc, err, left = run_case(case, tmp_path)
    assert "Traceback" not in err, err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert case.needle in err, err
    assert not left, left


def test_every_bad_numeric_value_is_one_line_exit_2_and_leaves_nothing(tmp_path):
    """The same rule over :data:`NUMERIC` (some 60 argvs refused before any file is touched),
    in one test, each in a directory of its own: every case that breaks it is named."""
    wrong = []
    for i, case in enumerate(NUMERIC):
        (tmp_path / str(i)).mkdir()
        rc, err, left = run_case(case, tmp_path / str(i))
        one_line = len(err.strip().splitlines()) == 1 and "Traceback" not in err
        if rc != 2 or not one_line or case.needle not in err or left:
            wrong.append(f"{case.name}: exit {rc}, left {left}: {err.strip()}")
    assert not wrong, "\n".join(wrong)


def test_the_table_covers_every_numeric_option():
    named = {c.argv[2] for c in CASES if len(c.argv) > 2 and c.argv[0] == "train"}
    for name in _NUMERIC:
        assert "--" + name.replace("_", "-") in named, name


@pytest.mark.parametrize("name", sorted(_ZERO_IS_VALID))
def test_zero_is_accepted_where_it_means_something(name):
    assert getattr(Config.for_env("CartPole-v1", **{name: 0}), name) == 0


def test_target_return_none_switches_the_target_off(capsys, tmp_path):
    assert (
        main(
            ["train", "CartPole-v1", "--out", str(tmp_path / "r"), *TINY, "--target-return", "none"]
        )
        == 0
    )
    assert "no target" in capsys.readouterr().out
    assert (
        Config.from_dict(json.loads((tmp_path / "r" / "config.json").read_text())).target_return
        == math.inf
    )


def test_plot_writes_the_format_its_suffix_names(tmp_path):
    """SVG and PDF here; PNG in tests/test_cli_train.py::test_train_evaluate_plot (``x.png``)."""
    _train_tiny(tmp_path / "run")
    magic = {"svg": b"<?xml", "pdf": b"%PDF"}
    for fmt, head in magic.items():
        out = tmp_path / f"curves.{fmt}"
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["plot", str(tmp_path / "run"), "--out", str(out)]) == 0
        assert out.read_bytes()[: len(head)] == head


def test_a_huge_learning_rate_is_warned_about_once(tmp_path, capsys):
    argv = ["train", "CartPole-v1", "--out", str(tmp_path / "r"), "--lr", "1e6", *TINY]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "--lr 1000000.0" in err
    assert len(err.strip().splitlines()) == 1


def test_non_finite_update_names_the_quantity_and_the_checkpoint(tmp_path, monkeypatch, capsys):
    import eligibility.reinforce.trainer as trainer

    real = trainer.policy_gradient
    calls = {"n": 0}

    def poisoned(*a, **k):
        grads, info = real(*a, **k)
        calls["n"] += 1
        if calls["n"] == 3:
            grads = {k: v * math.nan for k, v in grads.items()}
        return grads, info

    monkeypatch.setattr(trainer, "policy_gradient", poisoned)
    argv = ["train", "CartPole-v1", "--out", str(tmp_path / "r"), "--checkpoint-every", "1"]
    # non-finite numbers: a setting to change (exit 2, docs/cli.md), not a finding
    assert main([*argv, "--total-steps", "100000", "--eval-every", "0", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "gradient norm became nan at update 3" in err and "--lr 0.05" in err
    assert "(the last good one) is intact" in err


def test_an_unwritable_out_is_one_line(tmp_path, monkeypatch, capsys):
    # As root every folder is writable, so the refusal the OS would give is injected.
    def refuse(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    assert main(["train", "CartPole-v1", "--out", str(tmp_path / "ro" / "run"), *TINY]) == 2
    err = capsys.readouterr().err
    assert "permission denied; choose a writable place" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "ro").exists()


if __name__ == "__main__":  # the whole table by hand: N inputs, 0 tracebacks
    failures, tracebacks = [], 0
    with pytest.MonkeyPatch.context() as mp:
        for case in CASES:
            with tempfile.TemporaryDirectory() as d:
                if case.name == "missing box2d":
                    _missing_box2d(mp)
                rc, err, left = run_case(case, Path(d))
                mp.undo()
                tracebacks += "Traceback" in err
                ok = rc == 2 and len(err.strip().splitlines()) == 1 and case.needle in err
                if not ok or left:
                    failures.append(f"{case.name}: exit {rc}, left {left}: {err.strip()}")
    print("\n".join(failures))
    print(f"{len(CASES)} inputs, {tracebacks} tracebacks, {len(failures)} not as expected")
    shutil.rmtree(Path(tempfile.gettempdir()) / "eligibility-faults", ignore_errors=True)
    sys.exit(1 if failures or tracebacks else 0)
