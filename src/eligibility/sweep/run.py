"""``eligibility sweep``: many seeds and settings, in parallel, with interval estimates.

Every (setting, seed) is one ordinary run directory under the sweep's, complete and resumable
like any run; ``sweep.json`` holds the grid, the versions and the machine; ``results.json``
and the pictures hold the aggregate. Re-running the same command on the same ``--out`` resumes:
finished runs are kept, unfinished ones resumed, missing ones started; a failed run is
reported and does not stop the others (and is tried again on the next re-run).

A sweep directory is held by one sweep at a time (``flock`` on ``OUT/.lock``, held by the sweep
and its workers). SIGINT or SIGTERM stops every run at its last completed update, with a
checkpoint, writes results.json for the runs that had ended, and raises
:class:`~eligibility.sweep.signals.SweepInterrupted`; re-running resumes the rest.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import secrets
import signal
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import numpy as np

from eligibility._io import atomic_write_json, read_json, what_is
from eligibility.sweep import stats
from eligibility.sweep.grid import Grid, label, run_name
from eligibility.sweep.jobs import RESULT, STOP_GRACE_S
from eligibility.sweep.launch import LAUNCHERS
from eligibility.sweep.signals import StopSignals, SweepInterrupted
from eligibility.trainers import DEFAULT, TRAINERS, named

SWEEP_JSON = "sweep.json"
RESULTS_JSON = "results.json"
LOCK = ".lock"


@dataclass
class SweepResult:
    """What a sweep produced.

    Attributes:
        out_dir: the sweep directory.
        grid: the settings and seeds.
        runs: every run's summary (``ok`` False for a failed one), in grid order.
        summary: per setting label: success rate and interval estimates (see docs/sweep.md).
        improvement: P(a run of the row setting beats one of the column's), by labels:
            fewer steps to the target when there is one, else a higher final return.
        improvement_by: what it compares (a key of :data:`IMPROVEMENT_TITLES`).
        pictures: the picture files written.
        unfinished: the run directories that have not ended (an interrupted sweep): each holds
            a checkpoint, or nothing yet; the same command resumes them.
    """

    out_dir: Path
    grid: Grid
    runs: list[dict[str, Any]]
    summary: dict[str, dict[str, Any]]
    improvement: dict[str, dict[str, float]] = field(default_factory=dict)
    improvement_by: str = "final_return"
    pictures: list[Path] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[dict[str, Any]]:
        """The runs that failed, with their errors."""
        return [r for r in self.runs if not r.get("ok")]


def default_out(env_id: str) -> Path:
    """A fresh sweep directory name."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in env_id)
    return Path("sweeps") / f"{safe}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("eligibility", "numpy", "torch", "gymnasium", "ray"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_sweep_dir(out: Path, wait_s: float = STOP_GRACE_S + 5) -> Any:
    """Take the sweep directory's lock (``flock`` on ``OUT/.lock``); the file holds our pid.

    The kernel releases the lock when the last process holding it ends (the sweep and the
    workers that inherit it), ``kill -9`` included. A lock held while the sweep that wrote its
    pid is gone means that sweep's workers are still checkpointing: wait for them, up to
    ``wait_s`` seconds.

    Raises:
        ValueError: another sweep runs in ``out`` (its pid named), or its workers outlast
            ``wait_s``.
    """
    f = open(out / LOCK, "a+")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            f.seek(0)
            text = f.read().strip()
            if not text.isdigit() or _alive(int(text)) or time.monotonic() > deadline:
                f.close()
                who = f" (process {text})" if text.isdigit() else ""
                raise ValueError(
                    f"{out} is in use by another sweep{who}; wait for it to finish, or use "
                    "another --out"
                ) from None
            time.sleep(0.1)
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def _open_sweep_dir(out: Path, grid: Grid) -> Any:
    """Create ``out`` and lock it; write its sweep.json, or check the one there.

    A sweep.json of another grid with no run started under it (a sweep stopped before its
    first run) is replaced; one with runs is refused.

    Returns:
        The lock (see :func:`lock_sweep_dir`), held until closed.

    Raises:
        ValueError: ``out`` is a file, holds a single run, a sweep of another grid (the
            difference named), or is locked by another sweep.
    """
    if (out.exists() or out.is_symlink()) and not out.is_dir():
        raise ValueError(f"--out {out} is {what_is(out)}; give a directory")
    if (out / "config.json").exists():
        raise ValueError(f"{out} holds a training run, not a sweep; use another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--out {out}: cannot create it ({err.strerror})") from None
    # Never removed on a refusal: a sweep started at the same moment may have made it (and
    # holds the lock). Everything that can refuse a sweep on its own is checked before this.
    lock = lock_sweep_dir(out)
    try:
        _check_record(out, grid)
    except BaseException:
        lock.close()
        raise
    return lock


def _check_record(out: Path, grid: Grid) -> None:
    path = out / SWEEP_JSON
    if path.is_file():
        try:
            saved = read_json(path)["grid"]
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path} is not a sweep record ({err}); use another --out") from None
        now = grid.to_json()
        diff = [
            f"{k}: {saved.get(k)!r} there, {now.get(k)!r} now"
            for k in {**saved, **now}
            if saved.get(k) != now.get(k)
        ]
        if not diff:
            return
        if any(out.glob("*/seed-*/config.json")):
            raise ValueError(
                f"{out} holds a sweep of another grid ({'; '.join(diff)}); give the same "
                "options to resume it, or another --out"
            )
    record = {
        "grid": grid.to_json(),
        "versions": _versions(),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
        },
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    atomic_write_json(path, record)


def check_settings(configs: list[Any], trainer: str = DEFAULT) -> None:
    """Everything a run can be refused for, checked before any worker starts.

    Two runs never share a directory; then the trainer's own check (its row's ``check``: the
    env made, the task and model built) once for each distinct combination of the fields it
    depends on (its ``check_fields``), so a bad setting is one error now, not one per run later.

    Raises:
        ValueError: naming the setting.
    """
    seen: dict[str, Any] = {}
    for c in configs:
        other = seen.setdefault(str(c.out), c)
        if other is not c:
            raise ValueError(
                f"two settings of the grid would share the run directory {c.out}; give values "
                "that differ in their names"
            )
    row = TRAINERS[trainer]
    check = row.load("check")
    for c in _distinct(configs, row.check_fields):
        check(c)


def _distinct(configs: list[Any], fields: tuple[str, ...]) -> list[Any]:
    """The first config of each distinct combination of ``fields`` (in order)."""
    made: dict[str, Any] = {}
    for c in configs:
        key = json.dumps([getattr(c, f) for f in fields], sort_keys=True, default=str)
        made.setdefault(key, c)
    return list(made.values())


def sweep(
    env_id: str,
    *,
    seeds: int | list[int] = 10,
    sets: list[str] | tuple[str, ...] = (),
    jobs: int | None = None,
    launcher: Literal["local", "ray"] = "local",
    address: str | None = None,
    out: str | os.PathLike[str] | None = None,
    progress: bool = False,
    pictures: bool = True,
    trainer: str = "train",
) -> SweepResult:
    """Train every setting of the grid on every seed, in parallel, and aggregate.

    Args:
        env_id: the Gymnasium env (tuned defaults from ``Config.for_env``), or with
            ``trainer="finetune"`` the task (``FinetuneConfig.task``).
        seeds: N (seeds 0 … N−1) or the list of seeds.
        sets: ``"KEY=V1,V2"`` items (any field of the trainer's config: ``Config``,
            ``FinetuneConfig``; values read as on the command line).
        jobs: parallel runs (default: the number of cores).
        launcher: ``local`` (a process pool) or ``ray``.
        address: a Ray cluster to use (``ray`` only; else ``RAY_ADDRESS``, else a local Ray).
        out: the sweep directory (default ``sweeps/ENV-TIME-RANDOM``); an existing sweep of the
            same grid is resumed.
        progress: print a line per finished run to stderr (runs done, failed, best so far).
        pictures: write curves.png, profile.png and steps_to_solve.png.
        trainer: ``train`` (REINFORCE on an env) or ``finetune`` (an LM on a task); the
            command's name or its key in :data:`~eligibility.trainers.TRAINERS`.

    Returns:
        The :class:`SweepResult`.

    Raises:
        ValueError: a bad grid or option, an unknown env or ``env_kwargs`` it rejects, an
            unusable ``--out`` or one another sweep holds, or Ray missing/unreachable; raised
            before anything is written.
        SweepInterrupted: SIGINT/SIGTERM (in the main thread): every run that had not ended
            was stopped at its last completed update, checkpointed; results.json holds the runs
            that had ended; calling again with the same arguments resumes the rest.
    """
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    key = named(trainer)
    grid = Grid.from_args(env_id, list(sets), seed_list, key)
    if launcher not in LAUNCHERS:
        raise ValueError(f"--launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    if address and launcher != "ray":
        raise ValueError("--address is for --launcher ray")
    workers = (os.cpu_count() or 1) if jobs is None else jobs
    if workers < 1:
        raise ValueError(f"--jobs must be at least 1, got {workers}")
    out_dir = Path(out) if out is not None else default_out(env_id)
    configs = [
        TRAINERS[key].make(
            env_id,
            **setting,
            seed=seed,
            out=str(out_dir / run_name({k: setting[k] for k in grid.varying}, seed)),
            progress=False,
        )
        for _, setting, seed in grid.runs()
    ]
    check_settings(configs, key)  # nothing is written, nor any cluster reached, before this passes

    with LAUNCHERS[launcher](workers, address) as pool, StopSignals(out_dir) as stop:
        lock = _open_sweep_dir(out_dir, grid)
        try:
            return _run(pool, stop, lock, grid, configs, out_dir, workers, progress, pictures)
        finally:
            lock.close()


def _run(
    pool: Any,
    stop: StopSignals,
    lock: Any,
    grid: Grid,
    configs: list[Any],
    out_dir: Path,
    workers: int,
    progress: bool,
    pictures: bool,
) -> SweepResult:
    """Run what is left of the sweep in ``out_dir`` (locked), then aggregate and draw."""
    runs: list[dict[str, Any] | None] = [None] * len(configs)
    todo = []
    for i, config in enumerate(configs):
        run_dir = Path(config.out)  # type: ignore[arg-type]
        runs[i] = _finished(run_dir, i)
        if runs[i] is None:  # resume from its checkpoint; one stopped before its first starts over
            resume = (run_dir / "checkpoint.safetensors").is_file()
            restart = not resume and (run_dir / "config.json").is_file()
            job = {"config": config.to_dict(), "resume": resume, "restart": restart, "index": i}
            todo.append({**job, "trainer": grid.trainer})
    show = _Progress(len(configs), len(configs) - len(todo), grid, workers) if progress else None

    def on_result(result: dict[str, Any]) -> None:
        if result.get("interrupted") and not stop.received:  # `kill` of one worker, not of us
            error = "stopped by a signal sent to its worker; re-run the sweep to resume it"
            result = {**result, "interrupted": False, "error": result.get("error") or error}
        if result.get("interrupted"):
            if show is not None:
                why = f" ({result['error']})" if result.get("error") else ", checkpointed"
                show.note(f"{result.get('dir')}: stopped{why}")
            return
        runs[result["index"]] = result
        if show is not None:
            show.update(result, runs)

    def on_stop(signum: int, busy: int) -> None:
        if show is not None:
            show.note(
                f"{signal.Signals(signum).name}: stopping {busy} run(s) after their update in "
                f"progress (up to {STOP_GRACE_S:g} s; a second signal stops them at once)"
            )

    if todo and not stop.received:
        pool.run(
            todo,
            on_result,
            stop.received,
            keep_fds=[lock.fileno()],
            label=str(out_dir),
            on_stop=on_stop,
        )
    ended = [r for r in runs if r is not None]
    unfinished = [str(c.out) for c, r in zip(configs, runs, strict=True) if r is None]
    if stop.received or unfinished:  # results.json for what ended; no pictures
        result = aggregate(out_dir, grid, ended)
        result.unfinished = unfinished
        _write_results(out_dir, result)
        if not stop.received:
            raise RuntimeError(f"runs left unfinished with no signal received: {unfinished}")
        raise SweepInterrupted(stop.received[0], out_dir, len(ended), len(configs))
    stop.at_once = True  # every run has ended: a signal now only cuts the summary short
    try:
        result = aggregate(out_dir, grid, ended)
        _write_results(out_dir, result)
        if pictures:
            result.pictures = draw(result)
    except SweepInterrupted as err:
        err.finished = err.total = len(configs)
        raise
    return result


def _finished(run_dir: Path, index: int) -> dict[str, Any] | None:
    """The summary of a run that has ended (its result.json), or None: run (or resume) it.

    An unreadable result.json (edited, or from another version) counts as not ended: the run is
    resumed, which ends at once when its budget is spent, and writes a fresh one.
    """
    try:
        summary = read_json(run_dir / RESULT)
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or not summary.get("ok"):
        return None
    return {**summary, "index": index}


def _write_results(out_dir: Path, result: SweepResult) -> None:
    """results.json, atomically: a failed write (a full disk) leaves the old one whole."""
    path = out_dir / RESULTS_JSON
    try:
        atomic_write_json(path, to_json(result))
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(path)) from None


def _groups(grid: Grid, runs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    names = [label({k: s[k] for k in grid.varying}) for s in grid.settings]
    groups: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    per = len(grid.seeds)
    for r in runs:
        if r.get("ok"):
            groups[names[r["index"] // per]].append(r)
    return groups


def aggregate(out_dir: Path, grid: Grid, runs: list[dict[str, Any]]) -> SweepResult:
    """Per setting over seeds: success rate, final return, steps and wall to the target.

    Steps (and wall) to the target of a run that never reached it are its budget (its wall):
    censored there, so those statistics are lower bounds for a setting with such runs.
    """
    groups = _groups(grid, runs)
    summary: dict[str, dict[str, Any]] = {}
    for name, rs in groups.items():
        entry: dict[str, Any] = {"runs": len(rs)}
        if rs:
            has_target = rs[0]["target_return"] is not None
            entry["target_return"] = rs[0]["target_return"]
            entry["success_rate"] = (
                float(np.mean([r["steps_to_target"] is not None for r in rs]))
                if has_target
                else None
            )
            finals = [r["final_eval_return"] for r in rs if r["final_eval_return"] is not None]
            if finals:
                entry["final_return"] = stats.describe(np.array(finals))
            if has_target:
                steps = [
                    r["steps_to_target"] if r["steps_to_target"] is not None else r["budget"]
                    for r in rs
                ]
                entry["steps_to_target"] = stats.describe(np.array(steps, dtype=float))
                entry["censored"] = sum(r["steps_to_target"] is None for r in rs)
                walls = [r["wall_s"] for r in rs]
                entry["wall_s"] = stats.describe(np.array(walls))
        summary[name] = entry
    improvement, by = _improvement(groups)
    ordered = [r for r in runs]
    ordered.sort(key=lambda r: r["index"])
    return SweepResult(out_dir, grid, ordered, summary, improvement, improvement_by=by)


IMPROVEMENT_TITLES = {
    "steps_to_target": "P(row reaches the target in fewer steps than column)",
    "final_return": "P(row's final return > column's)",
}
"""What the probability of improvement compares, and its title in the reports."""


def _improvement(
    groups: dict[str, list[dict[str, Any]]],
) -> tuple[dict[str, dict[str, float]], str]:
    """P(a run of the row beats one of the column), and what it compares.

    With a target, fewer steps to it (never reached: ∞, losing to any run that reached it):
    runs stop at the target, so their final returns differ only by noise. Else the final return.
    """
    if any(rs and rs[0]["target_return"] is not None for rs in groups.values()):
        by, key = (
            "steps_to_target",
            lambda r: -float(np.inf if r["steps_to_target"] is None else r["steps_to_target"]),
        )
    else:
        by, key = "final_return", lambda r: r["final_eval_return"]
    score = {k: [key(r) for r in rs if key(r) is not None] for k, rs in groups.items()}
    improvement = {
        a: {
            b: stats.probability_of_improvement(np.array(fa), np.array(fb))
            for b, fb in score.items()
            if b != a and fb
        }
        for a, fa in score.items()
        if fa
    }
    return improvement, by


def draw(result: SweepResult) -> list[Path]:
    """The three pictures of the sweep directory."""
    from eligibility.sweep import plots

    groups = _groups(result.grid, result.runs)
    words = TRAINERS[result.grid.trainer].load("schema")  # returns and steps, or rewards, tokens
    out = [plots.curves(groups, result.out_dir / "curves.png", words)]
    out.append(plots.profile(groups, result.out_dir / "profile.png", words))
    if any(s.get("steps_to_target") for s in result.summary.values()):
        path = result.out_dir / "steps_to_solve.png"
        out.append(plots.steps_to_solve(result.summary, groups, path, words))
    return out


def to_json(result: SweepResult) -> dict[str, Any]:
    """The results.json of the sweep (the runs without their curves)."""
    runs = [{k: v for k, v in r.items() if k != "curve"} for r in result.runs]
    return {
        "grid": result.grid.to_json(),
        "summary": result.summary,
        "probability_of_improvement": result.improvement,
        "probability_of_improvement_by": result.improvement_by,
        "runs": runs,
        "complete": not result.unfinished,
        "unfinished": result.unfinished,
        "method": (
            "IQM = mean of the middle 50%; 95% percentile-bootstrap intervals over the seeds of "
            f"each setting ({stats.BOOTSTRAP} resamples, NumPy); runs that never reach the "
            "target enter steps-to-target at their budget (censored: a lower bound)"
        ),
    }


class _Progress:
    """One line per finished run on stderr: done, failed, and the best setting so far."""

    def note(self, text: str) -> None:
        """One line of news that is not a finished run."""
        sys.stderr.write(f"[{time.perf_counter() - self.t0:.0f} s] {text}\n")
        sys.stderr.flush()

    def __init__(self, total: int, done: int, grid: Grid, workers: int) -> None:
        self.total, self.done, self.failed, self.grid = total, done, 0, grid
        self.workers = workers
        self.t0 = time.perf_counter()

    def update(self, result: dict[str, Any], runs: list[dict[str, Any] | None]) -> None:
        self.done += 1
        self.failed += not result.get("ok")
        groups = _groups(self.grid, [r for r in runs if r is not None])
        scored = {  # highest IQM final return; ties: fewer median steps to the target
            k: (
                stats.iqm(np.array([r["final_eval_return"] for r in rs])),
                -float(np.median([r["steps_to_target"] or r["budget"] for r in rs])),
            )
            for k, rs in groups.items()
            if rs and all(r["final_eval_return"] is not None for r in rs)
        }
        best = max(scored, key=scored.get) if scored else "—"  # type: ignore[arg-type]
        status = "ok" if result.get("ok") else f"FAILED: {result.get('error')}"
        sys.stderr.write(
            f"[{self.done}/{self.total} done, {min(self.workers, self.total - self.done)} "
            f"running, {self.failed} failed, "
            f"{time.perf_counter() - self.t0:.0f} s] {result.get('dir')}: {status}; best so far: "
            f"{best}\n"
        )
        sys.stderr.flush()


__all__ = ["SweepResult", "aggregate", "default_out", "sweep", "to_json"]
