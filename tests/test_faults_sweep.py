"""`eligibility sweep` under faults: signals, killed parents and workers, crashing runs, two
sweeps on one directory, a full disk. Real processes and real signals, bounded in time with
generous limits (the machine is loaded); the ones that take seconds are marked slow, with a fast
representative of each behaviour in the default suite.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eligibility.cli import main
from eligibility.reinforce.logs import TIMING_COLUMNS
from eligibility.runs import read_metrics
from eligibility.sweep import launch, sweep
from eligibility.sweep.launch import RESULT
from eligibility.sweep.run import lock_sweep_dir
from eligibility.sweep.signals import SweepInterrupted
from sweep_envs import FinishedLauncher

TESTS = Path(__file__).parent
SRC = TESTS.parent / "src"
LONG = ["--set", "total_steps=100000000", "--set", "eval_every=0", "--set", "hidden=8"]


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(SRC), str(TESTS), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


def _start(out: Path, *argv: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "eligibility.cli", "sweep", *argv, "--out", str(out)]
    return subprocess.Popen(
        [*cmd, "--no-pictures"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        start_new_session=True,  # its own session: a stray signal never reaches pytest
    )


def _workers(out: Path) -> list[int]:
    """Pids of the live worker processes of the sweep in ``out`` (from their command lines)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"eligibility.sweep.worker" in cmd and str(out).encode() in cmd and state != "Z":
            pids.append(int(proc.name))
    return pids


def _wait(condition, proc: subprocess.Popen[str] | None = None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the sweep ended first: {proc.stderr.read()}")  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _rows(run_dir: Path) -> int:
    return len(read_metrics(run_dir))


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in read_metrics(run_dir)]


# -- signals ---------------------------------------------------------------------------------------


def test_sigint_stops_the_worker_checkpointed_exit_130_and_no_worker_left(tmp_path):
    out = tmp_path / "sw"
    run = out / "defaults" / "seed-0"
    proc = _start(out, "CartPole-v1", "--seeds", "1", *LONG, "--set", "checkpoint_every=1")
    _wait(lambda: _rows(run) >= 3, proc)
    assert len(_workers(out)) == 1
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    print(f"stopped in {time.monotonic() - t0:.2f} s")
    assert proc.returncode == 130, stderr
    assert not _workers(out)  # reaped, none left behind
    assert "interrupted (SIGINT)" in stderr and "Traceback" not in stderr and stdout == ""
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] is False and results["unfinished"] == [str(run)]
    assert (run / "checkpoint.safetensors").is_file() and not (run / RESULT).exists()


@pytest.mark.slow
def test_sigterm_then_resume_gives_the_runs_of_an_uninterrupted_sweep(tmp_path):
    grid = ["--seeds", "2", "--set", "baseline=none,rloo", "--set", "hidden=8", "--jobs", "2"]
    grid += ["--set", "total_steps=8000", "--set", "eval_every=2000", "--set", "eval_episodes=3"]
    assert (
        main(["sweep", "CartPole-v1", *grid, "--out", str(tmp_path / "ref"), "--no-pictures"]) == 0
    )
    out = tmp_path / "sw"
    proc = _start(out, "CartPole-v1", *grid)
    _wait(lambda: any(_rows(r) >= 2 for r in out.glob("*/seed-*")), proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert not _workers(out)
    before = json.loads((out / "results.json").read_text())
    assert before["complete"] is False and len(before["runs"]) < 4
    assert main(["sweep", "CartPole-v1", *grid, "--out", str(out), "--no-pictures"]) == 0
    assert json.loads((out / "results.json").read_text())["complete"] is True
    for ref in (tmp_path / "ref").glob("*/seed-*"):
        assert _metrics(out / ref.relative_to(tmp_path / "ref")) == _metrics(ref), ref
    same = ("final_eval_return", "steps_to_target", "solved", "env_steps")
    a, b = (json.loads((d / "results.json").read_text()) for d in (tmp_path / "ref", out))
    assert [{k: r[k] for k in same} for r in a["runs"]] == [
        {k: r[k] for k in same} for r in b["runs"]
    ]

    def no_wall(summary):
        return {k: {s: v for s, v in e.items() if s != "wall_s"} for k, e in summary.items()}

    assert no_wall(a["summary"]) == no_wall(b["summary"])  # the statistics too, walls aside


@pytest.mark.slow
def test_a_second_signal_ends_everything_at_once(tmp_path):
    """The worker hangs in the env's step (never polls): the first SIGINT cannot stop it; the
    second kills it at once, without waiting for the grace period."""
    out = tmp_path / "sw"
    hang = ['env_kwargs={"fault": "hang", "after": 30}']
    proc = _start(out, "sweep_envs:Hostile-v0", "--seeds", "1", "--set", *hang, *LONG)
    run = out / "defaults" / "seed-0"
    _wait(lambda: _rows(run) >= 2, proc)
    time.sleep(1.0)  # into the third batch: hanging
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)  # the sweep passes it on; the worker, hanging, cannot act on it
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 130, stderr
    assert elapsed < launch.STOP_GRACE_S, elapsed  # not the grace period: at once
    assert not _workers(out)
    assert json.loads((out / "results.json").read_text())["unfinished"] == [str(run)]


@pytest.mark.slow
def test_kill_9_of_the_sweep_leaves_no_worker_and_the_sweep_resumes(tmp_path):
    out = tmp_path / "sw"
    grid = ["--seeds", "2", "--set", "baseline=none,rloo", "--set", "hidden=8", "--jobs", "2"]
    grid += ["--set", "total_steps=30000", "--set", "eval_every=0", "--set", "checkpoint_every=1"]
    proc = _start(out, "CartPole-v1", *grid)
    _wait(lambda: sum(_rows(r) >= 2 for r in out.glob("*/seed-*")) >= 2, proc)
    workers = _workers(out)
    assert len(workers) == 2
    proc.kill()  # SIGKILL: nothing of the sweep runs to clean up
    proc.wait()
    t0 = time.monotonic()
    _wait(lambda: not _workers(out), timeout=launch.STOP_GRACE_S + 30)
    print(f"workers gone {time.monotonic() - t0:.2f} s after the sweep's kill -9")
    assert main(["sweep", "CartPole-v1", *grid, "--out", str(out), "--no-pictures"]) == 0
    for run in out.glob("*/seed-*"):
        updates = [int(r["update"]) for r in read_metrics(run)]
        assert updates == list(range(1, len(updates) + 1))  # none lost, none twice
        assert (run / RESULT).is_file()


@pytest.mark.slow
def test_sigint_on_ray_stops_the_tasks_checkpointed_and_the_sweep_resumes(tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "sw"
    grid = ["CartPole-v1", "--seeds", "2", "--set", "hidden=8", "--set", "checkpoint_every=1"]
    grid += ["--set", "total_steps=20000", "--set", "eval_every=0", "--jobs", "2"]
    grid += ["--launcher", "ray"]
    proc = _start(out, *grid)
    _wait(lambda: any(_rows(r) >= 2 for r in out.glob("*/seed-*")), proc, timeout=300)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert json.loads((out / "results.json").read_text())["complete"] is False
    rerun = _start(out, *grid)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    for run in out.glob("*/seed-*"):
        updates = [int(r["update"]) for r in read_metrics(run)]
        assert updates == list(range(1, len(updates) + 1))  # none lost, none twice
        assert (run / RESULT).is_file()


# -- runs that crash, workers that die -------------------------------------------------------------


@pytest.mark.slow
def test_crashed_and_killed_workers_are_named_and_the_others_go_on(tmp_path, monkeypatch):
    """One run raises, one worker exits with os._exit(3), one is SIGKILLed (as by the OOM
    killer): each is FAILED with its cause, the healthy run ends, exit 1; a re-run retries them
    (the exit and the kill fire once) and keeps the healthy run."""
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    out = tmp_path / "sw"
    kwargs = "; ".join(
        [
            "{}",
            '{"fault": "raise"}',
            json.dumps({"fault": "exit", "once": str(tmp_path / "exit")}),
            json.dumps({"fault": "kill", "once": str(tmp_path / "kill")}),
        ]
    )
    argv = ["sweep", "sweep_envs:Hostile-v0", "--seeds", "1", "--set", f"env_kwargs={kwargs}"]
    argv += ["--set", "total_steps=800", "--set", "eval_every=0", "--set", "checkpoint_every=1"]
    argv += ["--jobs", "2", "--out", str(out), "--no-pictures", "--format", "json"]
    assert main(argv) == 1
    runs = json.loads((out / "results.json").read_text())["runs"]
    errors = [r["error"] for r in runs if not r["ok"]]
    assert len(runs) == 4 and len(errors) == 3
    assert any("RuntimeError: the env broke" in e and "sweep_envs.py:" in e for e in errors)
    assert any("exited with status 3" in e for e in errors), errors
    assert any("killed by SIGKILL" in e and "out-of-memory" in e for e in errors), errors
    healthy = next(out.glob(f"*/seed-0/{RESULT}"))
    mtime = healthy.stat().st_mtime_ns
    assert main(argv) == 1  # the raising run fails again; the others now end
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert [r["ok"] for r in runs].count(True) == 3 and healthy.stat().st_mtime_ns == mtime
    assert not _workers(out)


@pytest.mark.slow
def test_a_signal_to_one_worker_fails_its_run_resumably_and_the_sweep_goes_on(tmp_path):
    out = tmp_path / "sw"
    grid = ["CartPole-v1", "--seeds", "2", "--set", "hidden=8", "--set", "checkpoint_every=1"]
    grid += ["--set", "total_steps=6000", "--set", "eval_every=0", "--jobs", "1"]
    proc = _start(out, *grid)
    first = out / "defaults" / "seed-0"
    _wait(lambda: _rows(first) >= 2, proc)
    (worker,) = _workers(out)
    os.kill(worker, signal.SIGTERM)  # someone else's kill: not the sweep's own signal
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    assert "stopped by a signal sent to its worker" in err
    assert (out / "defaults" / "seed-1" / RESULT).is_file()  # the next run went on
    rerun = _start(out, *grid)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    updates = [int(r["update"]) for r in read_metrics(first)]
    assert updates == list(range(1, len(updates) + 1))  # resumed from its checkpoint


@pytest.mark.slow
def test_an_env_that_prints_does_not_spoil_the_json_on_stdout(tmp_path):
    out = tmp_path / "sw"
    argv = ["sweep_envs:Hostile-v0", "--seeds", "1", "--set", 'env_kwargs={"fault": "print"}']
    argv += ["--set", "total_steps=400", "--set", "eval_every=0", "--format", "json"]
    proc = _start(out, *argv)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert json.loads(stdout)["complete"] is True
    assert "{not json" in stderr  # the env's prints went to stderr


# -- one sweep per directory -----------------------------------------------------------------------


def test_a_second_sweep_on_a_locked_directory_is_refused(tmp_path, capsys):
    out = tmp_path / "sw"
    out.mkdir()
    lock = lock_sweep_dir(out)  # as a running sweep holds it (this process: alive)
    try:
        rc = main(["sweep", "CartPole-v1", "--seeds", "1", "--out", str(out)])
    finally:
        lock.close()
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"in use by another sweep (process {os.getpid()})" in err
    assert not (out / "sweep.json").exists()


@pytest.mark.slow
def test_two_sweeps_on_one_directory_one_refused_the_other_unharmed(tmp_path):
    out = tmp_path / "sw"
    grid = ["CartPole-v1", "--seeds", "2", "--set", "total_steps=40000", "--set", "hidden=8"]
    grid += ["--set", "eval_every=0", "--set", "target_return=inf", "--jobs", "1"]
    first = _start(out, *grid)
    _wait(lambda: any(_rows(r) >= 1 for r in out.glob("*/seed-*")), first)
    second = _start(out, *grid)
    _, err = second.communicate(timeout=120)
    assert second.returncode == 2 and "in use by another sweep" in err
    assert len(err.strip().splitlines()) == 1, err
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0 and "FAILED" not in err, err
    assert len(list(out.glob(f"*/seed-*/{RESULT}"))) == 2


# -- the end of a sweep: Ctrl-C while summarising, a full disk -------------------------------------


def test_ctrl_c_while_drawing_leaves_results_json_whole(tmp_path, monkeypatch):
    from eligibility.sweep import run as sweep_run

    monkeypatch.setitem(launch.LAUNCHERS, "local", FinishedLauncher)

    def draw(result):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler raises at once
        raise AssertionError("not interrupted")

    monkeypatch.setattr(sweep_run, "draw", draw)
    out = tmp_path / "sw"
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN where pytest was started in the background
    with pytest.raises(SweepInterrupted) as stop:
        sweep("CartPole-v1", seeds=3, out=out)
    assert stop.value.signum == signal.SIGINT and stop.value.finished == stop.value.total == 3
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] is True and len(results["runs"]) == 3
    assert signal.getsignal(signal.SIGINT) is before  # put back


def test_a_full_disk_while_writing_results_json_keeps_the_old_one(tmp_path, monkeypatch, capsys):
    import eligibility._io as io

    monkeypatch.setitem(launch.LAUNCHERS, "local", FinishedLauncher)
    out = tmp_path / "sw"
    argv = ["sweep", "CartPole-v1", "--seeds", "2", "--out", str(out), "--no-pictures"]
    assert main(argv) == 0
    old = (out / "results.json").read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(FinishedLauncher, "offset", 1.0)  # the new results would differ
    monkeypatch.setattr(io.os, "fsync", full)
    capsys.readouterr()
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and "No space left on device" in err[0], err
    assert str(out / "results.json") in err[0]
    assert (out / "results.json").read_bytes() == old
    assert not list(out.glob(".*.tmp"))  # no half-written temporary left behind


def test_a_dead_worker_is_named_by_its_signal_or_status():
    from eligibility.sweep.pool import death

    assert "killed by SIGKILL" in death(-signal.SIGKILL) and "out-of-memory" in death(-9)
    assert "killed by SIGSEGV (a crash in native code)" in death(-signal.SIGSEGV)
    assert death(-signal.SIGTERM).endswith("killed by SIGTERM")
    assert "exited with status 3" in death(3)
