"""The user's function runs in a worker process, where it cannot take the check down or lie.

One worker per problem, forked from the check (so closures and lambdas work as well as
``FILE.py:fn``): it calls the user's function N times and sends back each gradient as it is
computed. The check waits at most ``timeout`` seconds for each call and reads how the worker
ended, so that

* a call that sleeps or loops is stopped after ``timeout`` s (the worker is killed);
* ``sys.exit``, ``os._exit``, a signal (the kernel's out-of-memory killer sends SIGKILL) or a
  crash in native code are an ``error`` verdict that names what happened, never a verdict
  reached without the calls;
* the worker's address space is capped (``memory`` MiB above what it inherited), so a runaway
  allocation is a ``MemoryError`` in the worker, not a machine brought down;
* whatever the user's code prints goes to stderr (stdout holds the report), its seeding of
  torch stays in the worker, and the worker dies with the check (SIGINT is the check's to
  handle; Linux's parent-death signal ends a worker orphaned by ``kill -9``).

Where ``os.fork`` does not exist (Windows) the calls run in the check's own process.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from eligibility.check.user import UserError, user_traceback

_ROW, _NONE, _ERROR, _BAD = b"r", b"n", b"e", b"b"


class Progress:
    """One line on stderr: which problem, how many calls, how long (rewritten on a terminal).

    Off a terminal it writes a line every ``every`` seconds and when a problem is done (so a
    call that fails at once leaves the error as the only line).
    """

    def __init__(self, enabled: bool, *, every: float = 15.0) -> None:
        self.enabled = enabled
        self.tty = enabled and sys.stderr.isatty()
        self.every = every if not self.tty else 0.2
        self._last = 0.0
        self._label = ""

    def start(self, label: str, n: int) -> None:
        """A new problem: ``label`` with ``n`` calls to come."""
        self._label, self._n, self._t0 = label, n, time.perf_counter()
        self._last = 0.0 if self.tty else self._t0  # off a terminal: no line for a quick failure
        self.update(0, force=self.tty)

    def update(self, done: int, *, force: bool = False) -> None:
        """``done`` of the problem's calls have returned."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._last < self.every:
            return
        self._last = now
        line = f"eligibility check: {self._label}: {done}/{self._n} calls, {now - self._t0:.1f} s"
        sys.stderr.write(f"\r{line}\033[K" if self.tty else line + "\n")
        sys.stderr.flush()

    def finish(self) -> None:
        """End the rewritten line (on a terminal)."""
        if self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def run_calls(
    step: Callable[[int], np.ndarray | None],
    n: int,
    *,
    setup: Callable[[], None] = lambda: None,
    timeout: float,
    memory: int,
    progress: Progress | None = None,
) -> list[np.ndarray | None]:
    """``[step(0), …, step(n − 1)]``, computed in a forked worker process.

    Args:
        step: one call of the user's function and its gradient (None: no gradient); it raises
            :class:`UserError` for what the user's code did, ``ValueError`` for a return value
            outside the contract.
        n: the number of calls.
        setup: run once in the worker before the calls (seeding torch, say).
        timeout: seconds one call may take.
        memory: MiB the worker may allocate beyond what it inherits.
        progress: where to report the calls done.

    Raises:
        UserError: the user's function raised, ended the process, was killed, or overran.
        ValueError: it returned something outside the contract.
    """
    progress = progress or Progress(False)
    if not hasattr(os, "fork"):  # pragma: no cover - Windows: no isolation
        setup()
        rows = []
        for k in range(n):
            rows.append(step(k))
            progress.update(k + 1)
        return rows
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    worker = ctx.Process(target=_worker, args=(step, n, setup, send, memory), daemon=True)
    worker.start()
    send.close()
    rows: list[np.ndarray | None] = []
    try:
        while len(rows) < n:
            asked = time.perf_counter()
            while not receive.poll(0.2):
                progress.update(len(rows))
                if time.perf_counter() - asked > timeout:
                    raise UserError(
                        f"call {len(rows) + 1} did not return within {timeout:g} s (--timeout): "
                        "your function sleeps, waits or loops; one call is one small batch and "
                        "takes milliseconds"
                    )
            try:
                msg = receive.recv_bytes()
            except EOFError:
                worker.join(10)
                raise UserError(_how_it_ended(worker.exitcode, len(rows) + 1)) from None
            tag, body = msg[:1], msg[1:]
            if tag == _ROW:
                rows.append(np.frombuffer(body, dtype=np.float64).copy())
            elif tag == _NONE:
                rows.append(None)
            elif tag == _BAD:
                raise ValueError(body.decode())
            else:
                raise UserError(body.decode())
            progress.update(len(rows), force=len(rows) == n)
    finally:
        if worker.is_alive():
            worker.kill()
        worker.join()
        receive.close()
    return rows


def _how_it_ended(code: int | None, k: int) -> str:
    """What a worker's exit status says about the call it died in."""
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        why = {
            "SIGKILL": "the system's out-of-memory killer sends SIGKILL: does it allocate "
            "without bound?",
            "SIGSEGV": "a crash in native code (an extension, or torch called out of bounds)",
        }.get(name, "")
        return f"the process running your function was killed by {name} in call {k}" + (
            f"; {why}" if why else ""
        )
    return (
        f"your function ended the process (exit status {code}) in call {k} instead of "
        "returning (os._exit?): return the loss; never exit"
    )


def _worker(
    step: Callable[[int], np.ndarray | None],
    n: int,
    setup: Callable[[], None],
    conn: Any,
    memory: int,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the check's to handle
    _die_with_parent()
    sys.stdout.flush()
    os.dup2(2, 1)  # what the user's code prints must not reach the report on stdout
    _cap_memory(memory)
    setup()
    for k in range(n):
        try:
            row = step(k)
        except UserError as err:
            conn.send_bytes(_ERROR + str(err).encode())
            return
        except ValueError as err:
            conn.send_bytes(_BAD + f"{err} (call {k + 1})".encode())
            return
        except SystemExit as err:
            where = user_traceback(err)
            conn.send_bytes(
                _ERROR
                + f"your function called sys.exit({err.code!r}) in call {k + 1} "
                f"instead of returning: return the loss; never exit\n{where}".encode()
            )
            return
        except BaseException as err:  # KeyboardInterrupt raised by the user's code, say
            conn.send_bytes(_ERROR + user_traceback(err).encode())
            return
        conn.send_bytes(_NONE if row is None else _ROW + np.ascontiguousarray(row).tobytes())
    conn.close()


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies (no orphan after ``kill -9``)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - no libc to speak to
        pass


def _cap_memory(mib: int) -> None:
    """RLIMIT_AS at what the process maps now plus ``mib`` MiB (Linux; a no-op elsewhere)."""
    try:
        import resource

        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[0])
        limit = pages * os.sysconf("SC_PAGE_SIZE") + mib * 2**20
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, ValueError):  # pragma: no cover - not Linux
        pass


__all__ = ["Progress", "run_calls"]
