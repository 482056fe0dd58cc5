"""A resume never loses a run's history (issue 72, cases 1–6 and 12).

A resume that finds ``metrics.csv`` damaged, emptied, header only or out of step with the
checkpoint, or the checkpoint missing or unreadable while the history has rows, or a
checkpoint's generator state that is not one, is refused in one line (exit 2) and changes
nothing: every file of the run directory is byte for byte what it was (a SHA-256 of each,
before and after). ``finetune`` and ``train`` share the rule (the run layer's).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from eligibility.cli import main
from test_faults_envs import _run

LM = ["--d-model", "8", "--n-head", "2", "--n-layer", "1", "--group-size", "2",
      "--prompts-per-batch", "2", "--max-completion-length", "3", "--eval-every", "0",
      "--no-progress"]  # fmt: skip
RL = ["--total-steps", "200", "--episodes-per-batch", "2", "--num-envs", "2", "--eval-every", "0",
      "--hidden", "4", "--no-progress"]  # fmt: skip


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


def _edited(run: Path, key: str, edit: Callable[[object], object]) -> None:
    """The checkpoint's metadata ``key`` (JSON) replaced by ``edit`` of it, its tensors kept."""
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    path = run / "checkpoint.safetensors"
    with safe_open(str(path), framework="numpy") as f:
        meta = dict(f.metadata())
    meta[key] = json.dumps(edit(json.loads(meta[key])))
    save_file(load_file(str(path)), str(path), metadata=meta)


def _counter(run: Path, updates: int) -> None:
    """The checkpoint's ``updates`` counter edited."""
    _edited(run, "counters", lambda counters: {**counters, "updates": updates})


def _rngs(run: Path, rngs: object) -> None:
    """The checkpoint's saved generator states replaced by ``rngs``."""
    _edited(run, "rngs", lambda _: rngs)


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


@pytest.fixture(scope="module")
def rl_run(tmp_path_factory) -> Path:
    """A short ``train`` run of CartPole (several updates), checkpointed at its end."""
    run = tmp_path_factory.mktemp("rl") / "run"
    rc, err = _run(["train", "CartPole-v1", *RL, "--out", str(run)])
    assert rc == 0, err
    return run


RESUMES = {"finetune": ["--max-updates", "5"], "train": ["--total-steps", "400", "--no-progress"]}
"""What each command's resume asks for: more updates (an option a resume may change)."""

CASES = [("finetune", d) for d in sorted(DAMAGE)]
CASES += [("train", d) for d in ("a middle row 2,abc,def", "header only", "checkpoint deleted",
                                 "updates -1")]  # fmt: skip
"""``train`` stands on the same run layer: the same refusals (a few of them, held)."""


@pytest.mark.parametrize(("command", "damage"), CASES)
def test_a_resume_that_would_lose_history_is_one_line_and_changes_nothing(
    request, tmp_path, command, damage
):
    run = tmp_path / "run"
    made = request.getfixturevalue({"finetune": "lm_run", "train": "rl_run"}[command])
    shutil.copytree(made, run, symlinks=True)
    spoil, says = DAMAGE[damage]
    spoil(run)
    before = _hashes(run)
    rc, err = _run([command, "--resume", str(run), *RESUMES[command]])
    lines = [ln for ln in err.strip().splitlines() if "warning:" not in ln]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert re.search(says, lines[0]), lines[0]
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
