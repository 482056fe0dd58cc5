"""learning_curve.png drawn by a process of its own, started with the run.

Importing matplotlib takes about 0.3 s, a quarter of a short ``eligibility train CartPole-v1``
(``bench/classic/cli_wall.py``). A run's process does not import it: at the run's start it starts a
painter, ``python -m eligibility.runs.painter``, which imports matplotlib on the other core
while the run trains, then waits on its stdin for one line (JSON: the run directory, the file to
write and the plotted columns of the run's schema), draws with :func:`plot_curves` and exits.
A command can start it before its run's directory is opened (:func:`start_early`), so that the
import runs while the command itself imports on one core, not beside the run's own threads.

The painter writes nothing to the terminal, ignores SIGINT (Ctrl-C reaches the whole process
group; the run decides what a Ctrl-C does) and never outlives its run: the run waits for the
drawing, or kills the painter on its way out; a run killed outright closes the painter's stdin,
which ends it without a drawing. A painter that fails leaves the drawing to the run itself, so
the curve and its errors are the same either way.

Where matplotlib is already imported (a notebook, a sweep's worker, the test suite), or the
process has a single core, there is nothing to hide: :meth:`Painter.start` gives None and the
run draws in its own process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from eligibility.runs.plot import PLOTTED, plot_curves

DRAW_TIMEOUT_S = 120.0
"""How long a run waits for its painter's drawing before drawing it itself."""

STOP_TIMEOUT_S = 5.0
"""How long :meth:`Painter.stop` waits for the painter to unwind before it kills it."""


class Painter:
    """The painter process of one run (see the module docstring)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    @classmethod
    def start(cls) -> Painter | None:
        """A painter importing matplotlib, or None: the run then draws itself.

        None where matplotlib is imported already, or where this process has one core (the
        import then waits its turn either way, and the painter's start-up would come on top).
        The painter :func:`start_early` started, where it is still there to take.
        """
        global _early
        early, _early = _early, None
        if early is not None and early.proc.poll() is None:
            return early
        if "matplotlib" in sys.modules or _cores() < 2:
            return None
        return cls.spawn()

    @classmethod
    def spawn(cls) -> Painter | None:
        """A painter, whatever this process has imported (None: no process could be started)."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", __name__],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
            )
        except OSError:
            return None
        return cls(proc)

    def draw(self, run: Path, out: Path, schema: Any) -> bool:
        """Have ``out`` drawn from ``run``'s metrics.csv; True when the painter wrote it.

        False (nothing written by it, the painter gone) when it failed or took longer than
        :data:`DRAW_TIMEOUT_S`: the caller then draws it itself.
        """
        return self.send(run, out, schema) and self.drawn()

    def send(self, run: Path, out: Path, schema: Any) -> bool:
        """Hand the painter its job and go on while it draws (:meth:`drawn` waits for it).

        Returns:
            Whether the painter took it (False: it is gone, and stopped).
        """
        job = {"run": str(run), "out": str(out), "schema": {k: getattr(schema, k) for k in PLOTTED}}
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.close()
        except OSError:
            self.stop()
            return False
        return True

    def drawn(self) -> bool:
        """Wait for the job :meth:`send` gave; True when the painter wrote it (see :meth:`draw`)."""
        try:
            code = self.proc.wait(DRAW_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.stop()
            return False
        return code == 0

    def stop(self) -> None:
        """End the painter without a drawing (it holds nothing of the run's).

        SIGTERM first: the painter unwinds, and a drawing it had begun (the run failed while it
        drew, a disk full) leaves no temporary file behind. A painter that does not end within
        :data:`STOP_TIMEOUT_S` is killed.
        """
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait()
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:  # a pipe whose reader has gone
                pass


_early: Painter | None = None
"""The painter :func:`start_early` started, until :meth:`Painter.start` takes it."""


def start_early() -> None:
    """Start the painter of the run this process is about to open (:meth:`Painter.start`).

    ``finetune`` calls it first, before it imports torch: the painter's import of matplotlib
    (about 0.5 s of a core) then runs beside that import, which keeps one core busy, instead
    of beside the first update, whose threads it stalled (SmolLM2-135M's first sampling took
    2.15 s against 1.65 s without a painter, 2 threads on 2 cores). A painter no run takes
    ends with this process: its stdin closes, and it exits without a drawing.
    """
    global _early
    if _early is None:
        _early = Painter.start()


def _cores() -> int:
    """The cores this process may run on (all of the machine's where the OS cannot say)."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux; not macOS or Windows
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def _unwind(signum: int, frame: Any) -> None:
    """SIGTERM (:meth:`Painter.stop`): leave by an exception, as a Ctrl-C would.

    A file being written is then removed by its atomic writer; a kill would leave it behind.
    """
    raise SystemExit(128 + signum)


def main() -> int:
    """The painter: import matplotlib, then draw the one job read from stdin (if any)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _unwind)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # the slow part, done while the run loads or trains

    line = sys.stdin.readline()
    if not line.strip():  # the run ended without a curve, or its process is gone
        return 0
    job = json.loads(line)
    plot_curves([Path(job["run"])], Path(job["out"]), SimpleNamespace(**job["schema"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
