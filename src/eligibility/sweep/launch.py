"""Running a sweep's runs: one ordinary run directory each, on a local pool or on Ray.

Each run is :func:`run_one` in a process of its own with one BLAS/OpenMP/torch thread (the
local launcher's worker processes, :mod:`eligibility.sweep.pool`; Ray's tasks ask for
``num_cpus=1``). Seeding is
per run (the run's ``Config.seed``), never per worker, so a run gives the same numbers on
either launcher and at any ``--jobs``. The result comes back by value; the run directory is
written where the run runs, which on a real Ray cluster means ``--out`` must be storage that
every node and the driver share.

This module imports nothing heavy at the top: a spawned worker imports it first.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from typing import Any

from eligibility._isolate import describe_error
from eligibility.sweep.jobs import POLL_S, RESULT, STOP_GRACE_S, THREAD_VARS, failed
from eligibility.sweep.pool import run_local

_STEPS = ("steps", "total_steps")
"""``train``'s bound: its ``total_steps`` bounds its steps (``env_steps``)."""


def run_one(job: dict[str, Any], stopped: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """Train (or resume) one run of the sweep and summarise it; never raises.

    Args:
        job: ``{"config": Config.to_dict(), "resume": bool, "restart": bool, "index": int}``
            and optionally ``"trainer"`` (a key of :data:`eligibility.trainers.TRAINERS`).
        stopped: polled after each update (through ``train``'s callback); once it returns
            True the run stops after the update in progress, checkpointed.

    Returns:
        The run's summary (see :func:`summarise`): ``ok`` False and ``error`` set when the run
        failed; ``interrupted`` True (and ``ok`` False) when it was stopped before its end, in
        which case its directory holds a checkpoint to resume.
    """
    for var in THREAD_VARS:
        os.environ[var] = "1"
    # Every run draws its curve: matplotlib once per worker, in it, and no painter per run.
    import matplotlib  # noqa: F401

    from eligibility._io import atomic_write_json
    from eligibility._output import forward_warnings
    from eligibility._signals import Interrupted
    from eligibility.trainers import DEFAULT, TRAINERS

    trainer = TRAINERS[job.get("trainer", DEFAULT)]
    config = trainer.load("config").from_dict(job["config"])
    if getattr(config, "backend", None) == "torch":  # numpy runs never import torch
        import torch

        torch.set_num_threads(1)
    base = {"index": job["index"], "seed": config.seed, "dir": config.out}
    stop = {"ok": False, "error": None, "interrupted": True}
    if stopped():
        return {**stop, **base}
    try:
        if job.get("restart"):
            _clear(config.out)
        with forward_warnings("sweep"):  # a worker's warnings: one plain line each on stderr
            result = trainer.load("train")(
                config,
                resume=config.out if job["resume"] else None,
                callback=lambda row: not stopped(),
            )
        if stopped() and not complete(result, config, trainer.bound):
            return {**stop, **base}
        summary = summarise(result, step_budget(result, config, trainer.bound))
    except Interrupted:
        return {**stop, **base}
    except (Exception, SystemExit) as err:  # the user's env or module: any error is the run's
        summary = {"ok": False, "error": describe_error(err)}
    summary.update(base)
    if summary["ok"]:
        atomic_write_json(os.path.join(config.out, RESULT), summary)
    return summary


def complete(result: Any, config: Any, bound: tuple[str, str] = _STEPS) -> bool:
    """Whether a run that returned has ended on its own: solved, or its budget spent.

    ``bound``: the result's count and the config field that bounds it (its trainer's row).
    """
    count, limit = bound
    return bool(result.solved) or getattr(result, count) >= getattr(config, limit)


def _clear(run_dir: str) -> None:
    """Empty a run directory that stopped before its first checkpoint (nothing to resume).

    Under its lock, so a run still alive there is never touched (that is an error instead).
    """
    from pathlib import Path

    from eligibility.runs import LOCK, lock_run_dir

    lock = lock_run_dir(Path(run_dir))
    try:
        for p in Path(run_dir).iterdir():
            if p.name != LOCK:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    finally:
        lock.close()


def step_budget(result: Any, config: Any, bound: tuple[str, str] = _STEPS) -> int:
    """Where a run that missed its target is censored, in the unit of its ``steps``.

    A budget counted in steps (``train``'s ``total_steps``) is that budget; one counted in
    anything else (``finetune``'s ``max_updates``) censors at the steps the run took, so an
    unsolved run is censored in the same unit as the solved ones.
    """
    count, limit = bound
    return int(getattr(config, limit) if count == "steps" else result.steps)


def summarise(result: Any, budget: int) -> dict[str, Any]:
    """What the sweep keeps of a run: outcome, steps and wall to the target, the curves.

    Read from the run's whole history (a resumed run's ``history`` holds the rows before the
    resume too), so a run stopped and resumed summarises as if it had run at once: its final
    return is its last evaluation's, whichever process ran it.
    """
    rows, s = result.history, result.SCHEMA  # the rows in the words of the run's field
    target = result.target
    evals = [r[s.evaluation] for r in rows if r[s.evaluation] is not None]
    first = next(
        (
            r
            for r in rows
            if target is not None and r[s.evaluation] is not None and r[s.evaluation] >= target
        ),
        None,
    )
    return {
        "ok": True,
        "error": None,
        "solved": bool(result.solved),
        "target_return": target,
        "budget": budget,
        "env_steps": result.steps,
        "wall_s": result.wall_s,
        "final_eval_return": float(evals[-1]) if evals else None,
        "steps_to_target": None if first is None else int(first[s.steps]),
        "curve": {
            "env_steps": [int(r[s.steps]) for r in rows],
            "mean_return": [float(r[s.score]) for r in rows],
            "eval": [
                [int(r[s.steps]), float(r[s.evaluation])]
                for r in rows
                if r[s.evaluation] is not None
            ],
        },
    }


class LocalLauncher:
    """``--launcher local``: worker processes on this machine (:mod:`eligibility.sweep.pool`)."""

    def __init__(self, workers: int, address: str | None = None) -> None:
        if address:
            raise ValueError("--address is for --launcher ray")
        self.workers = workers

    def __enter__(self) -> LocalLauncher:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def run(
        self,
        jobs: list[dict[str, Any]],
        on_result: Callable[[dict[str, Any]], None],
        received: list[int],
        **kw: Any,
    ) -> None:
        """Run ``jobs`` (see :func:`eligibility.sweep.pool.run_local` for ``kw``)."""
        run_local(jobs, min(self.workers, len(jobs)), on_result, received, **kw)


def check_address(address: str, timeout: float = 5.0) -> None:
    """Fail fast (within ``timeout``) when a ``host:port`` Ray address cannot be reached.

    Raises:
        ValueError: naming the address.
    """
    if address in ("auto", "local") or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(
            f"--address {address!r}: give HOST:PORT of a Ray head (e.g. 10.0.0.5:6379)"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise ValueError(
            f"--address {address}: no Ray head answers there within {timeout:g} s "
            f"({err.strerror or err})"
        ) from None


_NEEDS_RAY = (
    "--launcher ray needs Ray, which is not installed; install it with: "
    "pip install 'eligibility[ray]'"
)


class RayLauncher:
    """``--launcher ray``: one Ray task per job (``num_cpus=1``), on a cluster or a local Ray.

    Entering connects: to ``address`` (or ``RAY_ADDRESS``), checked to answer first, or to a
    local Ray started for the sweep, with no dashboard and its temporary files in a directory
    it owns under /tmp (short, for the 107-byte limit of Unix socket paths). Leaving shuts the
    connection down, which stops a local Ray and its workers; on a cluster, Ray ends the tasks
    of a driver that is gone (``kill -9`` included), and a Ray started here shares the
    driver's fate (its processes are bound to it by Ray).

    Raises:
        ValueError: Ray is not installed (the pip command), or the address is unreachable.
    """

    def __init__(self, workers: int, address: str | None = None) -> None:
        self.workers = workers
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self._owned: str | None = None

    def __enter__(self) -> RayLauncher:
        if importlib.util.find_spec("ray") is None:
            raise ValueError(_NEEDS_RAY)
        if self.address:  # before Ray's import (a second or so): an unreachable head fails fast
            check_address(self.address)
        try:
            import ray
        except ImportError:
            raise ValueError(_NEEDS_RAY) from None

        env = {"env_vars": {v: "1" for v in THREAD_VARS}}
        if self.address:
            ray.init(address=self.address, runtime_env=env, log_to_driver=False)
        else:
            self._owned = tempfile.mkdtemp(prefix="elg-ray-", dir="/tmp")
            try:
                ray.init(
                    num_cpus=self.workers,
                    include_dashboard=False,
                    _temp_dir=self._owned,
                    runtime_env=env,
                    log_to_driver=False,
                    configure_logging=False,
                )
            except BaseException:  # a Ctrl-C while Ray starts, too: stop what it started
                ray.shutdown()
                _remove(self._owned)
                raise
        return self

    def __exit__(self, *exc: Any) -> None:
        import ray

        ray.shutdown()
        if self._owned is not None:
            _remove(self._owned)

    def run(
        self,
        jobs: list[dict[str, Any]],
        on_result: Callable[[dict[str, Any]], None],
        received: list[int],
        *,
        on_stop: Callable[[int, int], None] | None = None,
        **_: Any,
    ) -> None:
        """Submit every job; ``on_result`` as each ends.

        A first signal in ``received`` cancels the tasks (a running one gets SIGINT's
        KeyboardInterrupt, which ``train`` takes as its stop request: it checkpoints); a second,
        or :data:`STOP_GRACE_S` later, forces them.
        """
        import ray
        from ray.exceptions import TaskCancelledError

        task = ray.remote(num_cpus=1)(run_one)
        pending = {task.remote(job): job for job in jobs}
        stopping_since: float | None = None
        while pending:
            if received and stopping_since is None:
                stopping_since = time.monotonic()
                if on_stop is not None:
                    on_stop(received[0], len(pending))
                for ref in pending:
                    ray.cancel(ref)
            if stopping_since is not None and (
                len(received) > 1 or time.monotonic() - stopping_since > STOP_GRACE_S
            ):
                for ref, job in pending.items():
                    ray.cancel(ref, force=True)
                    on_result(failed(job, "killed while stopping", interrupted=True))
                return
            done, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            for ref in done:
                job = pending.pop(ref)
                try:
                    on_result(ray.get(ref))
                except TaskCancelledError:
                    on_result(failed(job, "cancelled", interrupted=True))
                except Exception as err:
                    error = f"Ray task failed: {str(err).splitlines()[0]}"
                    on_result(failed(job, error, interrupted=stopping_since is not None))


def _remove(path: str) -> None:
    """Remove Ray's temporary directory; its last processes may still write for a moment."""
    for _ in range(20):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            return
        time.sleep(0.25)


LAUNCHERS = {"local": LocalLauncher, "ray": RayLauncher}
"""The launchers by ``--launcher`` name: ``Launcher(workers, address)``, a context that connects
on entering (before the sweep writes anything), with ``run(jobs, on_result, received, ...)``."""
__all__ = [
    "LAUNCHERS",
    "POLL_S",
    "RESULT",
    "STOP_GRACE_S",
    "THREAD_VARS",
    "LocalLauncher",
    "RayLauncher",
    "check_address",
    "describe_error",
    "failed",
    "run_one",
    "step_budget",
    "summarise",
]
