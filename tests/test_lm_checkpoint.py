"""`finetune`'s state on disk when it is damaged, and when a rank is lost.

A damaged checkpoint, whole (``checkpoint.safetensors``) or sharded (``--fsdp``: its
``.metadata`` cut short, a shard directory gone, a rank's ``.distcp`` cut short), is one line
and exit 2, and the resume that read it wrote nothing: every file of the run directory is
byte for byte what it was (a SHA-256 of each, before and after). A rank lost mid-run ends the
job with one line naming the update kept and the resume command; a data-parallel run, whose
rank 0 holds the whole state, writes it at the stop. The runs on two ranks are gloo on
loopback under torchrun, and slow.
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from eligibility.cli import main

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
PATH = os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
ENV = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "PYTHONPATH": PATH}

TINY = ["--d-model", "8", "--n-head", "2", "--n-layer", "1", "--group-size", "2",
        "--prompts-per-batch", "2", "--max-completion-length", "3", "--eval-every", "0",
        "--no-progress"]  # fmt: skip


def _hashes(run: Path) -> dict[str, str]:
    """Every file under ``run`` (dot files and shard directories too) → its SHA-256."""
    return {
        str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run.rglob("*"))
        if p.is_file()
    }


def _rows(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    """A one-process run of 2 updates, checkpointed at each; beside it, ``other.safetensors``:
    its checkpoint with every weight of another model's shape (d_model 12, not 8), its metadata
    the run's (the checkpoint a run of that model would write, without training one)."""
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import save_file

    run = tmp_path_factory.mktemp("whole") / "run"
    argv = ["finetune", "repeat", *TINY, "--max-updates", "2", "--checkpoint-every", "1"]
    assert main([*argv, "--out", str(run)]) == 0
    with safe_open(str(run / "checkpoint.safetensors"), framework="numpy") as f:
        meta = f.metadata()
        other = {k: f.get_tensor(k) for k in f.keys()}
    for k, v in other.items():  # every axis of the width 8 is 12 in the other model
        if k.startswith("policy."):
            other[k] = np.zeros(tuple(12 if n == 8 else n for n in v.shape), v.dtype)
    save_file(other, str(run.parent / "other.safetensors"), meta)
    return run


def _truncate(path: Path, keep: int = 100) -> None:
    path.write_bytes(path.read_bytes()[:keep])


SHARD_DAMAGE = {
    ".metadata truncated": lambda run: _truncate(run / "checkpoint.shards-0" / ".metadata"),
    "shard directory deleted": lambda run: shutil.rmtree(run / "checkpoint.shards-0"),
    ".distcp truncated": lambda run: _truncate(max((run / "checkpoint.shards-0").glob("*.distcp"))),
}

WHOLE_DAMAGE = {
    "truncated": lambda run: _truncate(run / "checkpoint.safetensors"),
    "emptied": lambda run: (run / "checkpoint.safetensors").write_bytes(b""),
    "of another model": lambda run: shutil.copy(run.parent / "other.safetensors",
                                                run / "checkpoint.safetensors"),
}  # fmt: skip


@pytest.mark.parametrize("damage", sorted(WHOLE_DAMAGE))
def test_a_damaged_checkpoint_is_one_line_exit_2_and_the_resume_writes_nothing(
    whole, tmp_path, capsys, damage
):
    """The resume asks for more updates and another target (options a resume may change):
    refused, its config.json and metrics.csv are not rewritten with them."""
    run = tmp_path / "run"
    shutil.copytree(whole, run)
    shutil.copy(whole.parent / "other.safetensors", tmp_path / "other.safetensors")
    WHOLE_DAMAGE[damage](run)
    before = _hashes(run)
    capsys.readouterr()
    again = ["finetune", "--resume", str(run), "--max-updates", "5", "--target-accuracy", "0.5"]
    assert main(again) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checkpoint.safetensors" in err[0], err
    assert _hashes(run) == before


def test_a_resume_that_loads_writes_the_run_anew_from_its_first_update(whole, tmp_path):
    """The other side of the deferral: a resume that loads rewrites config.json with its
    budget and drops the rows after the checkpoint at its first update."""
    run = tmp_path / "run"
    shutil.copytree(whole, run)
    rows = _rows(run)
    with open(run / "metrics.csv", "a", newline="") as f:  # a row after the checkpoint
        csv.DictWriter(f, list(rows[0])).writerow({**rows[-1], "update": "3", "loss": "9"})
    assert main(["finetune", "--resume", str(run), "--max-updates", "3"]) == 0
    again = _rows(run)
    assert [r["update"] for r in again] == ["1", "2", "3"] and again[-1]["loss"] != "9"
    assert '"max_updates": 3' in (run / "config.json").read_text()


def test_a_collective_that_lost_its_peer_is_told_from_other_errors():
    """gloo's text when a peer's socket closed (as an FSDP all-gather raises it) is a lost
    rank; a model's own RuntimeError is not."""
    from eligibility.lm.edge.ranks import peer_lost

    gloo = "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer"
    assert peer_lost(RuntimeError(gloo))
    assert not peer_lost(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not peer_lost(ValueError(gloo))


def _lost_peer_case(tmp_path, written):
    """A checkpointer of rank 0 of 2 whose run completed update 3 and checkpointed update 1."""
    from types import SimpleNamespace

    import numpy as np

    from eligibility.lm.checkpointer import Checkpointer
    from eligibility.lm.edge.model import TinyLM
    from eligibility.lm.edge.ranks import Ranks
    from eligibility.lm.learner import Learner
    from eligibility.lm.policy import Policy
    from eligibility.runs import TrainState

    files = SimpleNamespace(checkpoint=lambda tensors, snapshot: written.append(snapshot))
    state = TrainState(counters={"updates": 1}, rngs=[np.random.default_rng(0)])
    state.saved(state.snapshot())
    state.counters["updates"] = 3
    state.mark_completed()
    policy = Policy(TinyLM(5, d_model=4, n_layer=1, n_head=1))
    policy.ranks = Ranks(0, 2)  # its peer's error, as a rank of two sees it (no group formed)
    return Checkpointer(Learner(policy, 1e-3), tmp_path), state, files


@pytest.mark.parametrize("current", [True, False])
@pytest.mark.parametrize("text", ["Connection closed by peer", "Timed out waiting 20000ms"])
def test_a_lost_peer_leaves_the_last_completed_update_and_one_line(tmp_path, text, current):
    """The whole state is this process's: the last completed update is written when the
    weights are still its own (no step since), and the line names the update kept, how the
    peer went and the resume command; a model's own error is handed back as it was. The
    checkpointer writes none of the run's fields: the state it is handed says what is kept."""
    written: list = []
    checkpointer, state, files = _lost_peer_case(tmp_path, written)
    err = RuntimeError(f"[gloo/transport/tcp] {text}")
    line = str(checkpointer.failed(err, state, files, current))
    assert [w["counters"] for w in written] == ([{"updates": 3}] if current else [])
    kept = 3 if current else 1
    assert state.checkpointed == kept
    assert f"update {kept} is kept; resume with: eligibility finetune --resume {tmp_path}" in line
    assert ("it hangs" in line) == text.startswith("Timed out")
    own = RuntimeError("mat1 and mat2 shapes cannot be multiplied")
    assert checkpointer.failed(own, state, files, current) is own


def test_a_lost_peer_names_the_update_the_checkpoint_on_disk_holds(tmp_path):
    """Issue 72 case 29: rank 1 of a data-parallel run (rank 0 writes) said "update 66 is
    kept" where rank 0, killed, had written 65: a rank that does not write takes the update
    from the checkpoint file, not from its own books."""
    from safetensors.numpy import save_file

    written: list = []
    checkpointer, state, _ = _lost_peer_case(tmp_path, written)
    checkpointer.ranks.rank = 1  # the rank that does not write
    meta = {"counters": '{"updates": 2}', "rngs": "[]", "config": "{}"}
    save_file({"x": __import__("numpy").zeros(1)}, str(tmp_path / "checkpoint.safetensors"), meta)
    err = RuntimeError("[gloo/transport/tcp] Connection closed by peer")
    line = str(checkpointer.failed(err, state, None, current=True))
    assert written == [] and "update 2 is kept" in line, line


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """A shard directory written by torch.distributed.checkpoint (one rank, FSDP2), and a
    shard write that fails (its parent a file)."""
    import torch
    import torch.distributed as dist

    from eligibility.lm.edge import checkpoint as disk
    from eligibility.lm.edge.model import TinyLM
    from eligibility.lm.edge.ranks import shard

    home = tmp_path_factory.mktemp("shards")
    dist.init_process_group("gloo", init_method=f"file://{home / 'g'}", rank=0, world_size=1)
    try:
        model = shard(TinyLM(9, d_model=8, n_layer=1, n_head=2, max_positions=8), 1)
        names = [n for n, _ in model.named_parameters()]
        adam = torch.optim.Adam(list(model.parameters()), lr=1e-3)
        disk.save_shards(model, adam, names, home / "checkpoint.shards-0", True)
        (home / "file").write_text("")
        with pytest.raises(OSError, match=r"shards could not be written.*on disk is intact"):
            disk.save_shards(model, adam, names, home / "file" / "checkpoint.shards-0", True)
    finally:
        dist.destroy_process_group()
    return home / "checkpoint.shards-0"


@pytest.mark.slow  # FSDP2 and torch.distributed.checkpoint on one rank: seconds
@pytest.mark.parametrize("damage", [None, *sorted(SHARD_DAMAGE)])
def test_a_damaged_shard_directory_is_a_value_error_naming_it(shards, tmp_path, damage):
    """Read whole by one process (as `export` and an unsharded resume read it): the intact
    directory loads; each damage is a ValueError naming the directory, not DCP's own."""
    from eligibility.lm.edge import checkpoint as disk
    from eligibility.lm.edge.model import TinyLM

    shutil.copytree(shards, tmp_path / "checkpoint.shards-0")
    if damage is not None:
        SHARD_DAMAGE[damage](tmp_path)
    model = TinyLM(9, d_model=8, n_layer=1, n_head=2, max_positions=8)
    names = [n for n, _ in model.named_parameters()]
    read = lambda: disk.load_shards(model, None, names, tmp_path / "checkpoint.shards-0", False)  # noqa: E731
    if damage is None:
        read()
        return
    with pytest.raises(ValueError, match=r"checkpoint\.shards-0 is not a readable sharded"):
        read()


# -- two ranks (torchrun, gloo on loopback) --------------------------------------------------

FINETUNE = ["-m", "eligibility", "finetune", "reverse", "--eval-every", "0", "--no-progress",
            "--d-model", "32"]  # fmt: skip


def _torchrun(*args: str, nproc: int = 2, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [str(BIN / "torchrun"), "--standalone", f"--nproc-per-node={nproc}", *args]
    return subprocess.run(cmd, env=env or ENV, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    """A 2-rank --fsdp run of 2 updates: checkpoint.safetensors names checkpoint.shards-0."""
    run = tmp_path_factory.mktemp("sharded") / "run"
    done = _torchrun(*FINETUNE, "--max-updates", "2", "--fsdp", "--out", str(run))
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(list((run / "checkpoint.shards-0").glob("*.distcp"))) == 2
    return run


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("damage", sorted(SHARD_DAMAGE))
def test_a_damaged_sharded_checkpoint_is_one_line_exit_2_and_the_resume_writes_nothing(
    sharded, tmp_path, damage, ranks
):
    """Read by one process (unsharded) or by two ranks under --fsdp: one line (each rank's,
    no traceback of ours) and exit 2, the run directory as it was. The first rank to exit 2
    has torchrun stop the other (SIGTERM): one still reading then says it was interrupted
    (seen once on a loaded machine, the other rank's refusal said)."""
    run = tmp_path / "run"
    shutil.copytree(sharded, run)
    SHARD_DAMAGE[damage](run)
    before = _hashes(run)
    again = ["--resume", str(run), "--max-updates", "4", "--target-accuracy", "0.5"]
    if ranks == 1:
        cmd = [sys.executable, *FINETUNE[:3], *again]
        done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, done.stderr[-3000:]
        lines = done.stderr.strip().splitlines()
    else:
        done = _torchrun(*FINETUNE[:3], *again)
        assert done.returncode != 0 and "exitcode  : 2" in done.stderr, done.stderr[-3000:]
        lines = [s for s in done.stderr.splitlines() if s.startswith("eligibility finetune:")]
        assert "eligibility/" not in done.stderr, done.stderr[-3000:]  # no frame of ours
    assert 1 <= len(lines) <= ranks, done.stderr[-3000:]
    refused = [s for s in lines if "is not a readable sharded checkpoint" in s]
    stopped = [s for s in lines if s == "eligibility finetune: interrupted (SIGTERM)"]
    assert refused and len(refused) + len(stopped) == len(lines), lines
    assert _hashes(run) == before


@pytest.mark.slow
def test_a_damaged_checkpoint_resumed_on_two_ranks_is_refused_by_every_rank_alike(tmp_path):
    """Rank 0 reads the file and sends its refusal to the other rank (which would otherwise
    wait for the state, then see rank 0 gone): each says the same line, exit 2, nothing
    written."""
    run = tmp_path / "run"
    done = _torchrun(*FINETUNE, "--max-updates", "2", "--out", str(run))
    assert done.returncode == 0, done.stderr[-3000:]
    _truncate(run / "checkpoint.safetensors")
    before = _hashes(run)
    done = _torchrun(*FINETUNE[:3], "--resume", str(run), "--max-updates", "4")
    lines = [s for s in done.stderr.splitlines() if s.startswith("eligibility finetune:")]
    assert len(lines) == 2 and lines[0] == lines[1], done.stderr[-3000:]
    assert "is not a readable checkpoint" in lines[0] and "eligibility/" not in done.stderr
    assert _hashes(run) == before


def _rank_of(pid: str) -> int:
    """The RANK a process of torchrun's was started with (from its environment)."""
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return int(next(v for v in env if v.startswith(b"RANK="))[5:])


def _killed(
    run: Path, *flags: str, rank: int = 1, every: int = 100
) -> tuple[subprocess.Popen, str]:
    """A 2-rank run whose ``rank`` gets SIGKILL once two updates are logged; its stderr."""
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node=2", *FINETUNE, "--max-updates",
           "200", "--checkpoint-every", str(every), *flags, "--out", str(run)]  # fmt: skip
    env = {**ENV, "ELIGIBILITY_RANK_TIMEOUT": "20"}
    pipe = subprocess.PIPE
    job = subprocess.Popen(cmd, env=env, stdout=pipe, stderr=pipe, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
        (run / "metrics.csv").exists() and len(_rows(run)) >= 2
    ):
        time.sleep(0.05)
    kids = subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True, text=True)
    assert len(kids.stdout.split()) == 2, kids.stdout
    os.kill(int(next(p for p in kids.stdout.split() if _rank_of(p) == rank)), signal.SIGKILL)
    _, err = job.communicate(timeout=120)
    return job, err.decode()


@pytest.mark.slow
def test_a_rank_lost_before_the_first_checkpoint_leaves_rank_0s_whole_state(tmp_path):
    """Data-parallel, every rank holds the whole state: rank 0 writes the last completed
    update at the stop (the cadence's first checkpoint was 100 updates away), says so in one
    line with the resume command, and the run resumes from it."""
    run = tmp_path / "run"
    job, err = _killed(run)
    assert job.returncode != 0
    lines = [s for s in err.splitlines() if "another rank stopped answering" in s]
    assert len(lines) == 1 and "eligibility/" not in err, err[-3000:]
    assert "exitcode  : 2 " in err  # rank 0 said it and exited, not cut by torchrun's SIGTERM
    kept = len(_rows(run))
    assert f"update {kept} is kept; resume with: eligibility finetune --resume {run}" in lines[0]
    more = [*FINETUNE[:3], "--max-updates", str(kept + 1), "--resume", str(run)]
    done = subprocess.run([sys.executable, *more], env=ENV, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(_rows(run)) == kept + 1


@pytest.mark.slow
def test_rank_0_killed_the_other_rank_names_the_update_its_checkpoint_holds(tmp_path):
    """Issue 72 case 29: rank 0 (the one that writes) killed, checkpointing every update:
    rank 1 said "update 66 is kept" where the checkpoint held 65 (it counted a checkpoint it
    never wrote). Its line names the update the checkpoint on disk holds."""
    import re

    from safetensors import safe_open

    run = tmp_path / "run"
    job, err = _killed(run, rank=0, every=1)
    assert job.returncode != 0
    lines = [s for s in err.splitlines() if "another rank stopped answering" in s]
    assert len(lines) == 1 and "eligibility/" not in err, err[-3000:]
    said = re.search(r"update (\d+) is kept", lines[0])
    with safe_open(str(run / "checkpoint.safetensors"), framework="pt") as f:
        holds = __import__("json").loads(f.metadata()["counters"])["updates"]
    assert said is not None and int(said.group(1)) == holds, (lines[0], holds)


@pytest.mark.slow
def test_a_sharded_rank_killed_is_one_line_not_fsdps_traceback(tmp_path):
    """--fsdp: the lost rank took its shards, so nothing new can be written; rank 0 says so in
    one line (no frame of FSDP's all-gather or of ours), naming what is kept."""
    run = tmp_path / "run"
    job, err = _killed(run, "--fsdp")
    assert job.returncode != 0
    lines = [s for s in err.splitlines() if s.startswith("eligibility finetune:")]
    assert len(lines) == 1 and "another rank stopped answering" in lines[0], err[-3000:]
    assert "no update was checkpointed" in lines[0] and "exitcode  : 2 " in err
    assert "fsdp" not in err.replace("--fsdp", "") and "eligibility/" not in err, err[-3000:]
