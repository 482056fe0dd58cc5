"""A Hugging Face model's weights written once: the checkpoint names a file the exported
``model/`` holds a clone of (copy-on-write where the file system has it, else a copy).

The run's weights are ``save_pretrained``'s file in ``checkpoint.model-0`` or ``-1``;
``checkpoint.safetensors`` holds Adam's state and names that file (its size and fingerprint). Held
here: ``model/`` loads with ``transformers`` and gives the trained policy's logits exactly; no write
to ``model/`` reaches the checkpoint, and a lost slot is read back from it; a resume from the pair
is the uninterrupted run; a damaged or mismatched file is one line, exit 2, nothing written; a write
that fails at any step leaves a run that resumes; a run of the layout before (weights in the
checkpoint) resumes and exports.

Every run here calls its reward here, not in a forked worker (``tests/_user_code_here.py``): what
is held is the run's files and weights, not the reward's worker.
"""

from __future__ import annotations

import csv
import hashlib
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from _capped import capped  # noqa: E402
from _user_code_here import rewards_here  # noqa: E402
from eligibility.cli import main  # noqa: E402
from eligibility.lm import FinetuneConfig, finetune  # noqa: E402
from eligibility.lm.metrics import SCHEMA  # noqa: E402

REWARD = (
    "def odd(prompts, completions, **kw):\n    return [float(len(c) % 2) for c in completions]\n"
)


@pytest.fixture(scope="module", autouse=True)
def _rewards_here():
    """The module's runs (its fixtures' too) call the reward here (see the docstring)."""
    with rewards_here():
        yield


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    """A tiny random Llama with its tokenizer, four prompts and a reward."""
    sys.path.insert(0, str(Path(__file__).parent))
    from lm_user import hf_kit

    home = tmp_path_factory.mktemp("kit")
    hf_kit.model_dir(home / "base")
    (home / "train.txt").write_text("copy a\ncopy b\ncopy a b\ncopy c d\n")
    (home / "rewards.py").write_text(REWARD)
    return home


def _argv(kit: Path, out: Path, updates: int, *more: str) -> list[str]:
    return ["finetune", f"{kit}/rewards.py:odd", "--prompts", str(kit / "train.txt"),
            "--model", str(kit / "base"), "--max-completion-length", "3", "--group-size", "2",
            "--prompts-per-batch", "2", "--eval-every", "0", "--target-accuracy", "none",
            "--no-progress", "--dtype", "float32", "--lr", "1e-2", "--checkpoint-every", "1",
            "--max-updates", str(updates), "--out", str(out), *more]  # fmt: skip


def _rows(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv", newline="") as f:
        return [{k: v for k, v in r.items() if k not in SCHEMA.timing} for r in csv.DictReader(f)]


def _hashes(run: Path) -> dict[str, str]:
    return {
        str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run.rglob("*"))
        if p.is_file()
    }


def _named(run: Path) -> Path:
    from eligibility.lm.edge.checkpoint import named_weights

    record = named_weights(run / "checkpoint.safetensors")
    assert record is not None
    return run / record["file"]


@pytest.fixture(scope="module")
def runs(kit, tmp_path_factory) -> dict[str, Any]:
    """Three updates straight (the CLI); two (the library, its trained model kept: the run to
    resume from and the policy the export is held against), a checkpoint at each update."""
    home = tmp_path_factory.mktemp("runs")
    straight, cut = home / "straight", home / "cut"
    assert main(_argv(kit, straight, 3)) == 0
    config = FinetuneConfig(
        f"{kit}/rewards.py:odd", prompts=str(kit / "train.txt"), model=str(kit / "base"),
        max_completion_length=3, group_size=2, prompts_per_batch=2, eval_every=0,
        target_accuracy=None, progress=False, dtype="float32", lr=1e-2, checkpoint_every=1,
        max_updates=2, out=str(cut),
    )  # fmt: skip
    result = finetune(config)
    result.task.close()
    return {"straight": straight, "cut": cut, "home": home, "cut_model": result.model}


def test_the_exported_model_is_the_trained_policy_and_its_weights_are_a_clone(runs):
    """model/ loads with AutoModelForCausalLM and gives the policy's logits exactly; its weights
    file holds the checkpoint's bytes as a file of its own (90: a hard link shared them, so a
    write in place to model/ damaged the checkpoint), and the checkpoint holds no weight."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    run = runs["cut"]
    back = AutoModelForCausalLM.from_pretrained(run / "model").eval()
    ids = torch.tensor([[1, 8, 4, 5, 6, 7, 9, 10, 11, 3]])
    with torch.no_grad():
        assert torch.equal(back(ids).logits, runs["cut_model"].eval()(ids).logits)
    exported, named = (run / "model" / "model.safetensors").stat(), _named(run).stat()
    assert exported.st_ino != named.st_ino and exported.st_nlink == named.st_nlink == 1
    assert (run / "model" / "model.safetensors").read_bytes() == _named(run).read_bytes()
    with safe_open(str(run / "checkpoint.safetensors"), framework="pt") as f:
        assert not [k for k in f.keys() if k.startswith("policy.")]
        assert [k for k in f.keys() if k.startswith("optim.")]
    assert sorted(p.name for p in run.glob("checkpoint.model-*")) == [_named(run).parent.name]


def test_a_resume_from_the_pair_is_the_uninterrupted_run(kit, runs, tmp_path):
    """Cut at update 2 and resumed to 3: metrics.csv and the weights' bytes are the run's
    that went straight to 3."""
    cut = tmp_path / "cut"
    shutil.copytree(runs["cut"], cut)
    assert main(["finetune", "--resume", str(cut), "--max-updates", "3", "--no-progress"]) == 0
    assert _rows(cut) == _rows(runs["straight"]) and len(_rows(cut)) == 3
    straight = (runs["straight"] / "model" / "model.safetensors").read_bytes()
    assert (cut / "model" / "model.safetensors").read_bytes() == straight
    assert _named(cut).read_bytes() == straight


def test_a_resume_keeps_what_the_user_saved_in_model(kit, runs, tmp_path, capsys):
    """A file saved in RUN/model/ (notes, an evaluation's output) was deleted by ``finetune
    --resume`` without a word: the directory was replaced whole. The run's own files there are
    replaced (a stale one it wrote before, dropped); the user's are moved into the new one,
    each said on stderr."""
    cut = tmp_path / "cut"
    shutil.copytree(runs["cut"], cut)
    (cut / "model" / "notes.txt").write_text("lr 1e-2 looked fine\n")
    (cut / "model" / "evals").mkdir()
    (cut / "model" / "evals" / "held.jsonl").write_text('{"accuracy": 0.5}\n')
    capsys.readouterr()
    assert main(["finetune", "--resume", str(cut), "--max-updates", "3", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert (cut / "model" / "notes.txt").read_text() == "lr 1e-2 looked fine\n"
    assert (cut / "model" / "evals" / "held.jsonl").read_text() == '{"accuracy": 0.5}\n'
    assert err.count("(not the run's) in the new model/") == 2, err
    straight = (runs["straight"] / "model" / "model.safetensors").read_bytes()
    assert (cut / "model" / "model.safetensors").read_bytes() == straight


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:1000])


DAMAGE = {
    "truncated": lambda run, other: _truncate(_named(run)),
    "emptied": lambda run, other: _named(run).write_bytes(b""),
    "deleted": lambda run, other: shutil.rmtree(_named(run).parent),
    "another run's, of the same size": lambda run, other: shutil.copy(_named(other), _named(run)),
}


@pytest.mark.parametrize(
    "damage",
    [
        # slow: a file of the wrong size, as "truncated" is; fast cover: this test's [truncated]
        pytest.param(d, marks=pytest.mark.slow) if d == "emptied" else d
        for d in sorted(DAMAGE)
    ],
)
def test_a_damaged_or_mismatched_weights_file_is_one_line_exit_2_and_nothing_written(
    runs, tmp_path, capsys, damage
):
    """The resume refuses each damage in one line and writes nothing; `export` reads the
    weights through the same check (``Checkpointer.read``), held on the truncated file."""
    run = tmp_path / "run"
    shutil.copytree(runs["cut"], run)
    shutil.rmtree(run / "model")  # the file's other name, so that damage reaches the one read
    DAMAGE[damage](run, runs["straight"])
    before = _hashes(run)
    capsys.readouterr()
    again = ["finetune", "--resume", str(run), "--max-updates", "5", "--no-progress"]
    assert main(again) == 2
    said = capsys.readouterr().err.strip().splitlines()
    err = [s for s in said if not s.startswith("eligibility finetune: note:")]  # the defaults'
    assert len(err) == 1 and "checkpoint.model-" in err[0], said
    assert "is not the weights file its checkpoint names" in err[0], err
    assert _hashes(run) == before
    if damage == "truncated":
        assert main(["export", str(run), str(tmp_path / "out")]) == 2
        assert not (tmp_path / "out").exists()


def test_a_write_to_model_never_reaches_the_checkpoint_and_a_lost_slot_is_read_from_it(
    runs, tmp_path, capsys
):
    """90: ``model/`` shared its file with the checkpoint (a hard link): a truncate of
    RUN/model/model.safetensors damaged the checkpoint too, and the run was lost. Now the
    checkpoint's file is untouched and the run resumes as the straight one; and a slot deleted
    while model/ holds the very file (its fingerprint the checkpoint's) is read from model/,
    said once, where the resume refused."""
    for case in ("model/ truncated in place", "the slot deleted"):
        run = tmp_path / case.split()[0].strip("/")
        shutil.copytree(runs["cut"], run)
        if case == "model/ truncated in place":
            named = _named(run).read_bytes()
            with open(run / "model" / "model.safetensors", "r+b") as f:
                f.truncate(1000)
            assert _named(run).read_bytes() == named
        else:
            shutil.rmtree(_named(run).parent)
        capsys.readouterr()
        again = ["finetune", "--resume", str(run), "--max-updates", "3", "--no-progress"]
        assert main(again) == 0, case
        err = capsys.readouterr().err
        said = "the weights are read from" in err and "the very file the checkpoint names" in err
        assert said == (case == "the slot deleted"), err
        assert _rows(run) == _rows(runs["straight"]), case
        straight = (runs["straight"] / "model" / "model.safetensors").read_bytes()
        assert (run / "model" / "model.safetensors").read_bytes() == straight, case


FAIL_AT = ["the weights file written", "the weights renamed", "the checkpoint", "the old slot"]


@pytest.mark.parametrize(
    "step",
    [
        # slow: a failure before the new weights file is in place, as a failed rename is (the
        # pair of update 2 stays, beside a temporary file); fast cover: this test's
        # [the weights renamed]
        pytest.param(s, marks=pytest.mark.slow) if s == "the weights file written" else s
        for s in FAIL_AT
    ],
)
def test_a_write_that_fails_at_any_step_leaves_a_run_that_resumes(
    kit, runs, tmp_path, monkeypatch, step
):
    """Checkpoint 3 fails (every try) at each step of its writes, as a kill there would stop
    it: the run directory holds the pair of update 2 or of update 3, and the resume from it
    reaches the straight run's rows and weights."""
    import eligibility.lm.edge.checkpoint as disk
    import eligibility.runs.directory as directory

    run = tmp_path / "run"
    shutil.copytree(runs["cut"], run)

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    real_fsync, real_replace, real_clear = disk.os.fsync, disk.os.replace, disk.clear
    if step == "the weights file written":
        monkeypatch.setattr(disk.os, "fsync", fail)
    elif step == "the weights renamed":
        monkeypatch.setattr(disk.os, "replace", fail)
    elif step == "the checkpoint":
        monkeypatch.setattr(directory, "_save_tensors", fail)
    else:  # after the checkpoint, the slot it no longer names
        monkeypatch.setattr(disk, "clear", lambda p: fail() if p.name.endswith("-1") else None)
    again = ["finetune", "--resume", str(run), "--max-updates", "3", "--no-progress"]
    assert main(again) != 0 or step == "the old slot"
    monkeypatch.undo()
    assert (disk.os.fsync, disk.os.replace, disk.clear) == (real_fsync, real_replace, real_clear)
    assert main(["finetune", "--resume", str(run), "--max-updates", "3", "--no-progress"]) == 0
    assert _rows(run) == _rows(runs["straight"])
    straight = (runs["straight"] / "model" / "model.safetensors").read_bytes()
    assert (run / "model" / "model.safetensors").read_bytes() == straight


def test_a_weights_file_the_kernel_refuses_is_one_line_exit_2_and_no_part_is_left(kit, tmp_path):
    """A real failed write of safetensors (its own exception, not an OSError): every file
    capped below the weights file's size (``RLIMIT_FSIZE``, the kernel's EFBIG, as a full disk
    refuses with ENOSPC), the run's first checkpoint cannot be written. One line, exit 2, no
    traceback, and no part of the weights left in the run directory."""
    cap = (kit / "base" / "model.safetensors").stat().st_size // 2
    out, log = tmp_path / "run", tmp_path / "stderr"
    assert capped(cap, lambda: main(_argv(kit, out, 2)), log) == 2, log.read_text()
    err = log.read_text()
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("eligibility finetune: error: cannot write: ")
    assert "File too large" in last and "checkpoint.model-0" in last
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [".lock"]


def test_an_export_the_kernel_refuses_is_one_line_exit_2_and_leaves_no_directory(runs, tmp_path):
    """The export's tokenizer file refused (tokenizers' own exception, from Rust, under an
    ``RLIMIT_FSIZE`` cap below its size; the weights' copy is smaller here than the cap):
    one line, exit 2, and neither the directory nor its temporary sibling is left."""
    cap = (runs["straight"] / "model" / "tokenizer.json").stat().st_size // 2
    log = tmp_path / "stderr"
    argv = ["export", str(runs["straight"]), str(tmp_path / "out")]
    assert capped(cap, lambda: main(argv), log) == 2, log.read_text()
    err = log.read_text()
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"eligibility export: error: cannot write: {tmp_path}/.out.")
    assert "File too large" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stderr"]


def test_a_run_with_its_weights_in_the_checkpoint_resumes_and_exports(
    kit, runs, tmp_path, monkeypatch
):
    """The layout before (``policy.*`` in checkpoint.safetensors, model/ written apart), as a
    model whose saved names are not its own still writes it: resumed, it is the straight run,
    and its next checkpoint writes the weights once; `export` reads either."""
    from safetensors import safe_open

    import eligibility.lm.edge.checkpoint as disk

    old = tmp_path / "old"
    monkeypatch.setattr(disk, "save_model", lambda model, path: None)
    assert main(_argv(kit, old, 2)) == 0
    with safe_open(str(old / "checkpoint.safetensors"), framework="pt") as f:
        assert any(k.startswith("policy.") for k in f.keys())
    assert not list(old.glob("checkpoint.model-*"))
    assert (old / "model" / "model.safetensors").stat().st_nlink == 1
    monkeypatch.undo()
    assert main(["export", str(old), str(tmp_path / "exported")]) == 0
    assert (tmp_path / "exported" / "model.safetensors").read_bytes() == (
        old / "model" / "model.safetensors"
    ).read_bytes()
    assert main(["finetune", "--resume", str(old), "--max-updates", "3", "--no-progress"]) == 0
    assert _rows(old) == _rows(runs["straight"])
    assert (old / "model" / "model.safetensors").read_bytes() == _named(old).read_bytes()
