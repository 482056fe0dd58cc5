"""A local sweep worker: ``python -m eligibility.sweep.worker PARENT_PID RESULT_FD [LABEL]``.

Reads jobs (JSON lines) from stdin, runs each with
:func:`eligibility.sweep.launch.run_one`, writes each summary as a JSON line to ``RESULT_FD``,
and exits at the end of stdin. See :mod:`eligibility.sweep.pool` for how it is bound to the
sweep that started it; ``LABEL`` (the sweep directory) only shows in ``ps``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int, grace_s: float) -> None:
    """Get SIGTERM when ``parent`` dies, and end this process ``grace_s`` seconds after that.

    SIGTERM (Linux: ``prctl(PR_SET_PDEATHSIG)``, asked of the kernel, so ``kill -9`` of the
    parent counts too) lets the run in progress checkpoint its update; the watchdog thread then
    ends the process whatever it is doing, and is the whole mechanism elsewhere. A parent that
    died before the request is seen at once (our parent is then no longer ``parent``).
    """
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(128 + signal.SIGTERM)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.25)
        os.kill(os.getpid(), signal.SIGTERM)  # elsewhere than Linux: the stop request
        time.sleep(grace_s)
        os._exit(128 + signal.SIGKILL)

    threading.Thread(target=watch, name="sweep-watchdog", daemon=True).start()


def main(argv: list[str]) -> int:
    """Serve jobs from stdin until it ends or a signal arrives."""
    early: list[int] = []  # a stop that comes while the package is being imported
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda signum, frame: early.append(signum))
    from eligibility._signals import stop_on_signals

    # One stop flag for the whole worker: ``train`` inside shares it (nested contexts do), so
    # a signal between runs, or one that ``train`` has not yet reached, stops the worker too.
    with stop_on_signals(grace=None) as stop:
        if early:
            stop.set(early[0])
        from eligibility._io import json_dumps, json_loads
        from eligibility.sweep.jobs import STOP_GRACE_S
        from eligibility.sweep.launch import run_one

        parent, result_fd = int(argv[0]), int(argv[1])
        die_with_parent(parent, STOP_GRACE_S)
        for line in sys.stdin:
            if stop:
                break
            summary = run_one(json_loads(line), lambda: bool(stop))
            if stop:  # told to stop (by the sweep, or by a signal of its own): no more jobs
                summary["worker_stops"] = True
            text = json_dumps(summary, indent=None, ensure_ascii=False) + "\n"
            data = memoryview(text.encode())
            try:
                while data:
                    data = data[os.write(result_fd, data) :]
            except BrokenPipeError:  # the sweep is gone
                return 128 + signal.SIGTERM
            if stop:
                break
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
