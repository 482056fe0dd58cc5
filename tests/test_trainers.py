"""The one table of trainers (eligibility.trainers): what every command and the sweep read."""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap

import pytest

import test_runs
from eligibility import trainers
from eligibility.cli import main
from eligibility.trainers import TRAINERS, lookup, made_by

_PATHS = (
    "config",
    "identity",
    "infinite",
    "train",
    "schema",
    "evaluate",
    "check",
    "build",
    "export",
)
"""The fields of a row that name a piece of code (``module:attribute``)."""


def test_the_table_lists_both_trainers_and_each_of_their_pieces_loads():
    assert {k: t.command for k, t in TRAINERS.items()} == {
        "reinforce": "train",
        "finetune": "finetune",
    }
    assert lookup("train") is TRAINERS["reinforce"] and lookup("finetune") is TRAINERS["finetune"]
    for t in TRAINERS.values():
        for what in _PATHS:
            if getattr(t, what) is not None:
                assert t.load(what) is not None, (t.command, what)
        config = t.load("config")
        names = {f.name for f in dataclasses.fields(config)}
        assert {t.subject, *t.check_fields, t.bound[1]} <= names, t.command
        assert t.load("identity") <= names and t.load("infinite") <= names
        assert t.load("train").__name__ == t.command  # train, finetune
    assert TRAINERS["finetune"].export is not None and TRAINERS["reinforce"].export is None


def test_the_table_sits_above_what_it_names_and_below_what_reads_it():
    """The paths are strings: no arrow of the import graph shows them, so this test does.

    Nothing the table names reaches the table, the command line or the sweep back.
    """
    graph = test_runs.import_graph()
    above = ("eligibility.trainers", "eligibility.cli", "eligibility.sweep")
    for t in TRAINERS.values():
        for what in _PATHS:
            if getattr(t, what) is not None:
                module = getattr(t, what).partition(":")[0]
                reached = test_runs._reach(graph, module)
                assert not {m for m in reached if m.startswith(above)}, (t.command, what)
    assert not test_runs._reach(graph, "eligibility.trainers") - {
        "eligibility.trainers",
        "eligibility._io",
    }


@pytest.mark.parametrize("command", ["train", "finetune"])
def test_resumes_help_names_every_option_outside_the_identity(command, capsys):
    """``--resume``'s help cannot drift from ``IDENTITY``, the list the resume rule refuses by:
    it names every field outside it (but ``--out``: a resumed run stays in its directory)."""
    import re

    t = lookup(command)
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")
    said = re.search(r"--resume DIR continue the run in DIR (.*?) may change", text).group(1)
    named = set(re.findall(r"--([a-z][a-z-]*)", said))
    fields = {f.name for f in dataclasses.fields(t.load("config"))}
    want = {f.replace("_", "-") for f in fields - t.load("identity") - {"out"}}
    assert named == want


# -- a run says what it is ------------------------------------------------------------------


def _run_of(tmp_path, command: str):
    """A directory holding a run of ``command`` (its config.json, the fields that say so)."""
    run = tmp_path / command
    run.mkdir()
    subject = lookup(command).subject
    (run / "config.json").write_text(json.dumps({subject: "x", "seed": 0}))
    return run


def test_a_run_says_what_it_is(tmp_path):
    assert made_by(_run_of(tmp_path, "train")) is TRAINERS["reinforce"]
    assert made_by(_run_of(tmp_path, "finetune")) is TRAINERS["finetune"]
    assert made_by(tmp_path) is None and made_by(tmp_path / "nowhere") is None
    (tmp_path / "both").mkdir()
    (tmp_path / "both" / "config.json").write_text('{"env_id": "a", "task": "b"}')
    assert made_by(tmp_path / "both") is None  # claims to be both: says nothing


def _err(capsys, argv):
    try:
        rc = main(argv)
    except SystemExit as stop:
        rc = stop.code
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    ("made", "argv", "said"),
    [
        ("train", ["export", "{run}", "{tmp}/out"], "not of eligibility finetune"),
        ("train", ["finetune", "--resume", "{run}"], "resume it with eligibility train --resume"),
        ("finetune", ["train", "--resume", "{run}"], "resume it with eligibility finetune"),
    ],
    ids=["export-train", "finetune-resume-train", "train-resume-finetune"],
)
def test_a_run_of_another_kind_is_one_line_naming_the_command_that_made_it(
    tmp_path, capsys, made, argv, said
):
    run = _run_of(tmp_path, made)
    argv = [a.format(run=run, tmp=tmp_path) for a in argv]
    rc, err = _err(capsys, argv)
    assert rc == 2 and err.count("\n") == 1, err
    assert f"is a run of eligibility {made}, not of eligibility" in err and said in err


# -- every command resolves its trainer through the table -----------------------------------

_SPY = """
def build(subject, **fields):
    raise ValueError(f"spied build of {subject}")


def check(config):
    raise ValueError(f"spied check of seed {config.seed}")


def evaluate(run_dir, **given):
    return {"spied": "evaluate", "run_dir": str(run_dir), **given}


def export(run_dir, out, merge=False):
    return out
"""


@pytest.fixture
def spy(tmp_path, monkeypatch):
    """Point a row's pieces at a spy module: ``spy("finetune", build="build")``."""
    (tmp_path / "spy_trainers.py").write_text(textwrap.dedent(_SPY))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "spy_trainers", raising=False)

    def point(key: str, **pieces: str) -> None:
        paths = {what: f"spy_trainers:{fn}" for what, fn in pieces.items()}
        monkeypatch.setitem(TRAINERS, key, dataclasses.replace(TRAINERS[key], **paths))

    return point


@pytest.mark.parametrize(
    ("key", "argv"),
    [("reinforce", ["train", "CartPole-v1"]), ("finetune", ["finetune", "repeat"])],
    ids=["train", "finetune"],
)
def test_train_and_finetune_make_their_config_through_the_table(tmp_path, capsys, spy, key, argv):
    spy(key, build="build")
    rc, err = _err(capsys, [*argv, "--out", str(tmp_path / "run")])
    assert rc == 2 and f"spied build of {argv[1]}" in err


@pytest.mark.parametrize(
    ("key", "argv"),
    [
        ("reinforce", ["sweep", "CartPole-v1"]),
        ("finetune", ["sweep", "--trainer", "finetune", "repeat"]),
    ],
    ids=["train", "finetune"],
)
def test_a_sweep_checks_its_settings_through_the_table(tmp_path, capsys, spy, key, argv):
    spy(key, check="check")
    rc, err = _err(capsys, [*argv, "--seeds", "2", "--out", str(tmp_path / "sweep")])
    assert rc == 2 and "spied check of seed 0" in err and err.count("\n") == 1


@pytest.mark.parametrize("made", ["train", "finetune"])
def test_evaluate_plays_a_run_with_its_own_trainers_function(tmp_path, capsys, spy, made):
    spy(trainers.named(made), evaluate="evaluate")
    run = _run_of(tmp_path, made)
    assert main(["evaluate", str(run), "--sample", "--episodes", "3", "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary == {
        "spied": "evaluate",
        "run_dir": str(run),
        "episodes": 3,
        "greedy": False,
        "seed": 0,
        "video": None,
        "show_system": False,
    }


def test_export_writes_a_run_with_its_trainers_function(tmp_path, capsys, spy):
    spy("finetune", export="export")
    run = _run_of(tmp_path, "finetune")
    assert main(["export", str(run), str(tmp_path / "hf")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "hf")
