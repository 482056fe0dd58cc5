"""Every option a message names is one the command has; a run made from Python evaluates anywhere.

Truth: the command line's own parsers (every option of every subcommand, and of the one that
failed), the messages themselves (read from the source for every string, and from real runs of
``evaluate`` and ``export`` on broken runs), and a run made from Python with its prompts in
memory, evaluated from ``/``.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eligibility.cli import COMMANDS, build_parser, main

SRC = Path(__file__).resolve().parents[1] / "src" / "eligibility"
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9_-]*[a-z0-9]")
FOREIGN = {
    "--nproc-per-node": "torchrun's",
    "--master-addr": "torchrun's",
    "--main_process_ip": "accelerate's",
    "--no-deps": "pip's",
    "--algo": "OpenRLHF's (--algo.kl.init_coef, a key of its parser, in a docstring)",
    "--markdown": "tools/option_tables.py's",
    "--update": "tools/option_tables.py's",
    "--version": "argparse's, on the main parser",
    "--name": "a placeholder in a docstring (--name METAVAR, --name text)",
    "--flag": "a placeholder in a docstring",
    "--no-flag": "a placeholder in a docstring",
    "--foo-bar": "a placeholder in a docstring",
}
"""Options of other tools (and docstrings' placeholders) that the source names, each said whose."""


def _options(*commands: str) -> set[str]:
    parser = build_parser(list(commands))
    out = set()
    for action in parser._actions:
        if isinstance(getattr(action, "choices", None), dict):
            for name, sub in action.choices.items():
                if name in commands:
                    out |= {o for a in sub._actions for o in a.option_strings}
    return out


def test_every_option_the_source_names_is_a_commands():
    """A message that names an option no command has sends its reader to look for nothing."""
    every = _options(*COMMANDS)
    unknown: dict[str, list[str]] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for option in OPTION.findall(node.value):
                    if option not in every and option not in FOREIGN:
                        unknown.setdefault(option, []).append(str(path.relative_to(SRC)))
    assert not unknown, unknown


REWARD = """
def judged(prompts, completions, **kwargs):
    return [float(c == "") for c in completions]
"""
SMALL = ["--d-model", "8", "--n-head", "2", "--n-layer", "1", "--group-size", "2",
         "--prompts-per-batch", "2", "--max-updates", "1", "--max-completion-length", "3",
         "--target-accuracy", "none", "--no-progress"]  # fmt: skip


def _said(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(argv)
    return status, err.getvalue().strip()


def _broken(run: Path, data: Path, reward: Path) -> dict[str, tuple]:
    """Each way a saved run cannot be rebuilt: (what to change, how to undo it)."""
    config = json.loads((run / "config.json").read_text())

    def saved(**changed):
        return lambda: (run / "config.json").write_text(json.dumps({**config, **changed}))

    def restore():
        (run / "config.json").write_text(json.dumps(config))

    def moved(path):
        return lambda: path.rename(path.with_suffix(".moved")), lambda: path.with_suffix(
            ".moved"
        ).rename(path)

    return {
        "data moved": moved(data),
        "reward moved": moved(reward),
        "model gone": (saved(model=str(run.parent / "no-model")), restore),
        "tokenizer gone": (saved(tokenizer=str(run.parent / "no-tok")), restore),
        "an environment without a tokenizer": (
            saved(environment_factory=f"{run.parent}/env.py:E"),
            restore,
        ),
        "a lambda's run": (saved(task="<from Python>: <lambda>"), restore),
        "a checkpoint gone": moved(run / "checkpoint.safetensors"),
    }


@pytest.mark.parametrize(
    ("command", "only"),
    [
        ("evaluate", ("data moved", "model gone")),
        pytest.param("evaluate", None, marks=pytest.mark.slow),
        pytest.param("export", None, marks=pytest.mark.slow),
    ],
)
def test_a_broken_runs_message_names_only_the_commands_options(tmp_path, command, only):
    """``evaluate`` said ``needs --prompts FILE`` and ``--model X: no such directory``: options
    it does not have. Each message is one line, exit 2, and every option it names is the
    command's own; the run's settings are named as the run's (config.json's names). Every
    case is slow (a run rebuilt each: seconds); two of them run fast."""
    (tmp_path / "rw.py").write_text(REWARD)
    (tmp_path / "p.jsonl").write_text('{"prompt": "ab"}\n{"prompt": "ba"}\n')
    run = tmp_path / "run"
    argv = ["finetune", f"{tmp_path}/rw.py:judged", "--prompts", f"{tmp_path}/p.jsonl",
            *SMALL, "--out", str(run)]  # fmt: skip
    assert _said(argv)[0] == 0
    has = _options(command)
    rest = [str(tmp_path / "exported")] if command == "export" else []
    cases = _broken(run, tmp_path / "p.jsonl", tmp_path / "rw.py")
    cases["not a run"] = (lambda: None, lambda: None)
    for case, (do, undo) in cases.items():
        if only is not None and case not in only:
            continue
        do()
        try:
            target = str(tmp_path) if case == "not a run" else str(run)
            status, said = _said([command, target, *rest])
        finally:
            undo()
        if command == "export" and status == 0:  # the tiny model exports whatever its data
            shutil.rmtree(tmp_path / "exported")
            continue
        assert status == 2 and "\n" not in said, (case, said)
        named = set(OPTION.findall(said))
        assert named <= has, (case, said)


def test_a_python_run_with_rows_in_memory_keeps_them_and_evaluates_elsewhere(tmp_path,
                                                                          monkeypatch):  # fmt: skip
    """The fast form of the one below: in this process, the rows kept, read back from ``/``."""
    from eligibility.lm import FinetuneConfig, finetune

    rows = [{"prompt": "ab", "answer": 1}, {"prompt": "ba", "answer": 2}]
    config = FinetuneConfig("judged", d_model=8, n_head=2, n_layer=1, group_size=2,
                            prompts_per_batch=2, max_updates=1, max_completion_length=3,
                            target_accuracy=None, progress=False,
                            out=str(tmp_path / "run"))  # fmt: skip
    (tmp_path / "rw.py").write_text(REWARD)
    monkeypatch.syspath_prepend(str(tmp_path))
    from rw import judged

    finetune(config, reward_funcs=[judged], train_dataset=rows, eval_dataset=rows[:1])
    monkeypatch.chdir("/")
    status, said = _said(["evaluate", str(tmp_path / "run"), "--format", "json"])
    assert status == 0, said
    kept = [
        json.loads(x) for x in (tmp_path / "run" / "eval_dataset.jsonl").read_text().splitlines()
    ]
    assert kept == rows[:1]


@pytest.mark.slow
def test_a_python_run_with_prompts_in_memory_evaluates_from_the_root(tmp_path):
    """``finetune(FinetuneConfig(...), reward_funcs=[f], train_dataset=rows)``, as a TRL script
    runs: its rows are kept with the run, so ``eligibility evaluate RUN`` from ``/`` (another
    process, another directory) evaluates it, and ``--resume`` from the command line goes on.
    An edit to the kept rows is refused by the run's SHA-256."""
    (tmp_path / "rw.py").write_text(REWARD)
    script = f"""
import sys
sys.path.insert(0, {str(tmp_path)!r})
from rw import judged
from eligibility.lm import FinetuneConfig, finetune
rows = [{{"prompt": "ab", "answer": 1}}, {{"prompt": "ba", "answer": 2}}]
finetune(FinetuneConfig("judged", d_model=8, n_head=2, n_layer=1, group_size=2,
         prompts_per_batch=2, max_updates=1, max_completion_length=3, target_accuracy=None,
         progress=False, out={str(tmp_path / "run")!r}), reward_funcs=[judged],
         train_dataset=rows, eval_dataset=rows[:1])
"""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=tmp_path)
    run = tmp_path / "run"
    cli = [sys.executable, "-m", "eligibility"]
    done = subprocess.run([*cli, "evaluate", str(run), "--format", "json"], cwd="/", env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["completions"] == 1 and summary["examples"][0]["prompt"] == "ab"
    kept = run / "train_dataset.jsonl"
    assert [json.loads(x)["answer"] for x in kept.read_text().splitlines()] == [1, 2]
    kept.write_text(kept.read_text().replace('"ab"', '"aa"'))
    edited = subprocess.run([*cli, "evaluate", str(run)], cwd="/", env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert edited.returncode == 2 and "changed since the run began" in edited.stderr
