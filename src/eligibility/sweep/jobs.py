"""What passes between a sweep and its launchers, shared by both sides without a cycle.

The constants, and the summary of a run that ended without answering for itself.

A job is ``{"config": Config.to_dict(), "resume": bool, "restart": bool, "index": int}`` (and
optionally ``"trainer"``, see :mod:`eligibility.trainers`); its answer is the run's
summary (:func:`eligibility.sweep.launch.run_one`).
"""

from __future__ import annotations

from typing import Any

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
RESULT = "result.json"
"""Written in a run directory when its run has finished (whatever the outcome)."""


STOP_GRACE_S = 10.0
"""After the first SIGINT/SIGTERM, how long a run has to finish its update and checkpoint before
its worker is killed (a second signal kills at once)."""

POLL_S = 0.1
"""How often a launcher looks at the signals received while it waits (seconds)."""


def failed(job: dict[str, Any], error: str, *, interrupted: bool = False) -> dict[str, Any]:
    """The summary of a run that ended without one of its own (its worker died, or was stopped).

    ``interrupted``: stopped by the sweep (its checkpoint resumes it), not failed.
    """
    out = {
        "ok": False,
        "error": error,
        "index": job["index"],
        "seed": job["config"]["seed"],
        "dir": job["config"]["out"],
    }
    return {**out, "interrupted": True} if interrupted else out


__all__ = ["POLL_S", "RESULT", "STOP_GRACE_S", "THREAD_VARS", "failed"]
