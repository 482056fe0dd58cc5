"""``--report-to``: the run's scalars, under TensorBoard's names and steps, in each tracker.

Truth: what each tracker's own reader gives back (TensorBoard's ``EventAccumulator``, wandb's
``wandb leet inspect --json`` of its offline log), held against metrics.csv, the run's record.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from eligibility.runs import trackers

RUN = ["finetune", "repeat", "--max-updates", "3", "--d-model", "8", "--n-head", "2"]
RUN += ["--group-size", "2", "--prompts-per-batch", "1", "--checkpoint-every", "2"]
RUN += ["--eval-every", "2", "--no-progress"]


@pytest.mark.parametrize(
    "given, names",
    [
        ("none", ()),
        (["none"], ()),
        ("wandb,tensorboard", ("wandb", "tensorboard")),
        (["wandb,tensorboard"], ("wandb", "tensorboard")),  # --report-to wandb,tensorboard
        (["wandb", "wandb"], ("wandb",)),
        (["TrackIO"], ("trackio",)),
    ],
)
def test_report_to_takes_trls_values(given, names):
    assert trackers.names(given) == names


@pytest.mark.parametrize("given", ["all", ["comet_ml"], ["none", "comet_ml"]])
def test_a_tracker_it_does_not_know_is_refused_by_name(given):
    with pytest.raises(ValueError, match=r"report_to \(--report-to\) must be tensorboard"):
        trackers.names(given)


def test_a_tracker_not_installed_is_refused_before_the_run_starts(tmp_path, capsys, monkeypatch):
    """Named and with its install line, before the run directory is made."""
    import importlib.util

    from eligibility.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "wandb" else real(n, *a)
    )
    assert main([*RUN, "--report-to", "wandb", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "--report-to wandb: wandb is not installed" in err and "eligibility[wandb]" in err
    assert not (tmp_path / "run").exists()


@pytest.fixture
def no_wandb_login(monkeypatch, tmp_path):
    """No wandb credentials anywhere wandb looks: environment, settings, ``.netrc``.

    wandb keeps the settings it first read (offline or not) for the process: they are let go
    before and after, so that this test and the next read their own environment.
    """
    wandb = pytest.importorskip("wandb")  # the `wandb` extra; without it: a refusal, above
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HOME", "WANDB_CONFIG_DIR", "WANDB_DIR"):
        monkeypatch.setenv(name, str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    wandb.teardown()
    yield
    wandb.teardown()


@pytest.mark.parametrize(
    ("argv", "key"),
    [
        (["--report-to", "wandb"], None),
        (["--report-to", "wandb,tensorboard"], "x" * 3),  # a key wandb refuses: its reason
        (["--config", "recipe.yaml"], None),  # report_to: wandb in a TRL recipe
    ],
)
def test_wandb_without_a_login_is_refused_before_the_run_starts(
    tmp_path, capsys, monkeypatch, no_wandb_login, argv, key
):
    """wandb's UsageError traceback came at the first checkpoint, the run's files written."""
    from eligibility.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipe.yaml").write_text("report_to: wandb\n")
    if key is not None:
        monkeypatch.setenv("WANDB_API_KEY", key)
    assert main([*RUN, *argv, "--out", str(tmp_path / "run")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("elig")]
    assert len(err) == 1 and err[0].startswith("eligibility finetune: error: --report-to wandb")
    assert "wandb login" in err[0] and "WANDB_MODE=offline" in err[0]
    assert ("API key must have" in err[0]) == (key is not None), err
    assert not (tmp_path / "run").exists()


def test_wandb_offline_needs_no_login(monkeypatch, no_wandb_login):
    """``WANDB_MODE=offline`` keeps the run on disk: nothing to log in to, nothing refused."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    trackers.check_installed(("wandb", "tensorboard"))


@pytest.mark.slow  # a run of finetune
def test_report_to_none_writes_no_events(tmp_path):
    from eligibility.cli import main

    assert main([*RUN, "--report-to", "none", "--out", str(tmp_path / "run")]) == 0
    assert not list((tmp_path / "run").glob("events.out.tfevents.*"))


def _csv(run: Path) -> list[dict[str, str]]:
    from eligibility.runs import read_metrics

    return read_metrics(run)


def _tensorboard(run: Path) -> dict[int, dict[str, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run))
    acc.Reload()
    out: dict[int, dict[str, float]] = {}
    for tag in acc.Tags()["scalars"]:
        for e in acc.Scalars(tag):
            out.setdefault(e.step, {})[tag] = e.value
    return out


def _wandb(run: Path, log: Path | None = None) -> dict[int, dict[str, float]]:
    """The history rows of the run's offline log, as wandb's own reader prints them."""
    if log is None:
        (log,) = run.glob("wandb/offline-run-*/run-*.wandb")
    wandb = shutil.which("wandb", path=str(Path(sys.executable).parent))
    done = subprocess.run(
        [wandb, "leet", "inspect", "--json", str(log)], capture_output=True, text=True, check=True
    )
    out: dict[int, dict[str, float]] = {}
    for line in done.stdout.splitlines():
        record = json.loads(line)
        if record.get("type") == "history":
            item = record["history"]["item"]
            out[item["_step"]] = {k: v for k, v in item.items() if not k.startswith("_")}
    return out


@pytest.mark.slow  # wandb starts its service process (seconds)
def test_wandb_offline_gets_the_scalars_tensorboard_gets(tmp_path, monkeypatch):
    """The same tags, steps and values as TensorBoard's events (float32 there), and as
    metrics.csv; the run's id is kept for a resume."""
    pytest.importorskip("wandb")
    from eligibility.cli import main
    from eligibility.lm.metrics import SCHEMA

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "run"
    assert main([*RUN, "--report-to", "wandb", "tensorboard", "--out", str(run)]) == 0
    board, logged = _tensorboard(run), _wandb(run)
    assert sorted(logged) == sorted(board) == [int(r[SCHEMA.steps]) for r in _csv(run)]
    for step, row in board.items():
        assert set(logged[step]) == set(row), step
        for tag, value in row.items():
            assert math.isclose(logged[step][tag], value, rel_tol=1e-6, abs_tol=1e-7), tag
    column = SCHEMA.tags["charts/mean_reward"]
    assert [logged[s]["charts/mean_reward"] for s in sorted(logged)] == [
        float(r[column]) for r in _csv(run)
    ]
    ids = json.loads((run / trackers.IDS).read_text())
    (log,) = run.glob("wandb/offline-run-*/run-*.wandb")
    assert log.name == f"run-{ids['wandb']}.wandb"


@pytest.mark.slow  # trackio's client and database
def test_trackio_gets_the_scalars_tensorboard_gets(tmp_path, monkeypatch, capsys):
    """The same tags, steps and values as TensorBoard's events, read back from trackio's local
    database by its own storage class; its lines stay off stdout (the result's)."""
    pytest.importorskip("trackio")
    from trackio.sqlite_storage import SQLiteStorage

    from eligibility.cli import main

    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    monkeypatch.setenv("TRACKIO_PROJECT", "edges")
    run = tmp_path / "run"
    assert main([*RUN, "--report-to", "trackio", "tensorboard", "--out", str(run)]) == 0
    assert capsys.readouterr().out.count("\n") == 1  # the result's line alone
    board = _tensorboard(run)
    rows = SQLiteStorage.get_logs(project="edges", run="run")
    logged = {r["step"]: {k: v for k, v in r.items() if "/" in k} for r in rows}
    assert sorted(logged) == sorted(board)
    for step, row in board.items():
        assert set(logged[step]) == set(row), step
        for tag, value in row.items():
            assert math.isclose(logged[step][tag], value, rel_tol=1e-6, abs_tol=1e-7), tag


@pytest.mark.slow  # wandb starts its service process twice
def test_a_resume_continues_the_wandb_run_without_a_step_twice(tmp_path, monkeypatch):
    """Stopped after update 2 and resumed to 4: one run id, each update's step logged once."""
    pytest.importorskip("wandb")
    from eligibility.cli import main
    from eligibility.lm.metrics import SCHEMA

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "run"
    first = [*RUN, "--report-to", "wandb", "--out", str(run), "--checkpoint-every", "1"]
    first[first.index("--max-updates") + 1] = "2"
    assert main(first) == 0
    assert main(["finetune", "--resume", str(run), "--max-updates", "4"]) == 0
    logs = sorted(run.glob("wandb/offline-run-*/run-*.wandb"))
    run_id = json.loads((run / trackers.IDS).read_text())["wandb"]
    assert len(logs) == 2 and {log.name for log in logs} == {f"run-{run_id}.wandb"}
    steps = []
    for log in logs:
        steps += sorted(_wandb(run, log))
    assert steps == [int(r[SCHEMA.steps]) for r in _csv(run)] and len(steps) == 4


def _table_run(path: Path, report_to: tuple[str, ...]) -> None:
    """A run directory that logs one row and one table at step 20, then checkpoints."""
    import dataclasses

    import numpy as np

    from _run_dir import _Config, _row
    from eligibility.lm.metrics import SCHEMA
    from eligibility.runs import RunDir

    @dataclasses.dataclass
    class Config(_Config):
        report_to: tuple[str, ...] = ()

    rng = np.random.default_rng(0)
    with RunDir.open(Config(str(path), report_to=report_to), SCHEMA, frozenset({"seed"})) as run:
        run.table(20, "completions", ["step", "prompt", "reward"], TABLE)
        run.log(_row(SCHEMA, 2))
        assert not list(path.glob("events.out.tfevents.*"))  # held until the checkpoint
        snapshot = {"counters": {"updates": 2}, "rngs": [rng.bit_generator.state]}
        run.checkpoint({"policy.w": np.ones(3)}, snapshot)


TABLE = [[20, "Reach 3 | now", 1.5], [20, "Reach 4", 0.0]]


def test_tensorboard_gets_a_table_as_markdown_text_at_its_step(tmp_path):
    """75 B6: the episodes' table (TRL's log_completions) in TensorBoard's text plugin, read
    back by TensorBoard's own reader, at the step of the update it was logged with."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _table_run(tmp_path / "run", ("tensorboard",))
    acc = EventAccumulator(str(tmp_path / "run"), size_guidance={"tensors": 0})
    acc.Reload()
    (event,) = acc.Tensors("completions")
    text = event.tensor_proto.string_val[0].decode()
    assert event.step == 20 and text.splitlines() == [
        "| step | prompt | reward |",
        "| --- | --- | --- |",
        "| 20 | Reach 3 \\| now | 1.5 |",
        "| 20 | Reach 4 | 0.0 |",
    ]
    assert acc.Scalars("charts/mean_reward")[0].step == 20


@pytest.mark.slow  # wandb starts its service process (seconds)
def test_wandb_offline_gets_a_table(tmp_path, monkeypatch):
    """75 B6: a wandb.Table under the table's name at its step, in the run's offline log."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    _table_run(tmp_path / "run", ("wandb",))
    logged = _wandb(tmp_path / "run")
    assert sorted(logged) == [20]
    table = {k.split(".", 1)[1]: v for k, v in logged[20].items() if k.startswith("completions.")}
    assert table["_type"] == "table-file" and table["nrows"] == 2 and table["ncols"] == 3
    (files,) = (tmp_path / "run").glob("wandb/offline-run-*/files")
    saved = json.loads((files / table["path"]).read_text())
    assert saved["columns"] == ["step", "prompt", "reward"] and saved["data"] == TABLE


@pytest.mark.slow  # trackio's client and database
def test_trackio_gets_a_table(tmp_path, monkeypatch):
    """75 B6: a trackio.Table under the table's name at its step, in trackio's database."""
    pytest.importorskip("trackio")
    from trackio.sqlite_storage import SQLiteStorage

    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    project = f"tables-{uuid.uuid4().hex}"  # trackio may keep the directory it first read
    monkeypatch.setenv("TRACKIO_PROJECT", project)
    _table_run(tmp_path / "run", ("trackio",))
    rows = SQLiteStorage.get_logs(project=project, run="run")
    (row,) = [r for r in rows if "completions" in r]
    assert row["step"] == 20
    table = row["completions"]
    assert table["_type"] == "trackio.table"
    assert [[r[c] for c in ("step", "prompt", "reward")] for r in table["_value"]] == TABLE


_FULL = """
import os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from _capped import refuse_writes_past
from eligibility.runs.trackers import TensorBoard
refuse_writes_past(4096)
board = TensorBoard(Path(sys.argv[1]))
try:
    for step in range(10_000):
        board.log(step, {"charts/mean_return": float(step)}, 0.0)
        board.flush()
except OSError as err:
    print("raised here:", err.errno, flush=True)
    os._exit(0)
os._exit(1)
"""


def test_a_failed_event_write_is_raised_in_the_run_and_not_printed_by_the_writers_thread(
    tmp_path,
):
    """A disk that refuses TensorBoard's events (the kernel's EFBIG past an RLIMIT_FSIZE cap):
    the run's thread gets the OSError (its one line), and the writer's thread prints no
    traceback of its own on stderr. A fresh interpreter capped as ``tests/_capped.py`` caps
    its forks, not such a fork: pytest's own ``threading.excepthook`` would hide the print."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _FULL, str(tmp_path), str(Path(__file__).parent)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == "raised here: 27\n", done.stderr
    assert done.stderr == ""
