"""A resume never loses a run's history (issue 72, cases 1–6 and 12).

A resume that finds ``metrics.csv`` damaged, emptied, header only or out of step with the
checkpoint, or the checkpoint missing or unreadable while the history has rows, or a
checkpoint's generator state that is not one, is refused in one line (exit 2) and changes
nothing: every file of the run directory is byte for byte what it was (a SHA-256 of each,
before and after). ``finetune`` and ``train`` share the rule (the run layer's).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from eligibility.cli import main

LM = ["--d-model", "8", "--n-head", "2", "--n-layer", "1", "--group-size", "2",
      "--prompts-per-batch", "2", "--max-completion-length", "3", "--eval-every", "0",
      "--no-progress"]  # fmt: skip
RL = ["--total-steps", "200", "--episodes-per-batch", "2", "--num-envs", "2", "--eval-every", "0",
      "--hidden", "4", "--no-progress"]  # fmt: skip


def _run(argv: list[str]) -> tuple[int, str]:
    """``eligibility ARGV`` in this process: (exit status, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = int(exc.code or 0)
    return rc, err.getvalue()


def _hashes(run: Path) -> dict[str, str]:
    """Every file under ``run`` (dot files too) → its SHA-256 (a link: where it points)."""
    return {
        str(p.relative_to(run)): os.readlink(p)
        if p.is_symlink()
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def _middle_row(run: Path) -> None:
    lines = _lines(run / "metrics.csv")
    lines[2] = "2,abc,def\n"
    (run / "metrics.csv").write_text("".join(lines))


def _counter(run: Path, updates: int) -> None:
    """The checkpoint's ``updates`` counter edited (its metadata rewritten, tensors kept)."""
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    path = run / "checkpoint.safetensors"
    with safe_open(str(path), framework="numpy") as f:
        meta = dict(f.metadata())
    counters = json.loads(meta["counters"])
    meta["counters"] = json.dumps({**counters, "updates": updates})
    save_file(load_file(str(path)), str(path), metadata=meta)


def _rngs(run: Path, rngs: object) -> None:
    """The checkpoint's saved generator states replaced by ``rngs``."""
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    path = run / "checkpoint.safetensors"
    with safe_open(str(path), framework="numpy") as f:
        meta = dict(f.metadata())
    meta["rngs"] = json.dumps(rngs)
    save_file(load_file(str(path)), str(path), metadata=meta)


def _urandom(run: Path) -> None:
    (run / "checkpoint.safetensors").unlink()
    (run / "checkpoint.safetensors").symlink_to("/dev/urandom")


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "a middle row 2,abc,def": (_middle_row, r"metrics\.csv.* line 3"),
    "metrics.csv emptied": (lambda r: (r / "metrics.csv").write_bytes(b""), r"metrics\.csv"),
    "header only": (lambda r: (r / "metrics.csv").write_text(_lines(r / "metrics.csv")[0]),
                    r"metrics\.csv holds no update"),
    "updates -1": (lambda r: _counter(r, -1), r"checkpoint\.safetensors.*updates"),
    "updates past the last row": (lambda r: _counter(r, 5), r"metrics\.csv.*update 5"),
    "checkpoint deleted": (lambda r: (r / "checkpoint.safetensors").unlink(),
                           r"checkpoint\.safetensors is missing"),
    "checkpoint a link to /dev/urandom": (_urandom, r"checkpoint\.safetensors"),
    "a generator state not a dict": (lambda r: _rngs(r, [1, 2]), r"generator"),
    "too few generator states": (lambda r: _rngs(r, []), r"generator"),
}  # fmt: skip


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory) -> Path:
    """A 3-update ``finetune`` run of the tiny model, checkpointed at its end."""
    run = tmp_path_factory.mktemp("lm") / "run"
    assert main(["finetune", "reverse", *LM, "--max-updates", "3", "--out", str(run)]) == 0
    return run


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_finetune_resume_that_would_lose_history_is_one_line_and_changes_nothing(
    lm_run, tmp_path, damage
):
    run = tmp_path / "run"
    shutil.copytree(lm_run, run, symlinks=True)
    spoil, says = DAMAGE[damage]
    spoil(run)
    before = _hashes(run)
    rc, err = _run(["finetune", "--resume", str(run), "--max-updates", "5"])
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert pytest.importorskip("re").search(says, lines[0]), lines[0]
    assert _hashes(run) == before


@pytest.fixture(scope="module")
def rl_run(tmp_path_factory) -> Path:
    """A short ``train`` run of CartPole (several updates), checkpointed at its end."""
    run = tmp_path_factory.mktemp("rl") / "run"
    rc, err = _run(["train", "CartPole-v1", *RL, "--out", str(run)])
    assert rc == 0, err
    return run


@pytest.mark.parametrize(
    "damage", ["a middle row 2,abc,def", "header only", "checkpoint deleted", "updates -1"]
)
def test_a_train_resume_that_would_lose_history_is_one_line_and_changes_nothing(
    rl_run, tmp_path, damage
):
    """``train`` stands on the same run layer: the same refusals."""
    run = tmp_path / "run"
    shutil.copytree(rl_run, run, symlinks=True)
    spoil, says = DAMAGE[damage]
    spoil(run)
    before = _hashes(run)
    rc, err = _run(["train", "--resume", str(run), "--total-steps", "400", "--no-progress"])
    lines = [ln for ln in err.strip().splitlines() if "warning:" not in ln]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert pytest.importorskip("re").search(says, lines[0]), lines[0]
    assert _hashes(run) == before


def test_a_row_cut_short_by_a_kill_at_the_end_is_still_dropped_and_the_resume_goes_on(
    lm_run, tmp_path
):
    """The one damage a run itself makes (``kill -9`` while appending its last row): the
    resume keeps the rows up to its checkpoint and continues."""
    run = tmp_path / "run"
    shutil.copytree(lm_run, run)
    with open(run / "metrics.csv", "a") as f:
        f.write("4,0.5,")
    assert _run(["finetune", "--resume", str(run), "--max-updates", "4"])[0] == 0
    updates = [ln.split(",")[0] for ln in _lines(run / "metrics.csv")[1:]]
    assert updates == ["1", "2", "3", "4"]


def test_a_run_that_logged_nothing_before_it_stopped_resumes_from_scratch(lm_run, tmp_path):
    """No checkpoint and no row: nothing to lose, the run starts again (a warning says so)."""
    run = tmp_path / "run"
    shutil.copytree(lm_run, run)
    (run / "checkpoint.safetensors").unlink()
    (run / "metrics.csv").write_text(_lines(run / "metrics.csv")[0])
    rc, err = _run(["finetune", "--resume", str(run), "--max-updates", "1"])
    assert rc == 0 and "starting it from scratch" in err, err
    assert len(_lines(run / "metrics.csv")) == 2
