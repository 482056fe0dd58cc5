"""learning_curve.png drawn by the run's painter process (``eligibility.runs.painter``).

Truth: the picture drawn in this process by :func:`plot_curves` from the same metrics.csv
(byte for byte), ``sys.modules`` of a fresh interpreter, and the kernel's view of a process
group (``killpg(pgid, 0)``) after the command has gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _run_dir import KEEP, _Config, write_six_rows
from eligibility import runs
from eligibility.reinforce.logs import SCHEMA as TRAIN
from eligibility.runs.painter import Painter


def _write_run(path: Path, painter: Painter | object | None = KEEP) -> None:
    write_six_rows(path, TRAIN, painter)


def _gone(pgid: int, timeout: float) -> bool:
    """Whether no process is left in the group ``pgid`` within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _ended(pid: int) -> bool:
    """Whether process ``pid`` has exited (gone, or a zombie its new parent has not reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z"


def test_a_run_started_without_matplotlib_has_its_curve_drawn_by_the_painter(tmp_path):
    """The command's own process never imports matplotlib, and the painter's picture is the
    one this process draws from the run's metrics.csv."""
    probe = (
        "import sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from _run_dir import write_six_rows\n"  # not test_painter: pytest's import is 0.2 s
        "from eligibility.reinforce.logs import SCHEMA\n"
        "write_six_rows(sys.argv[2], SCHEMA)\n"
        "print('matplotlib' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-c", probe, str(Path(__file__).parent), str(run)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert out.stdout.split() == ["False"], out.stderr
    runs.plot_curves([run], tmp_path / "here.png", TRAIN)
    assert (run / "learning_curve.png").read_bytes() == (tmp_path / "here.png").read_bytes()


@pytest.mark.curve
def test_a_painter_that_fails_leaves_the_drawing_to_the_run(tmp_path):
    failing = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.readline(); sys.exit(3)"],
        stdin=subprocess.PIPE,
    )
    _write_run(tmp_path / "run", Painter(failing))
    assert failing.returncode == 3
    runs.plot_curves([tmp_path / "run"], tmp_path / "here.png", TRAIN)
    want = (tmp_path / "here.png").read_bytes()
    assert (tmp_path / "run" / "learning_curve.png").read_bytes() == want


def test_a_run_closed_without_a_curve_stops_its_painter(tmp_path):
    with runs.RunDir.open(_Config(str(tmp_path / "run")), TRAIN, frozenset({"seed"})) as run:
        painter = run._painter = Painter.spawn()
        assert painter is not None and painter.proc.poll() is None
    assert painter.proc.returncode is not None  # reaped by close(), not left running
    assert not (tmp_path / "run" / "learning_curve.png").exists()
    assert runs.read_metrics(tmp_path / "run") == []


@pytest.mark.parametrize("how", ["ctrl-c", pytest.param("kill -9", marks=pytest.mark.slow)])
def test_the_painter_never_outlives_the_command(tmp_path, how):
    """Ctrl-C reaches the whole process group: the run checkpoints and exits 130 and leaves no
    process behind; a run killed outright leaves its painter only until its import is done."""
    from test_faults import _endless_run, _wait_for_rows

    proc = _endless_run(tmp_path / "run", start_new_session=True)  # a terminal's own group
    _wait_for_rows(tmp_path / "run", 2, proc)
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)
        assert proc.returncode == 130
        assert _gone(proc.pid, 5), "a process of the command's group outlived it"
    else:
        proc.kill()
        proc.communicate(timeout=60)
        assert _gone(proc.pid, 30), "the painter outlived its run"


def test_no_painter_where_matplotlib_is_in_or_one_core_is_all(monkeypatch):
    import matplotlib  # noqa: F401  (the suite's conftest has it in already)

    assert Painter.start() is None
    monkeypatch.delitem(sys.modules, "matplotlib")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert Painter.start() is None
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    painter = Painter.start()
    assert painter is not None
    painter.stop()
    monkeypatch.delattr(os, "sched_getaffinity")  # macOS, Windows: the machine's count
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert Painter.start() is None


def test_a_painter_started_early_is_the_one_the_run_takes(monkeypatch):
    """:func:`start_early` (finetune's, before it loads the model) starts the painter that the
    run's :meth:`Painter.start` then takes, once: the next run gets one of its own."""
    from eligibility.runs import painter as module

    monkeypatch.delitem(sys.modules, "matplotlib")  # (the suite's conftest has it in)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(module, "_early", None)
    module.start_early()
    early = module._early
    assert early is not None and early.proc.poll() is None
    module.start_early()  # one painter, however often asked
    assert module._early is early
    taken = Painter.start()
    try:
        assert taken is early and module._early is None
        other = Painter.start()
        assert other is not None and other.proc.pid != early.proc.pid
        other.stop()
    finally:
        early.stop()


def test_a_painter_started_early_and_never_taken_ends_with_its_command(tmp_path):
    """A command that started a painter and ended before opening a run (a refusal, say)
    leaves it only until its import is done: its stdin closes, and it exits undrawn."""
    probe = (
        "import sys\n"
        "from eligibility.runs import painter\n"
        "painter.start_early()\n"
        "print(painter._early.proc.pid if painter._early else '', flush=True)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                         check=True, cwd=tmp_path)  # fmt: skip
    if not out.stdout.strip():
        pytest.skip("no painter on a machine of one core")
    pid, deadline = int(out.stdout), time.monotonic() + 30
    while not _ended(pid):
        if time.monotonic() > deadline:
            pytest.fail("the painter outlived the command that started it")
        time.sleep(0.05)
    assert list(tmp_path.iterdir()) == []


_WRITING = """
import signal, sys, time
from eligibility._io import atomic_open
from eligibility.runs import painter
signal.signal(signal.SIGTERM, painter._unwind)
with atomic_open(sys.argv[1]) as f:
    f.write(b"half a picture")
    print("writing", flush=True)
    time.sleep(60)
"""


def test_a_painter_stopped_while_it_writes_leaves_no_temporary_file(tmp_path):
    """The run failing while its painter writes learning_curve.png (a disk full at the last
    checkpoint): :meth:`Painter.stop` ends it by SIGTERM, which the painter turns into an
    exception, and the atomic writer removes its temporary file; a kill would leave it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITING, str(tmp_path / "learning_curve.png")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == b"writing\n"
    assert [p.name for p in tmp_path.iterdir()] != []  # the temporary file, mid-write
    Painter(proc).stop()
    assert proc.returncode == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []


def test_the_painter_unwinds_on_sigterm_and_ignores_sigint(monkeypatch):
    """What the painter's process installs before it draws (its main, with no job given)."""
    import io

    from eligibility.runs import painter

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    try:
        assert painter.main() == 0
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is painter._unwind
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])
