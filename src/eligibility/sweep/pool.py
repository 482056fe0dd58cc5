"""The local launcher: a pool of worker processes that never outlive the sweep.

Each worker is ``python -m eligibility.sweep.worker``, started by the sweep and bound to it:

* it runs in a process group of its own, so a Ctrl-C at the terminal reaches the sweep alone,
  which stops the workers itself (below) instead of each one tearing down on its own;
* on Linux it asks the kernel for SIGTERM when the sweep dies (``prctl(PR_SET_PDEATHSIG)``),
  ``kill -9`` included: it checkpoints its last completed update and exits; a watchdog thread
  ends it regardless :data:`~eligibility.sweep.jobs.STOP_GRACE_S` seconds after the sweep is
  gone (and is the mechanism on systems without ``prctl``);
* it holds an inherited descriptor of the sweep directory's lock, so the directory stays locked
  until the last worker has exited, and a resumed sweep never races a dying one.

Jobs go to a worker as one JSON line on its stdin; its summary comes back as one JSON line on a
pipe of its own (its stdout is the sweep's stderr, so a chatty env cannot corrupt the protocol).
A worker that dies without answering (the OOM killer's SIGKILL, a segfault, ``os._exit`` in an
env) fails its run with the signal or status named, and a fresh worker takes the next job.

On the first SIGINT/SIGTERM of the sweep (see :class:`eligibility.sweep.signals.StopSignals`)
nothing more is handed out and each busy worker gets the same signal: ``train`` stops at its last
completed update, checkpointed, and the worker reports the run as interrupted. A worker
still busy :data:`~eligibility.sweep.jobs.STOP_GRACE_S` later, or any worker at a second
signal, is killed with its process group (SIGKILL). Every worker is reaped before this returns.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from eligibility.sweep.jobs import POLL_S, STOP_GRACE_S, THREAD_VARS, failed


@dataclass
class _Worker:
    proc: subprocess.Popen[bytes]
    results: int  # the read end of the worker's result pipe
    buf: bytearray = field(default_factory=bytearray)
    job: dict[str, Any] | None = None
    retired: bool = False  # it said it stops after its answer: no job is sent to it any more

    def send(self, job: dict[str, Any]) -> bool:
        """Hand ``job`` over; False when the worker is gone (its stdin closed)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(job).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return False
        self.job = job
        return True

    def close_stdin(self) -> None:
        """No more jobs: the worker exits when it has answered the one it has."""
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()

    def read(self) -> list[dict[str, Any]]:
        """The summaries that have arrived (non-blocking; all of them once the worker is gone)."""
        out = []
        while True:
            try:
                chunk = os.read(self.results, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            self.buf += chunk
        while b"\n" in self.buf:
            line, _, rest = bytes(self.buf).partition(b"\n")
            self.buf = bytearray(rest)
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signum)

    def kill(self) -> None:
        """SIGKILL the worker and its process group (async vector envs' processes included)."""
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(self.proc.pid, signal.SIGKILL)

    def reap(self) -> None:
        """Wait for the worker to end (killing it if it does not within 5 s); close its pipe."""
        self.close_stdin()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            os.close(self.results)


def death(returncode: int) -> str:
    """Why a worker ended without answering, from its exit status."""
    if returncode < 0:
        name = signal.Signals(-returncode).name
        why = {
            signal.SIGKILL: " (the kernel's out-of-memory killer sends SIGKILL; so does kill -9)",
            signal.SIGSEGV: " (a crash in native code)",
        }.get(signal.Signals(-returncode), "")
        return f"the worker running it was killed by {name}{why}"
    return f"the worker running it exited with status {returncode} (os._exit in the env?)"


def _start(keep_fds: Sequence[int], label: str) -> _Worker:
    r, w = os.pipe()
    os.set_blocking(r, False)
    env = {**os.environ, **{v: "1" for v in THREAD_VARS}}
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "eligibility.sweep.worker", str(os.getpid()), str(w), label],
            stdin=subprocess.PIPE,
            stdout=2,  # the sweep's stderr: anything an env prints stays off the results
            pass_fds=(w, *keep_fds),
            process_group=0,
            env=env,
        )
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    return _Worker(proc, r)


@dataclass
class _Pool:
    """The workers of one :func:`run_local` call, the jobs left and the stop in progress."""

    pending: collections.deque[dict[str, Any]]
    workers: int
    on_result: Callable[[dict[str, Any]], None]
    received: list[int]
    keep_fds: Sequence[int]
    label: str
    on_stop: Callable[[int, int], None] | None
    live: list[_Worker] = field(default_factory=list)
    stopping_since: float | None = None

    def busy(self) -> bool:
        """Whether a worker is running a job."""
        return any(w.job is not None for w in self.live)

    def answer(self, w: _Worker, summary: dict[str, Any]) -> None:
        """Pass a worker's summary on; a worker that says it stops takes no more jobs."""
        w.job = None
        if summary.pop("worker_stops", False):
            w.retired = True
            w.close_stdin()
        self.on_result(summary)

    def stopped(self) -> bool:
        """Act on the signals: the first stops gracefully, a second (or the grace spent) at once.

        Returns:
            True when the pool is to stop now (its busy workers killed and answered for).
        """
        if self.received and self.stopping_since is None:
            self.stopping_since = time.monotonic()
            self.pending.clear()
            busy = [w for w in self.live if w.job is not None]
            for w in busy:
                w.signal(self.received[0])
            if self.on_stop is not None:
                self.on_stop(self.received[0], len(busy))
        if self.stopping_since is None or (
            len(self.received) <= 1 and time.monotonic() - self.stopping_since <= STOP_GRACE_S
        ):
            return False
        for w in self.live:
            if w.job is not None:
                w.kill()
                w.proc.wait()
                for summary in w.read():
                    self.answer(w, summary)
                if w.job is not None:
                    self.answer(w, failed(w.job, interrupted=True, error="killed while stopping"))
        return True

    def hand_out(self) -> None:
        """Give the next jobs to idle workers, starting workers as needed."""
        for w in self.live:  # a worker that is gone is found in :meth:`collect`, by its exit
            if w.job is None and not w.retired and self.pending and w.send(self.pending[0]):
                self.pending.popleft()
        while self.pending and sum(not w.retired for w in self.live) < self.workers:
            w = _start(self.keep_fds, self.label)
            self.live.append(w)
            if w.send(self.pending[0]):
                self.pending.popleft()

    def collect(self) -> None:
        """Wait for answers; pass them on; fail the job of a worker that ended without one."""
        with contextlib.suppress(InterruptedError):
            select.select([w.results for w in self.live], [], [], POLL_S)
        for w in list(self.live):
            for summary in w.read():
                self.answer(w, summary)
            if w.proc.poll() is None:
                continue
            for summary in w.read():  # what it wrote just before it ended
                self.answer(w, summary)
            if w.job is not None:
                why = death(w.proc.returncode)
                stopping = self.stopping_since is not None
                self.answer(
                    w,
                    failed(w.job, interrupted=True, error=why) if stopping else failed(w.job, why),
                )
            w.reap()
            self.live.remove(w)

    def close(self) -> None:
        """Normally every worker is idle here and exits at the end of its stdin; else killed."""
        for w in self.live:
            w.close_stdin()
            if self.stopping_since is not None or w.job is not None:
                w.kill()
        for w in self.live:
            w.reap()


def run_local(
    jobs: list[dict[str, Any]],
    workers: int,
    on_result: Callable[[dict[str, Any]], None],
    received: list[int],
    *,
    keep_fds: Sequence[int] = (),
    label: str = "",
    on_stop: Callable[[int, int], None] | None = None,
) -> None:
    """Run ``jobs`` on ``workers`` worker processes; ``on_result(summary)`` as each ends.

    Args:
        jobs: the jobs (see :func:`eligibility.sweep.launch.run_one`).
        workers: processes at most.
        on_result: called in this process with each summary (failed and interrupted ones too).
        received: the signals received so far (appended to by the sweep's handler): the first
            stops the sweep gracefully, a second at once.
        keep_fds: descriptors the workers inherit (the sweep directory's lock).
        label: shown in the workers' command line (``ps``), e.g. the sweep directory.
        on_stop: called once as ``on_stop(signum, busy)`` when the first signal is acted on.
    """
    pool = _Pool(collections.deque(jobs), workers, on_result, received, keep_fds, label, on_stop)
    try:
        while (pool.pending or pool.busy()) and not pool.stopped():
            pool.hand_out()
            pool.collect()
    finally:
        pool.close()


__all__ = ["death", "run_local"]
