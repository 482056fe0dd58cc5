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

import contextlib
import math
import random
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from eligibility._isolate import UserCodeError, Worker
from eligibility.check.family import Draw
from eligibility.check.user import UserError, user_traceback


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
    worker: Worker | None = None,
    summary: Callable[[], dict] | None = None,
    on_summary: Callable[[dict], None] = lambda s: None,
) -> list[np.ndarray | None]:
    """``[step(0), …, step(n − 1)]``, computed in a forked worker process (``_isolate``).

    Args:
        step: one call of the user's function and its gradient (None: no gradient); it raises
            :class:`UserError` for what the user's code did, ``ValueError`` for a return value
            outside the contract.
        n: the number of calls.
        setup: run once in the worker before the calls (seeding torch, say).
        timeout: seconds one call may take.
        memory: MiB the worker may allocate beyond what it inherits.
        progress: where to report the calls done.
        worker: one forked already (:func:`forked_ahead`), which computes its own ``step``
            and ``setup``: the same, from the same seeds; None: fork one now.
        summary: run in the worker after the calls (:attr:`Draw.summary`; a worker started
            ahead runs its own draw's); its result is handed to ``on_summary`` here.
        on_summary: receives the summary.

    Raises:
        UserError: the user's function raised, ended the process, was killed, or overran.
        ValueError: it returned something outside the contract.
    """
    progress = progress or Progress(False)
    rows: list[np.ndarray | None] = []
    if worker is None:
        worker = Worker(_Calls(step, summary), setup=setup, describe=_describe, memory=memory)
        worker.fork()
    try:
        with worker:
            worker.ready(timeout=math.inf)
            for k in range(n):
                try:
                    rows.append(
                        worker.call(k, timeout=timeout, tick=lambda: progress.update(len(rows)))
                    )
                except UserCodeError as err:
                    raise UserError(_in_call(err, k + 1, timeout)) from None
                except ValueError as err:
                    raise ValueError(f"{err} (call {k + 1})") from None
                progress.update(len(rows), force=len(rows) == n)
            if summary is not None:
                on_summary(worker.call(SUMMARY, timeout=timeout) or {})
    except UserCodeError as err:  # setup: the check's own code, not the user's
        raise UserError(err.text) from None
    return rows


def start_method(plan: Callable[[], Draw]) -> str | None:
    """How the check starts the workers that run the user's function: decided here only.

    * torch without an accelerator (a CPU build): None, each worker forked when its problem
      is checked (:func:`run_calls`); a fork is cheap and takes closures and lambdas;
    * a CUDA or ROCm build and a ``plan`` that pickles (the function given as
      ``FILE.py:FUNCTION``, or importable by name): ``spawn``, a fresh interpreter, in which
      the user's code can start CUDA whatever this process did with it (a process forked
      from one that asked the driver anything, ``torch.cuda.is_available()`` included, cannot);
    * a CUDA or ROCm build and a ``plan`` that does not pickle (a closure, a framework's
      adapter): ``fork``, every worker forked ahead of this process's own autograd (a process
      forked after a backward pass cannot run one where torch sees an accelerator); CUDA works
      in it where this process has not touched CUDA before.
    """
    import pickle

    import torch

    if not (torch.version.cuda or torch.version.hip):
        return None
    try:
        pickle.dumps(plan)
    except Exception:  # a closure or a lambda: only a fork carries it
        return "fork"
    return "spawn"


SUMMARY = "summary"
"""The request that asks a worker for its draw's summary after the calls."""


class _Calls:
    """A worker's ``serve``: call k of ``step``, or the ``summary`` after the calls."""

    def __init__(self, step: Callable[[int], Any], summary: Callable[[], dict] | None) -> None:
        self.step, self.summary = step, summary

    def __call__(self, request: Any) -> Any:
        if request == SUMMARY:
            return self.summary() if self.summary is not None else {}
        return self.step(request)


class _Served:
    """A worker's work: the problem's :class:`Draw`, computed in the worker from ``plan``.

    Its bound methods are the worker's ``setup`` and ``serve``: they pickle where ``plan``
    does (a spawned worker receives them).
    """

    def __init__(self, plan: Callable[[], Draw]) -> None:
        self.plan = plan
        self.draw: Draw | None = None

    def setup(self) -> None:
        self.draw = self.plan()
        self.draw.setup()

    def serve(self, request: Any) -> Any:
        assert self.draw is not None  # setup ran first, in the same worker
        return _Calls(self.draw.step, self.draw.summary)(request)


def forked_ahead(plan: Callable[[], Draw], memory: int, method: str = "fork") -> Worker:
    """A worker started now that computes its own batches and serves their calls.

    It runs ``plan()`` (the problem's :class:`Draw`, from its seeds) and the draw's ``setup``,
    then serves its ``step``. Where torch sees an accelerator, the check starts every worker
    this way before it runs autograd itself (the exact gradients), by ``method``
    (:func:`start_method`); the memory cap is then on the data segment, which CUDA's
    initialisation leaves room for (an address-space cap refuses CUDA as out of memory).
    """
    served = _Served(plan)
    worker = Worker(
        served.serve,
        setup=served.setup,
        describe=_describe,
        memory=memory,
        start_method=method,
        cap="data",
    )
    worker.fork()
    return worker


def _describe(err: BaseException, k: int | None) -> str:
    """The check's words for what the user's function did in call ``k`` (0-based)."""
    if isinstance(err, UserError):
        return err.text
    if isinstance(err, SystemExit):
        return (
            f"your function called sys.exit({err.code!r}) in call {(k or 0) + 1} "
            f"instead of returning: return the loss; never exit\n{user_traceback(err)}"
        )
    return user_traceback(err)


def _in_call(err: UserCodeError, k: int, timeout: float) -> str:
    """The worker's account of a failed call, in the check's words (call ``k``, 1-based)."""
    if err.kind == "timeout":
        return (
            f"call {k} did not return within {timeout:g} s (--timeout): your function sleeps, "
            "waits or loops; one call is one small batch and takes milliseconds"
        )
    if err.kind == "ended" and err.text.startswith("was killed"):
        return f"the process running your function {err.text} in call {k}"
    if err.kind == "ended":
        return f"your function {err.text} in call {k}: return the loss; never exit"
    return err.text


@contextlib.contextmanager
def caller_state_kept() -> Iterator[None]:
    """Leave the caller's RNG states and torch's thread count as they were.

    The states of torch's, NumPy's global and ``random``'s generators are put back whatever
    runs inside; torch runs one thread meanwhile (tiny tensors).
    """
    import torch

    states = (torch.get_rng_state(), np.random.get_state(), random.getstate())  # noqa: NPY002
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])  # noqa: NPY002
        random.setstate(states[2])


__all__ = ["Progress", "caller_state_kept", "forked_ahead", "run_calls", "start_method"]
