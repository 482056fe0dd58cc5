"""The run directory: config, metrics, TensorBoard events, learning curve, checkpoints.

Layout of ``DIR``::

    config.json             the resolved config
    metrics.csv             one row per update (the columns of the trainer's Schema, and those a
                            user's code names as the run goes: Schema.widens)
    events.out.tfevents.*   TensorBoard scalars (charts/…, losses/…)
    learning_curve.png      the batch's mean score vs steps, with a smoothed line
    checkpoint.safetensors  the last checkpoint (weights, optimisers, RNGs, counters)
    .lock                   held (flock) by the process writing the run

Every file that a resume reads is written atomically (a temp file in the same directory, then
``os.replace``), so a run killed at any moment (``kill -9``) leaves the previous version whole;
every file follows the umask (0644 under umask 022), as TensorBoard's events do. A resume
writes nothing until its first row, checkpoint or curve: one that fails before (a damaged
checkpoint, a model that does not fit it) leaves the directory byte for byte as it was.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from eligibility._io import (
    atomic_path,
    atomic_write_bytes,
    json_dumps,
    json_loads,
    os_errors,
    what_is,
)
from eligibility._signals import protected
from eligibility.runs.metrics import csv_line, fmt, parse, read_metrics
from eligibility.runs.painter import Painter
from eligibility.runs.plot import plot_curves
from eligibility.runs.resume import absent
from eligibility.runs.schema import Schema
from eligibility.runs.state import TrainState
from eligibility.runs.trackers import IDS, Tracker, check_installed, open_trackers, scalars

CHECKPOINT = "checkpoint.safetensors"
LOCK = ".lock"
CURVE = "learning_curve.png"
RUN_FILES = (
    "config.json",
    "metrics.csv",
    CHECKPOINT,
    CURVE,
    "events.out.tfevents.*",
    IDS,
    "episodes.jsonl",
    "train_dataset.jsonl",
    "eval_dataset.jsonl",
)
"""What a run writes in its directory (what ``--overwrite`` removes)."""


def _holds_run(path: Path, overwrite: bool | None) -> str:
    """The refusal of a directory that holds a run: the ways out the command offers."""
    replace = " --overwrite to replace it," if overwrite is not None else ""
    return (
        f"{path} already holds a run; pass --resume {path} to continue it,{replace} or another "
        "--out"
    )


def _report_to(config: Any) -> tuple[str, ...]:
    """The trackers a run's config names (``report_to``; a config without one: TensorBoard)."""
    return tuple(getattr(config, "report_to", ("tensorboard",)))


def holds_run(path: Path) -> bool:
    """Whether ``path`` holds a training run (its config or a checkpoint)."""
    return (path / "config.json").exists() or (path / CHECKPOINT).exists()


def check_ready(config: Any, *, resume: bool = False, overwrite: bool | None = None) -> None:
    """What :meth:`RunDir.open` refuses before writing, asked before a command says anything.

    The trackers installed (wandb logged in), and a new run's directory holding no run; a
    command asks this before its notes, so that an error is never preceded by them.

    Raises:
        ValueError: as :meth:`RunDir.open` would.
    """
    check_installed(_report_to(config))
    if config.out is None:  # a run that writes no directory
        return
    path = Path(config.out)
    if not resume and not overwrite and path.is_dir() and holds_run(path):
        raise ValueError(_holds_run(path, overwrite))


def _make_dir(path: Path, overwrite: bool | None) -> None:
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
            raise ValueError(f"--out {path} is {what_is(path)}; give a directory") from None
        if holds_run(path):
            raise ValueError(_holds_run(path, overwrite)) from None
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


def _identity_conflicts(
    saved: dict[str, Any], now: dict[str, Any], identity: frozenset[str]
) -> str:
    """The identity fields whose saved and present values differ, said with both values."""
    differ = [k for k in sorted(identity) if k in saved and k in now and saved[k] != now[k]]
    return ", ".join(f"{k} {saved[k]!r} (checkpoint) vs {now[k]!r} (config.json)" for k in differ)


def _shape_problems(
    expected: dict[str, Any], got: dict[str, Any], weights: tuple[str, ...]
) -> list[str]:
    """The weights (names under ``weights``) missing, unexpected, or of another shape."""

    def shapes(d: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
        shape = d.shape if isinstance(d, Stored) else (lambda k: tuple(np.shape(d[k])))
        return {k: tuple(shape(k)) for k in d if k.split(".")[0] in weights}

    want, have = shapes(expected), shapes(got)
    problems = [f"{k} missing" for k in sorted(set(want) - set(have))]
    problems += [f"unexpected {k}" for k in sorted(set(have) - set(want))]
    problems += [
        f"{k} has shape {have[k]} where the config gives {want[k]}"
        for k in sorted(set(have) & set(want))
        if have[k] != want[k]
    ]
    return problems


class Stored(Mapping[str, Any]):
    """A checkpoint's torch tensors, each read from the file when asked for.

    A restore copies them into the model and optimiser one at a time: the whole checkpoint is
    never in memory beside the model it restores.
    """

    def __init__(self, handle: Any) -> None:
        self._file = handle
        self._keys = list(handle.keys())

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys:
            raise KeyError(key)
        return self._file.get_tensor(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def shape(self, key: str) -> tuple[int, ...]:
        """The stored tensor's shape (read from the file's header, not its data)."""
        return tuple(self._file.get_slice(key).get_shape())


def read_checkpoint(
    run_dir: Path,
    expected: Mapping[str, Any],
    config: dict[str, Any],
    identity: frozenset[str],
    weights: tuple[str, ...] = ("policy", "value"),
    framework: str = "numpy",
) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """The checkpoint's tensors and metadata, checked against the state and config of now.

    Args:
        run_dir: the run directory.
        expected: the state dict of the model built from the config (names → arrays); the
            checkpoint's weights (names under ``weights``) must have its names and shapes (not
            the optimiser's moments, which a fresh torch optimiser does not have yet).
        config: the run's config as a dict (``to_dict()``).
        identity: the config fields that must match the checkpoint's.
        weights: the prefixes of the weights' names.
        framework: ``"numpy"``: a dict of arrays; ``"pt"``: :class:`Stored` torch tensors,
            read one at a time as the restore asks for them.

    Raises:
        ValueError: missing, unreadable (truncated, empty, not safetensors), made by a run of
            another identity, or holding weights of other names or shapes; the message names
            the file and what does not match.
    """
    from safetensors import SafetensorError, safe_open

    path = Path(run_dir) / CHECKPOINT
    if not path.exists():
        raise ValueError(f"no checkpoint in {str(run_dir)!r}: {CHECKPOINT} is missing")
    if not path.is_file():  # a device (a link to /dev/urandom), a directory: never opened
        raise ValueError(
            f"{path} is not a readable checkpoint (not a regular file); the run cannot be "
            "resumed from it: start a new run, or restore the file from a copy"
        )
    try:
        tensors: Mapping[str, Any]
        if framework == "pt":
            handle = safe_open(str(path), framework="pt")
            raw, tensors = handle.metadata() or {}, Stored(handle)
        else:
            with safe_open(str(path), framework="numpy") as f:
                raw = f.metadata() or {}
                tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = {k: json_loads(v) for k, v in raw.items()}
        if missing := {"counters", "rngs", "config"} - set(meta):
            raise KeyError(", ".join(sorted(missing)))
    except (SafetensorError, OSError, KeyError, ValueError) as err:
        raise ValueError(
            f"{path} is not a readable checkpoint ({type(err).__name__}: {err}); the run cannot "
            "be resumed from it: start a new run, or restore the file from a copy"
        ) from None
    saved = meta["config"] if isinstance(meta["config"], dict) else {}
    if pairs := _identity_conflicts(saved, config, identity):
        raise ValueError(
            f"{path} was made by another configuration than {Path(run_dir) / 'config.json'}: "
            f"{pairs}; restore the run's own config.json, or start a new run"
        )
    if problems := _shape_problems(expected, tensors, weights):
        raise ValueError(
            f"{path} does not fit the network its config describes: {'; '.join(problems[:4])}; "
            "restore the run's own config.json, or start a new run (a run trained with your "
            "own torch module= is loaded from Python with that module)"
        )
    return tensors, meta


def _take_dir(path: Path, resume: bool, overwrite: bool | None) -> Any:
    """Lock ``path`` for a new run (made exclusively), a resume, or an overwrite.

    Returns:
        The lock.
    """
    if resume:
        if not (path / "config.json").is_file():
            raise ValueError(f"no training run in {str(path)!r} to resume")
        if (path / CHECKPOINT).exists() and not (path / "metrics.csv").is_file():
            raise ValueError(
                f"{path / 'metrics.csv'} {absent(path / 'metrics.csv')}: {_GONE}; restore the "
                "file from a copy, or start a new run"
            )
        return lock_run_dir(path)
    if overwrite and path.is_dir() and holds_run(path):
        lock = lock_run_dir(path)
        for pattern in RUN_FILES:
            for f in path.glob(pattern):
                f.unlink()
        return lock
    _make_dir(path, overwrite)
    lock = lock_run_dir(path)
    if holds_run(path):  # another process made a run here between mkdir and lock
        lock.close()
        raise ValueError(_holds_run(path, overwrite))
    return lock


_GONE = (
    "the run's history up to its checkpoint (its learning curve, and what a resume's watches "
    "replay) is gone"
)


def _updates(numbers: list[int]) -> str:
    """Update numbers in words: ``no update``, ``update 1``, ``updates 1–3``, ``updates 1, 3``."""
    if not numbers:
        return "no update"
    if len(numbers) == 1:
        return f"update {numbers[0]}"
    if numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"updates {numbers[0]}–{numbers[-1]}"
    shown = ", ".join(map(str, numbers[:6])) + (", …" if len(numbers) > 6 else "")
    return f"updates {shown}"


def read_history(path: Path) -> list[dict[str, str]]:
    """The rows of the metrics file ``path``, every one checked (a resume's history).

    As :func:`~eligibility.runs.read_metrics` reads them, but only the last line may be
    incomplete (a row cut short by a kill while it was appended: dropped); any other row that
    is short, long or holds a cell that is not a number is damage, refused.

    Raises:
        ValueError: the file is not text, has no ``update`` column, or a row is damaged,
            naming the file and the line (what it quotes is bounded).
    """
    import csv

    def damaged(why: str) -> ValueError:
        return ValueError(
            f"{path} {why}: the run's history cannot be read whole, and a resume would lose it; "
            "restore the file from a copy, or start a new run"
        )

    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError:
        raise damaged("is not text (metrics.csv rows)") from None
    if not lines:
        return []
    try:
        table = list(csv.reader(lines))
    except csv.Error as err:  # a field past csv's limit: no row of ours
        raise damaged(f"is not CSV rows ({err})") from None
    header, rows = table[0], table[1:]
    if "update" not in header:
        raise damaged(f"has no `update` column (its first line: {lines[0][:80]!r})")
    out = []
    for i, cells in enumerate(rows):
        complete = len(cells) == len(header) and cells[-1] != ""
        if complete:
            try:
                for c in cells:
                    parse(c)
                int(cells[header.index("update")])
            except ValueError:
                complete = False
        if not complete:
            if i == len(rows) - 1 and len(cells) <= len(header) and _cut_short(lines[i + 1]):
                break  # the last row, cut short by a kill as it was appended
            raise damaged(f"line {i + 2} is damaged ({lines[i + 1][:80]!r})")
        out.append(dict(zip(header, cells, strict=True)))
    return out


_WRITTEN = frozenset("0123456789.,+-eEinfaINFA")
"""The characters of a metrics.csv row as :func:`~eligibility.runs.metrics.fmt` writes it."""


def _cut_short(line: str) -> bool:
    """Whether ``line`` can be the start of a row as written (a kill cut it): our characters only.

    Anything else on the last line (NUL bytes a crash left, text) is damage, not a cut row.
    """
    return set(line) <= _WRITTEN


class RunDir:
    """Writes one run's directory (see the module docstring), in its trainer's :class:`Schema`."""

    def __init__(self, path: Path, config: Any, schema: Schema, identity: frozenset[str]) -> None:
        self.path = path
        self.config = config
        self.schema = schema
        self.identity = identity
        self._trackers: list[Tracker] | None = None  # opened at the first rows to write
        self._csv: Any = None
        self._lock: Any = None
        self._pending: list[Callable[[Tracker], None]] = []  # since the last checkpoint
        self._painter: Painter | None = None  # draws learning_curve.png (runs/painter.py)
        self._sent = False  # the painter has its job (draw_now), the run's rows all written
        self._kept: int | None = None  # a resume's restored update, its rows kept at the commit
        self._taken = True  # config.json and metrics.csv are the run's (a resume: at its commit)
        self._fresh = self._made = False  # a new run (not a resume); its directory made here
        self._logged = False  # a row was written

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, kind: object, err: BaseException | None, tb: object) -> None:
        """Close the run (:meth:`close`); a new one ended early by bad input leaves nothing.

        A ``ValueError`` before the run's first row: :meth:`_discard`, and the directory
        removed where this run made it.
        """
        discard = isinstance(err, ValueError) and self._fresh and not self._logged
        if discard:
            self._discard()
        self.close()
        if discard and self._made:
            with contextlib.suppress(OSError):  # not empty: a file not the run's stays, and it
                self.path.rmdir()

    def _discard(self) -> None:
        """Remove the files of a new run that logged no row (nothing of the user's is in them).

        So that bad input met at the run's first batch (a reward function that raises on it, a
        step that goes non-finite) leaves no run directory, as one refused before it was made.
        """
        for pattern in (*RUN_FILES, LOCK):
            for f in self.path.glob(pattern):
                f.unlink(missing_ok=True)

    @classmethod
    def open(
        cls,
        config: Any,
        schema: Schema,
        identity: frozenset[str],
        *,
        resume: bool = False,
        overwrite: bool | None = None,
    ) -> RunDir:
        """Create ``config.out`` exclusively (or, with ``resume``, reopen it) and lock it.

        A new run never writes into a directory that holds a run (unless ``overwrite``: the
        run's files are removed first), and two processes never write one directory: the second
        fails at once (see :func:`lock_run_dir`).

        Args:
            config: the run's config (``out`` and ``to_dict()``).
            schema: the metrics the run logs.
            identity: the config fields a checkpoint must agree on.
            resume: reopen the run in ``config.out``.
            overwrite: replace the run in ``config.out``; None: the command has no
                ``--overwrite`` (its refusal does not offer one).

        Raises:
            ValueError: the path is unusable, holds a run (without ``resume`` or ``overwrite``),
                or is locked.
        """
        assert config.out is not None
        path = Path(config.out)
        check_installed(_report_to(config))
        made = not path.exists()
        lock = _take_dir(path, resume, overwrite)
        run = cls(path, config, schema, identity)
        run._lock, run._taken, run._fresh, run._made = lock, False, not resume, made
        try:
            if not resume:  # a new run's files now; a resume's at its first write
                atomic_write_bytes(path / "metrics.csv", _header(schema))
                run._commit()
        except BaseException:
            lock.close()
            raise
        run._painter = Painter.start()
        return run

    def _commit(self) -> None:
        """Write the config of now and the rows a resume keeps: the directory becomes this run's.

        Deferred to a resume's first write (a row, a checkpoint, the curve), so that a resume
        that fails before it leaves the directory as it was.
        """
        if self._taken:
            return
        atomic_write_bytes(self.path / "config.json", _config_json(self.config))
        if self._kept is not None:  # the rows after the checkpoint are replayed: dropped
            rows = [r for r in read_metrics(self.path) if int(r["update"]) <= self._kept]
            if self.schema.widens:  # the columns the run had made on its way, kept
                self.schema = self.schema.widened(k for r in rows[:1] for k in r)
            self._rewrite(rows)
        self._csv = open(self.path / "metrics.csv", "a", newline="")
        self._taken = True

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        """metrics.csv as the header of :attr:`schema` and ``rows`` (cells as written), atomically.

        A column a row lacks is an empty cell in it.
        """
        lines = [csv_line(self.schema.columns)]
        lines += [csv_line(r.get(c, "") for c in self.schema.columns) for r in rows]
        atomic_write_bytes(self.path / "metrics.csv", "".join(lines).encode())

    def _widen(self, row: dict[str, Any]) -> None:
        """Where the schema widens: ``row``'s keys it lacks become columns (and tags).

        metrics.csv is written again whole with the wider header, every earlier row kept with
        an empty cell in each new column (atomically: a kill leaves the old file or the new).
        """
        schema = self.schema.widened(row) if self.schema.widens else self.schema
        if schema is self.schema:
            return
        self._csv.close()
        rows = read_metrics(self.path)
        self.schema = schema
        self._rewrite(rows)
        self._csv = open(self.path / "metrics.csv", "a", newline="")

    def log(self, row: dict[str, Any]) -> None:
        """Append a metrics.csv row; the trackers get its scalars at the next checkpoint.

        A key of ``row`` that is not a column, where the schema widens, is one from now on:
        the header is widened and the earlier rows kept (:meth:`_widen`).
        """
        self._commit()
        self._logged = True
        self._widen(row)
        self._csv.write(csv_line(fmt(row.get(c)) for c in self.schema.columns))
        self._csv.flush()
        if _report_to(self.config):
            # Held until the next checkpoint: a resume replays the updates after a checkpoint,
            # and no tracker must see those steps twice.
            step, values, now = (
                int(row[self.schema.steps]),
                scalars(row, self.schema.tags),
                time.time(),
            )
            self._pending.append(lambda t: t.log(step, values, now))

    def table(self, step: int, name: str, columns: list[str], rows: list[list[Any]]) -> None:
        """The trackers get the table ``name`` at ``step`` with the next checkpoint's rows.

        (Held as the rows are: a resume replays what came after the last checkpoint.)
        """
        if _report_to(self.config):
            now = time.time()
            self._pending.append(lambda t: t.table(step, name, columns, rows, now))

    def checkpoint(
        self,
        state: dict[str, Any],
        snapshot: Mapping[str, Any],
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Write ``checkpoint.safetensors`` atomically: ``state``'s arrays, the rest metadata.

        ``state``: NumPy arrays, or torch tensors (on any device), which are streamed to the
        file from their own memory: a model's checkpoint never holds a second copy of it.
        ``snapshot``: the run's counters and RNG states (``TrainState.snapshot``). ``extra``:
        more JSON metadata (read back by :func:`read_checkpoint`). The write is
        :func:`~eligibility._signals.protected`: a stop's grace deadline waits for it.
        """
        meta = {
            "counters": json_dumps(snapshot["counters"], indent=None),
            "rngs": json_dumps(snapshot["rngs"], indent=None),
            "config": json_dumps(self.config.to_dict(), indent=None),
            **{k: json_dumps(v, indent=None) for k, v in (extra or {}).items()},
        }
        self._commit()
        with protected():
            _save_tensors(self.path / CHECKPOINT, state, meta)
        self._csv.flush()
        if self._pending:
            if self._trackers is None:
                report_to = _report_to(self.config)
                self._trackers = open_trackers(report_to, self.path, self.config.to_dict())
            for tracker in self._trackers:
                for logged in self._pending:
                    logged(tracker)
                tracker.flush()
        self._pending.clear()

    def restore(
        self,
        expected: Mapping[str, Any],
        state: TrainState,
        weights: tuple[str, ...] = ("policy", "value"),
        framework: str = "numpy",
    ) -> Mapping[str, Any] | None:
        """Read the last checkpoint and the rows up to it into ``state`` (its ``load_state_dict``).

        Nothing is written: metrics.csv loses the rows after the checkpoint (a resumed run
        replays them) at the run's first write. A run that stopped before its first update
        has nothing to restore: it starts from scratch (a warning says so). History is never
        lost: where the checkpoint and metrics.csv do not tell one story (a damaged row, the
        rows up to the checkpoint's update not all there, a checkpoint missing while rows
        are), the resume is refused and ``state`` is as it was.

        Args:
            expected: the state dict of the freshly built model (see :func:`read_checkpoint`).
            state: the run's state, loaded in place.
            weights: the prefixes of the weights' names in the state.
            framework: how the tensors come back (see :func:`read_checkpoint`).

        Returns:
            The checkpoint's tensors (None: no checkpoint).

        Raises:
            ValueError: the checkpoint or metrics.csv is unreadable, of another run, or the two
                disagree (naming the file and what).
        """
        metrics, checkpoint = self.path / "metrics.csv", self.path / CHECKPOINT
        rows = read_history(metrics) if metrics.is_file() else []
        if not checkpoint.exists():
            if rows:
                raise ValueError(
                    f"{checkpoint} is missing while {metrics} holds "
                    f"{_updates([int(r['update']) for r in rows])}: the run cannot go on from "
                    "its history; restore the checkpoint from a copy, or start a new run"
                )
            warnings.warn(
                f"{self.path} has no checkpoint (the run stopped before its first): starting it "
                "from scratch",
                RuntimeWarning,
                stacklevel=2,
            )
            self._kept = 0
            return None
        config = self.config.to_dict()
        tensors, meta = read_checkpoint(
            self.path, expected, config, self.identity, weights, framework
        )
        updates = meta["counters"].get("updates") if isinstance(meta["counters"], dict) else None
        if not isinstance(updates, int) or isinstance(updates, bool) or updates < 0:
            raise ValueError(
                f"{checkpoint} is not a readable checkpoint (its counter updates is "
                f"{str(updates)[:40]!r}, not a whole number >= 0); restore the file from a "
                "copy, or start a new run"
            )
        kept = [r for r in rows if int(r["update"]) <= updates]
        numbers = [int(r["update"]) for r in kept]
        if len(numbers) != updates or numbers != list(range(1, len(numbers) + 1)):
            raise ValueError(
                f"{metrics} holds {_updates(numbers)} where {checkpoint} holds update "
                f"{updates}: {_GONE} or out of step with it; restore both files from a copy, or "
                "start a new run"
            )
        saved = {**meta, "history": [{k: parse(v) for k, v in r.items()} for r in kept]}
        try:
            state.load_state_dict(saved)
        except ValueError as err:
            raise ValueError(
                f"{checkpoint} does not fit this run: {err}; restore the file from a copy, or "
                "start a new run"
            ) from None
        self._kept = updates
        return tensors

    def draw_now(self, history: list[dict[str, Any]]) -> None:
        """Have the painter start learning_curve.png now: its last row is written.

        The run's last writes (a checkpoint, the exported model) go on while it draws on the
        other core; :meth:`finish` waits for the drawing (or draws it itself).
        """
        if history and self._painter is not None and not self._sent:
            self._commit()
            self._csv.flush()
            self._sent = self._painter.send(self.path, self.path / CURVE, self.schema)

    def finish(self, history: list[dict[str, Any]]) -> None:
        """Draw learning_curve.png (by the run's painter, else here); close, release the lock."""
        try:
            painter, self._painter = self._painter, None
            if history:
                self._commit()
                self._csv.flush()
                if self._sent and painter is not None:
                    drawn = painter.drawn()
                else:
                    drawn = painter is not None and painter.draw(
                        self.path, self.path / CURVE, self.schema
                    )
                if not drawn:
                    plot_curves([self.path], self.path / CURVE, self.schema)
        finally:
            if painter is not None:
                painter.stop()
            self.close()

    def close(self) -> None:
        """Close the writers, stop a painter that has not drawn, release the lock.

        TensorBoard events after the last checkpoint are dropped.
        """
        if self._painter is not None:
            self._painter.stop()
            self._painter = None
        if self._csv is not None and not self._csv.closed:
            self._csv.close()
        for tracker in self._trackers or []:
            tracker.close()
        self._trackers = None
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
            self._lock = None


def _save_tensors(path: Path, state: dict[str, Any], meta: dict[str, str]) -> None:
    """``state`` as a safetensors file at ``path``, atomically; torch tensors without a copy."""
    if any(type(v).__module__.startswith("torch") for v in state.values()):
        from safetensors.torch import save_file

        tensors = {k: v.detach().contiguous() for k, v in state.items()}
        with atomic_path(path) as tmp, os_errors(path):
            save_file(tensors, tmp, metadata=meta)
        return
    from safetensors.numpy import save

    arrays = {k: np.ascontiguousarray(v) for k, v in state.items()}
    atomic_write_bytes(path, save(arrays, metadata=meta))


def _config_json(config: Any) -> bytes:
    return (json_dumps(config.to_dict()) + "\n").encode()


def _header(schema: Schema) -> bytes:
    return csv_line(schema.columns).encode()
