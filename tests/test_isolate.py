"""The worker that runs a user's code: a child it forks dies with the command (real processes)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from eligibility._isolate import UserCodeError, Worker

FORKS = """
import os, time

def forks(request):
    if os.fork() == 0:  # a child that sleeps on, holding the inherited stdout and stderr
        time.sleep(60)
        os._exit(0)
    return request + 1
"""

SCRIPT = """
import sys
sys.path.insert(0, {folder!r})
from mine import forks
from eligibility._isolate import Worker

with Worker(forks) as w:
    w.start(timeout=30)
    print(w.call(41, timeout=30))
"""


def test_a_child_forked_by_the_users_code_does_not_outlive_the_command(tmp_path):
    """With our stdout and stderr piped, the pipes close when the command ends (the child that
    the user's code forked sleeps for a minute: it must be killed with the worker's group)."""
    (tmp_path / "mine.py").write_text(textwrap.dedent(FORKS))
    code = textwrap.dedent(SCRIPT).format(folder=str(tmp_path))
    src = str(Path(__file__).resolve().parents[1] / "src")
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "42\n"
    assert time.perf_counter() - t0 < 25


def _exit3(request):
    raise SystemExit(3)


def _sleeps(request):
    time.sleep(60)


@pytest.mark.parametrize(
    ("serve", "kind", "needle"),
    [
        (_exit3, "raised", "sys.exit(3)"),
        (_sleeps, "timeout", "did not return within 0.1 s"),
        (lambda r: __import__("os")._exit(0), "ended", "exit status 0"),
    ],
)
def test_each_way_out_of_the_users_code_is_named(serve, kind, needle):
    with Worker(serve) as w:
        w.start(timeout=30)
        with pytest.raises(UserCodeError) as info:
            w.call(None, timeout=0.1 if kind == "timeout" else 30)  # one poll (0.2 s)
    assert info.value.kind == kind and needle in info.value.text


def test_a_value_error_is_a_value_error_and_the_worker_serves_on():
    def serve(request):
        if request < 0:
            raise ValueError("negative")
        return 2 * request

    with Worker(serve) as w:
        w.start(timeout=30)
        with pytest.raises(ValueError, match="negative"):
            w.call(-1, timeout=30)
        assert w.call(21, timeout=30) == 42


def _cuda_in_a_fork(request):
    raise RuntimeError(
        "Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you "
        "must use the 'spawn' start method"
    )


def test_cuda_started_before_the_fork_is_named_with_the_way_out():
    """torch's own words for a fork of a process that had started CUDA (a check run from a
    notebook that used the GPU) come back with why it happened and what to do."""
    with Worker(_cuda_in_a_fork) as w:
        w.start(timeout=30)
        with pytest.raises(UserCodeError) as info:
            w.call(None, timeout=30)
    assert "re-initialize CUDA" in info.value.text
    assert "had started CUDA before it forked" in info.value.text


def test_forking_from_a_process_with_threads_says_nothing(recwarn, monkeypatch):
    """Python 3.12+ warns at a fork of a process with threads (torch's pool has them): the
    worker runs only the user's code, and the warning would be a stray line of every command.
    On an older Python the fork is given 3.12's warning here, so the test holds everywhere."""
    import os
    import threading
    import warnings

    fork = os.fork

    def warning_fork():
        warnings.warn(
            f"This process (pid={os.getpid()}) is multi-threaded, use of fork() may lead to "
            "deadlocks in the child.",
            DeprecationWarning,
            stacklevel=2,
        )
        return fork()

    monkeypatch.setattr(os, "fork", warning_fork)

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        with Worker(lambda r: r + 1) as w:
            w.start(timeout=30)
            assert w.call(1, timeout=30) == 2
    finally:
        stop.set()
        thread.join()
    assert not [w for w in recwarn if "fork" in str(w.message)]


def _matmul(n: int) -> float:
    import torch

    y = torch.ones(512, 512)
    return float((y @ y)[0, 0]) + n


def test_users_torch_code_runs_in_a_worker_forked_after_torchs_threads_ran():
    """A reward or an environment that runs a parallel torch kernel (a 512 × 512 matmul) in a
    worker forked from a process whose OpenMP pool has run with two threads: libgomp's pool
    does not survive the fork, and without one thread in the child the call waited out its
    timeout."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for _ in range(3):
            _matmul(0)  # this process's OpenMP pool started with two threads
        with Worker(_matmul) as w:
            w.start(timeout=30)
            assert w.call(1, timeout=20) == 513.0
    finally:
        torch.set_num_threads(threads)
