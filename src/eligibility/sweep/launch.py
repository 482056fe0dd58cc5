"""Running a sweep's runs: one ordinary run directory each, on a local pool or on Ray.

Each run is :func:`run_one` in a process of its own with one BLAS/OpenMP/torch thread (the
pool's processes are started with ``spawn``; Ray's tasks ask for ``num_cpus=1``). Seeding is
per run (the run's ``Config.seed``), never per worker, so a run gives the same numbers on
either launcher and at any ``--jobs``. The result comes back by value; the run directory is
written where the run runs, which on a real Ray cluster means ``--out`` must be storage that
every node and the driver share.

This module imports nothing heavy at the top: a spawned worker imports it first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
RESULT = "result.json"
"""Written in a run directory when its run has finished (whatever the outcome)."""


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """Train (or resume) one run of the sweep and summarise it; never raises.

    Args:
        job: ``{"config": Config.to_dict(), "resume": bool, "index": int}``.

    Returns:
        The run's summary (see :func:`summarise`), with ``ok`` False and ``error`` set when the
        run failed.
    """
    for var in THREAD_VARS:
        os.environ[var] = "1"
    from eligibility._io import atomic_write_json
    from eligibility.reinforce import Config, train

    config = Config.from_dict(job["config"])
    if config.backend == "torch":  # the numpy backend never imports torch (seconds saved)
        import torch

        torch.set_num_threads(1)
    try:
        if job.get("restart"):
            _clear(config.out)
        result = train(config, resume=config.out if job["resume"] else None)
        summary = summarise(result, config)
    except Exception as err:
        summary = {"ok": False, "error": f"{type(err).__name__}: {err}".splitlines()[0]}
    summary.update(index=job["index"], seed=config.seed, dir=config.out)
    if summary["ok"]:
        atomic_write_json(os.path.join(config.out, RESULT), summary)
    return summary


def _clear(run_dir: str) -> None:
    """Empty a run directory that stopped before its first checkpoint (nothing to resume).

    Under its lock, so a run still alive there is never touched (that is an error instead).
    """
    from pathlib import Path

    from eligibility.reinforce.logs import LOCK, lock_run_dir

    lock = lock_run_dir(Path(run_dir))
    try:
        for p in Path(run_dir).iterdir():
            if p.name != LOCK:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    finally:
        lock.close()


def summarise(result: Any, config: Any) -> dict[str, Any]:
    """What the sweep keeps of a run: outcome, steps and wall to the target, the curves."""
    rows = result.history
    target = result.target_return
    first = next(
        (
            r
            for r in rows
            if target is not None and r["eval_return"] is not None and r["eval_return"] >= target
        ),
        None,
    )
    return {
        "ok": True,
        "error": None,
        "solved": bool(result.solved),
        "target_return": target,
        "budget": config.total_steps,
        "env_steps": result.env_steps,
        "wall_s": result.wall_s,
        "final_eval_return": result.final_eval_return,
        "steps_to_target": None if first is None else int(first["env_steps"]),
        "curve": {
            "env_steps": [int(r["env_steps"]) for r in rows],
            "mean_return": [float(r["mean_return"]) for r in rows],
            "eval": [
                [int(r["env_steps"]), float(r["eval_return"])]
                for r in rows
                if r["eval_return"] is not None
            ],
        },
    }


@contextlib.contextmanager
def _one_thread_env() -> Iterator[None]:
    """Children inherit one-thread BLAS/OpenMP settings (set before they import numpy)."""
    old = {v: os.environ.get(v) for v in THREAD_VARS}
    os.environ.update({v: "1" for v in THREAD_VARS})
    try:
        yield
    finally:
        for v, x in old.items():
            if x is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = x


def run_local(
    jobs: list[dict[str, Any]],
    workers: int,
    on_result: Callable[[dict[str, Any]], None],
    *,
    address: str | None = None,
) -> None:
    """Run ``jobs`` on a pool of ``workers`` spawned processes; ``on_result`` as each ends.

    Raises:
        ValueError: an ``address`` (that is for ``--launcher ray``).
    """
    if address:
        raise ValueError("--address is for --launcher ray")
    import concurrent.futures as cf
    import multiprocessing as mp

    with (
        _one_thread_env(),
        cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool,
    ):
        futures = {pool.submit(run_one, job): job for job in jobs}
        for future in cf.as_completed(futures):
            try:
                on_result(future.result())
            except Exception as err:
                job = futures[future]
                on_result(
                    {
                        "ok": False,
                        "error": f"worker died: {err}",
                        "index": job["index"],
                        "seed": job["config"]["seed"],
                        "dir": job["config"]["out"],
                    }
                )


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


def run_ray(
    jobs: list[dict[str, Any]],
    workers: int,
    on_result: Callable[[dict[str, Any]], None],
    *,
    address: str | None = None,
) -> None:
    """One Ray task per job (``num_cpus=1``), on the cluster at ``address`` or a local one.

    Without an address (nor ``RAY_ADDRESS``), a local Ray is started for the sweep, with no
    dashboard and its temporary files in a directory it owns under /tmp (short, for the
    107-byte limit of Unix socket paths), removed afterwards.

    Raises:
        ValueError: Ray is not installed (the pip command), or the address is unreachable.
    """
    try:
        import ray
    except ImportError:
        raise ValueError(
            "--launcher ray needs Ray, which is not installed; install it with: "
            "pip install 'eligibility[ray]'"
        ) from None
    address = address or os.environ.get("RAY_ADDRESS") or None
    env = {"env_vars": {v: "1" for v in THREAD_VARS}}
    owned = None
    if address:
        check_address(address)
        ray.init(address=address, runtime_env=env, log_to_driver=False)
    else:
        owned = tempfile.mkdtemp(prefix="elg-ray-", dir="/tmp")
        ray.init(
            num_cpus=workers,
            include_dashboard=False,
            _temp_dir=owned,
            runtime_env=env,
            log_to_driver=False,
            configure_logging=False,
        )
    try:
        task = ray.remote(num_cpus=1)(run_one)
        pending = {task.remote(job): job for job in jobs}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(done[0])
            try:
                on_result(ray.get(done[0]))
            except Exception as err:
                on_result(
                    {
                        "ok": False,
                        "error": f"Ray task failed: {str(err).splitlines()[0]}",
                        "index": job["index"],
                        "seed": job["config"]["seed"],
                        "dir": job["config"]["out"],
                    }
                )
    finally:
        ray.shutdown()
        if owned is not None:
            _remove(owned)


def _remove(path: str) -> None:
    """Remove Ray's temporary directory; its last processes may still write for a moment."""
    import time

    for _ in range(20):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            return
        time.sleep(0.25)


LAUNCHERS = {"local": run_local, "ray": run_ray}
"""The launchers by ``--launcher`` name."""

__all__ = ["LAUNCHERS", "RESULT", "check_address", "run_local", "run_one", "run_ray", "summarise"]
