"""Where a run's scalars go besides metrics.csv: TensorBoard, Weights & Biases, trackio.

``--report-to`` (TRL's ``report_to``) names them; each gets the same scalars under the same
names (the trainer's :class:`~eligibility.runs.Schema` tags: ``charts/…``, ``losses/…``) and
the same steps, through its own client, behind one small interface (:class:`Tracker`):

- ``tensorboard``: ``events.out.tfevents.*`` in the run directory (TensorBoard's own writer);
- ``wandb``: ``wandb.init`` (project ``$WANDB_PROJECT``, else ``eligibility``; the run's
  directory name; the config), its files under ``DIR/wandb``; ``WANDB_MODE=offline`` keeps the
  run on disk for ``wandb sync``. A resume continues the same wandb run (its id is kept in
  ``DIR/trackers.json``);
- ``trackio``: ``trackio.init`` (project ``$TRACKIO_PROJECT``, else ``eligibility``; the run's
  directory name), its local database (``$TRACKIO_DIR``), a resume continuing the run of the
  same name.

A run hands a tracker the rows of its updates at each checkpoint, not as they come: a resume
replays the updates after the last checkpoint, and no tracker may see those steps twice.

Besides scalars, a run shows tables (``finetune``'s ``completions``: a sample of whole episodes
at each evaluation, as TRL's ``log_completions``): a ``wandb.Table`` and a ``trackio.Table``
under the table's name, and in TensorBoard a text summary of that tag (its text plugin shows
it as a Markdown table).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any, Protocol

from eligibility._io import atomic_write_text, json_dumps, json_loads
from eligibility._output import cut

TRACKERS = ("tensorboard", "wandb", "trackio")
"""The values of ``--report-to`` (with ``none``: no tracker)."""

EXTRA = {"wandb": "wandb", "trackio": "trackio"}
"""The extra that installs each tracker's client (TensorBoard's comes with ``train``)."""

IDS = "trackers.json"
"""The run directory's record of its trackers' run ids (a resume continues the same runs)."""


def names(value: Any) -> tuple[str, ...]:
    """``--report-to``'s value as tracker names: ``none`` (alone) is none; commas allowed.

    Raises:
        ValueError: a name that is not one of :data:`TRACKERS` or ``none``, or ``none`` beside
            trackers.
    """
    if isinstance(value, str):
        value = [value]
    words = (w for v in value for w in str(v).replace(",", " ").split())  # --report-to a,b too
    out = tuple(dict.fromkeys(w.lower() for w in words))
    if out == ("none",):
        return ()
    bad = [n for n in out if n not in (*TRACKERS, "none")]
    if bad:
        raise ValueError(
            f"report_to (--report-to) must be {', '.join(TRACKERS)} or none, got "
            f"{cut(', '.join(map(repr, bad)), 400)}"
        )
    if "none" in out:  # transformers' report_to too: "none" is the whole value or no tracker
        others = cut(", ".join(n for n in out if n != "none"), 400)
        raise ValueError(
            f"report_to (--report-to) none with {others}: none means no tracker and stands "
            f"alone; give none, or {others} without it"
        )
    return out


class Tracker(Protocol):
    """A place a run's scalars go: one row of tagged scalars per step, in step order."""

    def log(self, step: int, scalars: dict[str, float], wall_time: float) -> None:
        """Record ``scalars`` (tag → value, finite) at ``step``, measured at ``wall_time``."""

    def table(
        self, step: int, name: str, columns: list[str], rows: list[list[Any]], wall_time: float
    ) -> None:
        """Record the table ``name`` (``columns``; one list of cells per row) at ``step``."""

    def flush(self) -> None:
        """Make what was logged durable (at each checkpoint)."""

    def close(self) -> None:
        """End this process's writing (the tracker's run may go on at a resume)."""


def _writer_thread_errors_raised_here() -> None:
    """TensorBoard's writer thread's failed write (a full disk) is told once, where it is read.

    The thread keeps the error for the writer's next ``add_event``, ``flush`` or ``close``,
    which raise it in the run's thread (the run's one line), then raises it in its own thread
    too, where Python would print a traceback on stderr. That second telling is dropped; any
    other thread's error is printed as before. Installed once per process.
    """
    import threading

    previous = threading.excepthook
    if getattr(previous, "eligibility_tensorboard", False):
        return

    def hook(args: Any) -> None:
        kept = getattr(args.thread, "exception", None)
        if type(args.thread).__name__ == "_AsyncWriterThread" and kept is args.exc_value:
            return
        previous(args)

    hook.eligibility_tensorboard = True  # type: ignore[attr-defined]
    threading.excepthook = hook


class TensorBoard:
    """``events.out.tfevents.*`` in the run directory, by TensorBoard's own event writer."""

    def __init__(self, run_dir: Path) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        _writer_thread_errors_raised_here()
        self._writer = EventFileWriter(str(run_dir))

    def log(self, step: int, scalars: dict[str, float], wall_time: float) -> None:
        """One event of simple values at ``step``, as TensorBoard's own summary writer writes."""
        from tensorboard.compat.proto import event_pb2, summary_pb2

        values = [summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in scalars.items()]
        event = event_pb2.Event(
            wall_time=wall_time, step=step, summary=summary_pb2.Summary(value=values)
        )
        self._writer.add_event(event)

    def table(
        self, step: int, name: str, columns: list[str], rows: list[list[Any]], wall_time: float
    ) -> None:
        """A text event of tag ``name``: the table in Markdown (TensorBoard's text plugin)."""
        from tensorboard.compat.proto import event_pb2
        from tensorboard.plugins.text.summary_v2 import text_pb

        summary = text_pb(name, markdown_table(columns, rows))
        self._writer.add_event(event_pb2.Event(wall_time=wall_time, step=step, summary=summary))

    def flush(self) -> None:
        """The events written to the file."""
        self._writer.flush()

    def close(self) -> None:
        """The event file closed."""
        self._writer.close()


class _LoggedRun:
    """A client's run that logs each step's row with ``run.log`` (wandb's and trackio's alike).

    A table is the client's own ``Table`` (``wandb.Table``, ``trackio.Table``) under its name.
    """

    CLIENT = ""
    """The client's module (``wandb``, ``trackio``)."""

    _run: Any

    def log(self, step: int, scalars: dict[str, float], wall_time: float) -> None:
        """``run.log(scalars, step=step)``: the run's history at that step."""
        self._run.log(scalars, step=step)

    def table(
        self, step: int, name: str, columns: list[str], rows: list[list[Any]], wall_time: float
    ) -> None:
        """``run.log({name: CLIENT.Table(columns, data)}, step=step)``."""
        table = importlib.import_module(self.CLIENT).Table
        self._run.log({name: table(columns=columns, data=rows)}, step=step)


class WandB(_LoggedRun):
    """A Weights & Biases run (``wandb.init``), continued by id at a resume."""

    CLIENT = "wandb"

    def __init__(self, run_dir: Path, config: dict[str, Any], run_id: str | None) -> None:
        import wandb

        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "eligibility"),
            name=run_dir.name,
            dir=str(run_dir),
            config=config,
            id=run_id,
            resume="allow",
        )
        self.id = str(self._run.id)

    def flush(self) -> None:
        """wandb streams each row to its own service process, which writes it."""

    def close(self) -> None:
        """``run.finish()``: what was logged written out (a resume continues the run)."""
        self._run.finish()


class Trackio(_LoggedRun):
    """A trackio run (``trackio.init``), continued by name at a resume.

    trackio prints its progress to stdout, which holds a command's result here: its lines go
    to stderr. Its own CPU and GPU metrics stay off: the run's scalars are the schema's.
    """

    CLIENT = "trackio"

    def __init__(self, run_dir: Path, config: dict[str, Any]) -> None:
        import trackio

        with _to_stderr():
            self._run = trackio.init(
                project=os.environ.get("TRACKIO_PROJECT", "eligibility"),
                name=run_dir.name,
                config=config,
                resume="allow",
                auto_log_cpu=False,
                auto_log_gpu=False,
            )

    def flush(self) -> None:
        """trackio sends each row to its local database as it comes."""

    def close(self) -> None:
        """``run.finish()``: what was logged written out (a resume continues the run)."""
        with _to_stderr():
            self._run.finish()


def _to_stderr() -> Any:
    import contextlib
    import sys

    return contextlib.redirect_stdout(sys.stderr)


def check_installed(report_to: tuple[str, ...]) -> None:
    """Before a run starts: each tracker named beyond TensorBoard can be imported (and log in).

    TensorBoard is the default: without it installed (the ``train`` extra) it is left out, as
    it always was; wandb and trackio are asked for by name.

    wandb is asked for its credentials too (:func:`_wandb_logged_in`).

    Raises:
        ValueError: naming the missing client and its install line; wandb without a login.
    """
    for name in report_to:
        if name != "tensorboard" and importlib.util.find_spec(name) is None:
            raise ValueError(
                f"--report-to {name}: {name} is not installed; install it with "
                f"pip install 'eligibility[{EXTRA[name]}]'"
            )
    if "wandb" in report_to:
        _wandb_logged_in()


OFFLINE = ("offline", "disabled", "dryrun")
"""The values of ``WANDB_MODE`` with which ``wandb.init`` needs no login."""


def _wandb_logged_in() -> None:
    """wandb finds credentials (or runs offline), asked without a prompt and without the network.

    ``wandb.init`` asks for them at the first checkpoint, with a traceback where no terminal
    can answer: this asks ``wandb.login(prompt=False, verify=False)`` (the key from
    ``WANDB_API_KEY``, wandb's settings or ``~/.netrc``) before anything is written.

    Raises:
        ValueError: no credentials, or ones of a wrong form, with how to log in or go offline.
    """
    if os.environ.get("WANDB_MODE", "").strip().lower() in OFFLINE:
        return
    import wandb

    how = (
        "log in with `wandb login` (or set WANDB_API_KEY), or keep the run on disk with "
        "WANDB_MODE=offline (`wandb sync` uploads it later)"
    )
    try:
        with _to_stderr():
            found = wandb.login(prompt=False, verify=False)  # prompt=: wandb 0.31, the extra's
    except wandb.errors.Error as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0].rstrip(".")
        raise ValueError(f"--report-to wandb: {first}: {how}") from None
    if not found:
        raise ValueError(f"--report-to wandb: wandb has no API key here: {how}")


def open_trackers(
    report_to: tuple[str, ...], run_dir: Path, config: dict[str, Any]
) -> list[Tracker]:
    """The trackers ``report_to`` names, opened for the run in ``run_dir`` (resumed there)."""
    ids_path = run_dir / IDS
    ids = json_loads(ids_path.read_text()) if ids_path.is_file() else {}
    out: list[Tracker] = []
    kept: dict[str, str] = {}
    for name in report_to:
        if name == "tensorboard":
            if importlib.util.find_spec("tensorboard") is not None:
                out.append(TensorBoard(run_dir))
        elif name == "wandb":
            run = WandB(run_dir, config, ids.get("wandb"))
            kept["wandb"] = run.id
            out.append(run)
        else:
            out.append(Trackio(run_dir, config))
    if kept and kept != ids:
        atomic_write_text(ids_path, json_dumps(kept) + "\n")
    return out


def scalars(row: dict[str, Any], tags: dict[str, str]) -> dict[str, float]:
    """A metrics row's finite values under their tags (tag → column), as every tracker logs."""
    import math

    values = {tag: row.get(column) for tag, column in tags.items()}
    return {k: float(v) for k, v in values.items() if v is not None and math.isfinite(v)}


def markdown_table(columns: list[str], rows: list[list[Any]]) -> str:
    """``columns`` and ``rows`` as a Markdown table (a cell's ``|`` escaped, its lines kept)."""

    def cell(v: Any) -> str:
        return str(v).replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>")

    lines = [columns, ["---"] * len(columns), *rows]
    return "\n".join("| " + " | ".join(cell(v) for v in line) + " |" for line in lines)
