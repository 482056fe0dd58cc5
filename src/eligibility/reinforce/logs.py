"""The run directory: config, metrics, TensorBoard events, learning curve, checkpoints.

Layout of ``DIR``::

    config.json             the resolved Config
    metrics.csv             one row per update
    events.out.tfevents.*   TensorBoard scalars (charts/…, losses/…)
    learning_curve.png      return vs env steps, with a smoothed line
    checkpoint.safetensors  the last checkpoint (policy, value net, optimisers, RNGs, counters)

Every file that a resume reads is written atomically (a temp file in the same directory, then
``os.replace``), so a run killed at any moment (``kill -9``) leaves the previous version whole.
"""

from __future__ import annotations

import csv
import fcntl
import functools
import importlib.util
import io
import json
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from eligibility._io import atomic_write_bytes, save_figure
from eligibility.reinforce.config import Config

COLUMNS = (
    "update",
    "env_steps",
    "episodes",
    "mean_return",
    "min_return",
    "max_return",
    "loss",
    "entropy",
    "grad_norm",
    "value_loss",
    "eval_return",
    "eval_env_steps",
    "wall_s",
    "steps_per_s",
)
TIMING_COLUMNS = ("wall_s", "steps_per_s")
CHECKPOINT = "checkpoint.safetensors"


@dataclass
class RunResult:
    """What a run did, in the fields every trainer reports and the sweep and the CLI read.

    ``train``'s :class:`~eligibility.reinforce.trainer.TrainResult` and ``finetune``'s
    ``FinetuneResult`` add their own; each documents what the counts are in its world
    (environment steps or completion tokens, returns or accuracies).
    """

    solved: bool
    env_steps: int
    episodes: int
    updates: int
    wall_s: float
    eval_wall_s: float
    final_eval_return: float | None
    out_dir: Path | None
    target_return: float | None = None
    history: list[dict[str, Any]] = field(default_factory=list, repr=False)
    already_solved: bool = False


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def read_metrics(run_dir: str | Path) -> list[dict[str, str]]:
    """The complete rows of ``metrics.csv`` (a row cut short by a kill is dropped)."""
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [r for r in rows if None not in r.values() and r.get("steps_per_s") not in (None, "")]


LOCK = ".lock"
_WEIGHTS = ("policy", "value")
_HOLDS_RUN = (
    "{path} already holds a run; pass --resume {path} to continue it, --overwrite to replace it, "
    "or another --out"
)
RUN_FILES = (
    "config.json",
    "metrics.csv",
    CHECKPOINT,
    "learning_curve.png",
    "events.out.tfevents.*",
)
"""What a run writes in its directory (what ``--overwrite`` removes)."""


@functools.cache
def _has_tensorboard() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


def holds_run(path: Path) -> bool:
    """Whether ``path`` holds a training run (its config or a checkpoint)."""
    return (path / "config.json").exists() or (path / CHECKPOINT).exists()


def _make_dir(path: Path) -> None:
    """Create the run directory ``path`` exclusively (its parents as needed).

    An existing empty directory is accepted; one that holds a run is refused.
    """
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"--out {path}: {parent} is a file, not a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir()
    except FileExistsError:
        if not path.is_dir():
            raise ValueError(f"--out {path} is a file; give a directory") from None
        if holds_run(path):
            raise ValueError(_HOLDS_RUN.format(path=path)) from None
    except PermissionError:
        raise ValueError(f"--out {path}: permission denied; choose a writable place") from None
    except OSError as err:
        raise ValueError(f"--out {path}: cannot create it ({err.strerror})") from None


def lock_run_dir(path: Path) -> Any:
    """Take the run directory's lock, held until the returned file is closed.

    The lock is ``flock`` on ``DIR/.lock``: the kernel releases it when its process ends,
    however it ends (``kill -9`` included), so a stale lock never needs clearing by hand.

    Raises:
        ValueError: another live process holds it, or the directory is not writable.
    """
    try:
        f = open(path / LOCK, "a")
    except OSError as err:
        raise ValueError(
            f"cannot write in {path} ({err.strerror}); choose a writable --out"
        ) from None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise ValueError(
            f"{path} is in use by another eligibility process; wait for it to finish, or use "
            "another --out"
        ) from None
    return f


def _config_json(config: Config) -> bytes:
    return (json.dumps(config.to_dict(), indent=2) + "\n").encode()


def read_checkpoint(
    run_dir: Path, agent: Any, config: Config, identity: frozenset[str] | None = None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The checkpoint's tensors and metadata, checked against ``agent`` and ``config``.

    ``identity``: the config fields that must match (default: the REINFORCE Config's).

    Raises:
        ValueError: missing, unreadable (truncated, empty, not safetensors), made by a run of
            another identity, or holding tensors whose names or shapes the agent does not have;
            the message names the file and what does not match.
    """
    from safetensors import SafetensorError, safe_open

    from eligibility.reinforce.config import IDENTITY

    identity = IDENTITY if identity is None else identity
    path = Path(run_dir) / CHECKPOINT
    if not path.is_file():
        raise ValueError(f"no checkpoint in {str(run_dir)!r}: {CHECKPOINT} is missing")
    try:
        with safe_open(str(path), framework="numpy") as f:
            raw = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = {k: json.loads(raw[k]) for k in ("counters", "rngs", "config")}
    except (SafetensorError, OSError, KeyError, ValueError) as err:
        raise ValueError(
            f"{path} is not a readable checkpoint ({type(err).__name__}: {err}); the run cannot "
            "be resumed from it: start a new run, or restore the file from a copy"
        ) from None
    saved = meta["config"] if isinstance(meta["config"], dict) else {}
    now = config.to_dict()
    differ = [k for k in sorted(identity) if k in saved and saved[k] != now[k]]
    if differ:
        pairs = ", ".join(
            f"{k} {saved[k]!r} (checkpoint) vs {now[k]!r} (config.json)" for k in differ
        )
        raise ValueError(
            f"{path} was made by another configuration than {Path(run_dir) / 'config.json'}: "
            f"{pairs}; restore the run's own config.json, or start a new run"
        )

    # The weights, not the optimiser's moments (which a fresh torch optimiser does not have yet).
    def weights(d: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        return {k: tuple(np.shape(v)) for k, v in d.items() if k.split(".")[0] in _WEIGHTS}

    expected, got = weights(agent.state_dict()), weights(tensors)
    problems = [f"{k} missing" for k in sorted(set(expected) - set(got))]
    problems += [f"unexpected {k}" for k in sorted(set(got) - set(expected))]
    problems += [
        f"{k} has shape {got[k]} where the config gives {expected[k]}"
        for k in sorted(set(got) & set(expected))
        if got[k] != expected[k]
    ]
    if problems:
        raise ValueError(
            f"{path} does not fit the network its config describes: {'; '.join(problems[:4])}; "
            "restore the run's own config.json, or start a new run (a run trained with your "
            "own torch module= is loaded from Python with that module)"
        )
    return tensors, meta


class RunDir:
    """Writes one run's directory (see the module docstring).

    Another kind of run (``eligibility finetune``) subclasses it with its own ``COLUMNS``,
    TensorBoard ``TAGS`` (tag → column) and ``IDENTITY`` (None: the REINFORCE Config's).
    """

    COLUMNS: tuple[str, ...] = COLUMNS
    TAGS: dict[str, str] = {  # noqa: RUF012 (read only)
        "charts/mean_return": "mean_return",
        "charts/eval_return": "eval_return",
        "charts/steps_per_s": "steps_per_s",
        "losses/policy_loss": "loss",
        "losses/entropy": "entropy",
        "losses/grad_norm": "grad_norm",
        "losses/value_loss": "value_loss",
    }
    IDENTITY: frozenset[str] | None = None

    def __init__(self, path: Path, config: Config) -> None:
        self.path = path
        self.config = config
        self._tb: Any = None
        self._csv: Any = None
        self._lock: Any = None
        self._pending: list[Any] = []  # TensorBoard events since the last checkpoint

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def open(cls, config: Config, *, resume: bool = False, overwrite: bool = False) -> RunDir:
        """Create ``config.out`` exclusively (or, with ``resume``, reopen it) and lock it.

        A new run never writes into a directory that holds a run (unless ``overwrite``: the
        run's files are removed first), and two processes never write one directory: the second
        fails at once (see :func:`lock_run_dir`).

        Raises:
            ValueError: the path is unusable, holds a run (without ``resume`` or ``overwrite``),
                or is locked.
        """
        assert config.out is not None
        path = Path(config.out)
        if resume:
            if not (path / "config.json").is_file():
                raise ValueError(f"no training run in {str(path)!r} to resume")
            lock = lock_run_dir(path)
            resume = (path / CHECKPOINT).is_file()  # none yet: the run starts from scratch
        elif overwrite and path.is_dir() and holds_run(path):
            lock = lock_run_dir(path)
            for pattern in RUN_FILES:
                for f in path.glob(pattern):
                    f.unlink()
        else:
            _make_dir(path)
            lock = lock_run_dir(path)
            if holds_run(path):  # another process made a run here between mkdir and lock
                lock.close()
                raise ValueError(_HOLDS_RUN.format(path=path))
        run = cls(path, config)
        run._lock = lock
        try:
            atomic_write_bytes(path / "config.json", _config_json(config))
            if not resume:
                atomic_write_bytes(path / "metrics.csv", (",".join(cls.COLUMNS) + "\n").encode())
            run._open_writers()
        except BaseException:
            lock.close()
            raise
        return run

    def _open_writers(self) -> None:
        self._csv = open(self.path / "metrics.csv", "a", newline="")

    def _tensorboard(self) -> Any:
        """The run's event writer, opened at the first checkpoint that has events to write."""
        if self._tb is None:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter

            self._tb = EventFileWriter(str(self.path))
        return self._tb

    def log(self, row: dict[str, Any]) -> None:
        """Append a metrics.csv row and the TensorBoard scalars of one update."""
        self._csv.write(",".join(_fmt(row.get(c)) for c in self.COLUMNS) + "\n")
        self._csv.flush()
        if _has_tensorboard():
            from tensorboard.compat.proto import event_pb2, summary_pb2

            tags = {tag: row.get(column) for tag, column in self.TAGS.items()}
            values = [
                summary_pb2.Summary.Value(tag=k, simple_value=float(v))
                for k, v in tags.items()
                if v is not None and np.isfinite(v)
            ]
            event = event_pb2.Event(
                wall_time=time.time(),
                step=int(row["env_steps"]),
                summary=summary_pb2.Summary(value=values),
            )
            # Held until the next checkpoint: a resume replays the updates after a checkpoint,
            # and TensorBoard must not see those steps twice.
            self._pending.append(event)

    def checkpoint(
        self,
        agent: Any,
        counters: dict[str, int],
        baseline_state: dict[str, np.ndarray],
        rngs: list[np.random.Generator],
    ) -> None:
        """Write ``checkpoint.safetensors`` atomically: arrays as tensors, the rest as metadata."""
        from safetensors.numpy import save

        tensors = {k: np.ascontiguousarray(v) for k, v in agent.state_dict().items()}
        tensors.update({f"baseline.{k}": np.asarray(v) for k, v in baseline_state.items()})
        meta = {
            "counters": json.dumps(counters),
            "rngs": json.dumps([r.bit_generator.state for r in rngs]),
            "config": json.dumps(self.config.to_dict()),
        }
        atomic_write_bytes(self.path / CHECKPOINT, save(tensors, metadata=meta))
        self._csv.flush()
        if self._pending:
            tb = self._tensorboard()
            for event in self._pending:
                tb.add_event(event)
            tb.flush()
        self._pending.clear()

    def restore(
        self,
        agent: Any,
        counters: dict[str, int],
        baseline_state: dict[str, np.ndarray],
        rngs: list[np.random.Generator],
    ) -> list[dict[str, Any]]:
        """Load the last checkpoint into the given objects; trim metrics.csv to it.

        A run that stopped before its first checkpoint has nothing to restore: it starts from
        scratch (a warning says so).

        Returns:
            The metrics rows up to the checkpoint.
        """
        if not (self.path / CHECKPOINT).is_file():
            warnings.warn(
                f"{self.path} has no checkpoint (the run stopped before its first): starting it "
                "from scratch",
                RuntimeWarning,
                stacklevel=2,
            )
            return self._trim_metrics(0)
        tensors, meta = read_checkpoint(self.path, agent, self.config, self.IDENTITY)
        agent.load_state_dict(tensors)
        baseline_state.clear()
        baseline_state.update(
            {k[len("baseline.") :]: v for k, v in tensors.items() if k.startswith("baseline.")}
        )
        counters.update(meta["counters"])
        for r, state in zip(rngs, meta["rngs"], strict=True):
            r.bit_generator.state = state
        return self._trim_metrics(counters["updates"])

    def _trim_metrics(self, updates: int) -> list[dict[str, Any]]:
        """Drop the rows after update ``updates`` (a resumed run replays them); the rows kept."""
        rows = [r for r in read_metrics(self.path) if int(r["update"]) <= updates]
        self._csv.close()
        buf = io.StringIO()
        buf.write(",".join(self.COLUMNS) + "\n")
        for r in rows:
            buf.write(",".join(r.get(c, "") for c in self.COLUMNS) + "\n")
        atomic_write_bytes(self.path / "metrics.csv", buf.getvalue().encode())
        self._csv = open(self.path / "metrics.csv", "a", newline="")
        return [{k: _parse(v) for k, v in r.items()} for r in rows]

    def finish(self, history: list[dict[str, Any]]) -> None:
        """Draw learning_curve.png, close the writers, release the lock."""
        try:
            if history:
                plot_curves([self.path], self.path / "learning_curve.png")
        finally:
            self.close()

    def close(self) -> None:
        """Close the writers and release the lock (events after the last checkpoint dropped)."""
        if self._csv is not None and not self._csv.closed:
            self._csv.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
            self._lock = None


def _parse(v: str) -> float | None:
    return None if v == "" else float(v)


def plot_curves(run_dirs: list[Path], out: Path, *, smooth: float = 0.9) -> None:
    """Return vs env steps for each run: raw batch means (faint), EMA-smoothed line, evals (dots).

    Raises:
        ValueError: a directory without metrics.csv rows.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for d in run_dirs:
        rows = read_metrics(d)
        if not rows:
            raise ValueError(f"{str(d)!r} has no metrics.csv rows to plot")
        x = np.array([float(r["env_steps"]) for r in rows])
        y = np.array([float(r["mean_return"]) for r in rows])
        s = np.empty_like(y)
        acc = y[0]
        # EMA, the TensorBoard smoothing; a short run (a few dozen updates) gets a lighter one,
        # since a 0.9 average over 20 points lags the data by most of the run.
        w = max(0.0, min(smooth, 1.0 - 10.0 / len(y)))
        for i, v in enumerate(y):
            acc = w * acc + (1 - w) * v
            s[i] = acc
        label = Path(d).name
        (line,) = ax.plot(x, s, label=label)
        ax.plot(x, y, color=line.get_color(), alpha=0.25, linewidth=0.8)
        ev = [(float(r["env_steps"]), float(r["eval_return"])) for r in rows if r["eval_return"]]
        if ev:
            ex, ey = zip(*ev, strict=True)
            ax.plot(ex, ey, "o", color=line.get_color(), markersize=3)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return (batch mean; dots: greedy evaluation)")
    ax.legend(loc="best", fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    try:
        save_figure(fig, out, dpi=100)
    finally:
        plt.close(fig)


class Progress:
    """A rich progress bar when stderr is a terminal, plain log lines when not; always stderr.

    ``name`` labels the bar (the env id, the task); ``total`` is the step budget it fills
    (None: no known end).
    """

    def __init__(self, name: str, total: int | None, counters: dict[str, int]) -> None:
        self._last = 0.0
        self._bar: Any = None
        if sys.stderr.isatty():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            from eligibility._output import stderr_console

            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("steps  {task.fields[info]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                transient=False,
                console=stderr_console(),
            )
            self._task = self._bar.add_task(
                name, total=total, completed=counters["env_steps"], info=""
            )
            self._bar.start()

    def update(self, row: dict[str, Any], recent_mean: float) -> None:
        """Show one update's numbers."""
        ev = "" if row["eval_return"] is None else f"  eval {row['eval_return']:.1f}"
        info = (
            f"ep {row['episodes']}  return {recent_mean:.1f}  {row['steps_per_s']:.0f} steps/s{ev}"
        )
        if self._bar is not None:
            self._bar.update(self._task, completed=row["env_steps"], info=info)
            return
        now = time.perf_counter()
        if row["eval_return"] is not None or now - self._last >= 1.0:
            self._last = now
            print(
                f"update {row['update']}  steps {row['env_steps']}  {info}",
                file=sys.stderr,
                flush=True,
            )

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the bar."""
        if self._bar is not None:
            self._bar.stop()
