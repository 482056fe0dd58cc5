"""Stop on SIGINT/SIGTERM at the next safe point: one flag that long loops poll.

Every long-running command (``train``, ``sweep``, the LM trainer) honours the same contract:

1. The first SIGINT or SIGTERM only sets a flag. The loop polls it at its safe points (every
   env step, every update, every wait), abandons the unit of work in progress, checkpoints the
   last *completed* one and raises :class:`Interrupted`; the command line exits with
   ``128 + signum`` (130 for SIGINT, 143 for SIGTERM).
2. A second signal ends the process at once: the first one restores the default action, so the
   kernel kills the process even inside C code. Files written through :mod:`eligibility._io`
   are atomic, so the last checkpoint stays whole.
3. A loop stuck where it cannot poll (a user's env blocking in C, a sleep) is not waited for
   forever: ``grace`` seconds after the first signal the process exits with ``128 + signum``.
   Never inside :func:`protected` work (a checkpoint being written): the forced exit waits for
   it to end, however long the write takes, so a stop never costs the checkpoint it asked for.

Usage::

    from eligibility._signals import Interrupted, stop_on_signals

    with stop_on_signals() as stop:
        while not done:
            stop.check()          # raises Interrupted(signum) once a signal came
            ...one unit of work...
            if stop:              # or test the flag yourself
                break
    # the caller checkpoints, then: raise Interrupted(stop.signum, out_dir)

Handlers can only be installed in the main thread; elsewhere (and when ``install=False``) the
context gives a plain flag that you set with :meth:`Stop.set` (a sweep forwarding a stop to its
workers). Nested contexts share the outer one's flag, so ``train`` called inside a sweep stops
when the sweep is told to.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "GRACE_S",
    "Interrupted",
    "Stop",
    "Terminated",
    "exit_status",
    "protected",
    "stop_on_signals",
    "terminate_as_interrupt",
]

GRACE_S = 10.0
"""Seconds between the first signal and a forced exit when the loop never polls again."""

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_status(signum: int) -> int:
    """The shell's status of a process ended by ``signum``: 128 + n (SIGINT 130, SIGTERM 143)."""
    return 128 + int(signum)


class Interrupted(Exception):
    """A signal stopped the work after its last completed unit (checkpointed when there is one).

    Attributes:
        signum: the signal (``signal.SIGINT`` or ``signal.SIGTERM``).
        out_dir: where the checkpoint is (the directory to resume), or None.
    """

    def __init__(self, signum: int, out_dir: str | Path | None = None) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = int(signum)
        self.out_dir = None if out_dir is None else Path(out_dir)

    @property
    def exit_status(self) -> int:
        """128 + signum: what the command line returns."""
        return exit_status(self.signum)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the work cannot poll a flag, as Python raises SIGINT's.

    A ``KeyboardInterrupt``, so that whatever cleans up after Ctrl-C cleans up after it too.
    """

    signum = int(signal.SIGTERM)


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` in the main thread for the ``with`` block.

    Python's own SIGTERM action ends the process without a word, while SIGINT raises
    ``KeyboardInterrupt``, which the command line says in one line: a command that does not
    poll a :class:`Stop` (``check``, ``finetune`` while it loads) says SIGTERM's the same way.
    A :func:`stop_on_signals` inside the block takes SIGTERM over and gives it back; one who
    ignores SIGTERM inside keeps it ignored after the block (a launcher's SIGTERM to a rank
    that is saying why the run stopped must not cut it short of its exit status). A process
    forked inside the block keeps SIGTERM's default action (the handler is this process's).
    Outside the main thread: a no-op.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()

    def raise_terminated(signum: int, frame: Any) -> None:
        if os.getpid() != owner:  # a forked child: the default action, as if never installed
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Terminated

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:  # SIGTERM ignored inside (a run whose rank was lost, saying so) stays ignored
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
            signal.signal(signal.SIGTERM, previous)


class Stop:
    """The stop flag: falsy until a signal (or :meth:`set`) asks the work to stop.

    Attributes:
        signum: the first signal received, or None.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._listeners: list[Callable[[int], None]] = []
        self._protected = threading.RLock()  # held by work the grace timer must not cut

    def __bool__(self) -> bool:
        return self.signum is not None

    def set(self, signum: int = signal.SIGTERM) -> None:
        """Ask the work to stop as if ``signum`` had arrived (the first request wins)."""
        if self.signum is None:
            self.signum = int(signum)
            for listener in self._listeners:
                listener(self.signum)

    def check(self) -> None:
        """Raise :class:`Interrupted` once a stop was asked for; a no-op otherwise."""
        if self.signum is not None:
            raise Interrupted(self.signum)

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking early on a stop; returns ``bool(self)``."""
        end = time.monotonic() + timeout
        while self.signum is None:
            left = end - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(0.05, left))
        return self.signum is not None


_active: list[Stop] = []  # the stops of the contexts now open in this process, outermost first


@contextlib.contextmanager
def protected() -> Iterator[None]:
    """Work that the grace timer's forced exit waits for (writing a checkpoint).

    A second signal still ends the process at once (the kernel's default action): the files
    are written atomically, so the previous checkpoint stays whole.
    """
    if not _active:
        yield
        return
    with _active[0]._protected:
        yield


def _exit_when_unprotected(stop: Stop, status: int) -> None:
    with stop._protected:  # a checkpoint being written ends first
        os._exit(status)


@contextlib.contextmanager
def stop_on_signals(
    *,
    grace: float | None = GRACE_S,
    on_signal: Callable[[int], None] | None = None,
    install: bool = True,
) -> Iterator[Stop]:
    """Turn SIGINT/SIGTERM into a :class:`Stop` flag for the duration of the ``with`` block.

    Args:
        grace: seconds after the first signal before the process exits with ``128 + signum``
            even if the loop never polls again (None: wait forever).
        on_signal: called with the signal number at the first signal, in the main thread, from
            the signal handler (keep it short: e.g. forward the signal to worker processes).
        install: False: no handlers, only the flag (for threads, or when the caller handles
            signals itself).

    Yields:
        The :class:`Stop` to poll. Inside an enclosing ``stop_on_signals``, the outer one's flag
        (the handlers stay the outer ones; ``on_signal`` is still called).
    """
    if _active:  # nested: share the outer flag
        stop = _active[-1]
        if on_signal is not None:
            stop._listeners.append(on_signal)
        try:
            yield stop
        finally:
            if on_signal is not None:
                stop._listeners.remove(on_signal)
        return

    stop = Stop()
    if on_signal is not None:
        stop._listeners.append(on_signal)
    timer: list[threading.Timer] = []
    can_install = install and threading.current_thread() is threading.main_thread()
    previous: dict[int, Any] = {}

    def first(signum: int, frame: Any) -> None:
        for s in SIGNALS:  # a second signal takes the default action: killed at once
            signal.signal(s, signal.SIG_DFL)
        if grace is not None:
            t = threading.Timer(grace, _exit_when_unprotected, args=(stop, exit_status(signum)))
            t.daemon = True
            t.start()
            timer.append(t)
        stop.set(signum)

    if can_install:
        previous = {s: signal.getsignal(s) for s in SIGNALS}
        for s in SIGNALS:
            signal.signal(s, first)
    _active.append(stop)
    try:
        yield stop
    finally:
        _active.remove(stop)
        for t in timer:
            t.cancel()
        for s, handler in previous.items():
            signal.signal(s, handler)
