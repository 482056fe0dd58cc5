"""The examples of the README, the tutorials and the how-to guides, run for real (slow).

Each page's commands run in order in one directory of their own (so `evaluate runs/first` finds
the run `train` wrote above it), as the reader types them, with a tiny budget where the real
command takes minutes (:data:`BUDGET`). The files a page assumes the reader has are made first
(:func:`the_readers_files`): a small Hugging Face model at ``path/to/hf-model``, prompt files,
``rewards.py``, ``grpo.yaml``. A command passes when it exits 0, or 1 (the command's own finding:
a biased loss, a target not reached in the tiny budget), with no traceback. The whole Python
programs that train or check run here too; the cheap ones and the parsing of every command of
every page are in ``test_docs_examples.py``.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _doc_examples import ROOT, Block, Command, blocks, commands

pytestmark = pytest.mark.slow

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "tutorials").glob("*.md"))]
PAGES += sorted((ROOT / "docs" / "how-to").glob("*.md"))

BUDGET = {
    "train": {"--total-steps": "2000", "--eval-every": "1000", "--eval-episodes": "5"},
    "finetune": {"--max-updates": "2", "--eval-every": "1"},
    "check": {"--samples": "100"},
    "evaluate": {"--episodes": "2"},
    "sweep": {"--seeds": "1", "--jobs": "1"},
}
"""Per subcommand, the options set to a tiny budget (replacing the page's value, or added)."""
RESUMED = {"train": {"--total-steps": "4000"}, "finetune": {"--max-updates": "4"}}
"""A resume continues its run: a budget above the first command's."""
SWEPT = {"train": "total_steps=2000", "finetune": "max_updates=2"}
"""A sweep's runs, each with a tiny budget of its trainer."""

NEEDS = {"TRL": "trl"}
"""A block's ``<!-- example: needs X -->`` note, and the module that X is."""


def with_budget(argv: tuple[str, ...]) -> list[str]:
    """``argv`` (without ``eligibility``) with the tiny budget of its subcommand."""
    argv = list(argv)
    name = argv[0]
    budget = dict(BUDGET.get(name, {}))
    if "--resume" in argv:
        budget = RESUMED.get(name, {})
    for flag, value in budget.items():
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    if name == "sweep":
        trainer = argv[argv.index("--trainer") + 1] if "--trainer" in argv else "train"
        argv += ["--set", SWEPT[trainer]]
    return argv


def the_readers_files(work: Path) -> None:
    """What the pages assume the reader has, in ``work``: a model, prompts, rewards, configs."""
    sys.path.insert(0, str(ROOT / "tests"))
    from lm_user import hf_kit

    hf_kit.model_dir(work / "path" / "to" / "hf-model")
    rows = [{"prompt": f"copy {w}", "answer": w} for w in ("a", "b", "c", "d")]
    for name in ("train.jsonl", "held_out.jsonl", "prompts.jsonl"):
        (work / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    rewards = """def reward(prompts, completions, answer=None, **kw):
    answer = answer or [""] * len(completions)
    return [float(c.strip() == a) for c, a in zip(completions, answer)]


exact = correct = reward


def short(prompts, completions, **kw):
    return [1.0 / (1 + len(c)) for c in completions]
"""
    (work / "rewards.py").write_text(rewards)
    (work / "grpo.yaml").write_text(
        "trainer: grpo\nloss_type: dr_grpo\nscale_rewards: none\nbeta: 0.0\n"
    )
    (work / "examples").symlink_to(ROOT / "examples")
    shutil.copy(ROOT / "examples" / "check" / "correct.py", work / "my_reinforce.py")
    shutil.copy(ROOT / "examples" / "check" / "sequence" / "rloo.py", work / "my_grpo.py")


def resolved(argv: list[str], work: Path) -> list[str]:
    """``runs/CartPole-v1-<timestamp>`` as the run a command above wrote."""
    out = []
    for a in argv:
        if "<timestamp>" in a:
            found = sorted(glob.glob(a.replace("<timestamp>", "*"), root_dir=work))
            assert found, f"no run matches {a}: the page uses it before a command writes it"
            a = found[0]
        out.append(a)
    return out


def run(command: Command, work: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **dict(command.env)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests"), str(work)])
    argv = [sys.executable, "-m", "eligibility.cli", *resolved(with_budget(command.argv[1:]), work)]
    return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)


def needs(block: Block) -> None:
    """Skip, saying why, when the block's note names a package this machine lacks."""
    for what, module in NEEDS.items():
        if f"needs {what}" in block.note and importlib.util.find_spec(module) is None:
            pytest.skip(f"{block.where}: needs {what} ({block.note})")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_of_the_page_runs(page: Path, tmp_path: Path) -> None:
    the_readers_files(tmp_path)
    ran = 0
    for block in blocks((page,)):
        for command in commands(block):
            if command.argv[0] != "eligibility" or command.argv[1] == "explain":
                continue  # explain runs in test_docs_examples.py
            needs(block)
            done = run(command, tmp_path)
            assert done.returncode in (0, 1) and "Traceback" not in done.stderr, (
                f"{command.where}: `{command}` exited {done.returncode}:\n{done.stderr[-2000:]}"
            )
            ran += 1
    assert ran or page.name == "explain.md", f"{page.name}: no command ran"


PROGRAM_BUDGET = {
    "seeds=10": "seeds=2",
    'problem="bandit")': 'problem="bandit", samples=200)',
    'problem="length")': 'problem="length", samples=200)',
    'FinetuneConfig("reverse", seed=1, progress=False)': (
        'FinetuneConfig("reverse", seed=1, progress=False, max_updates=2)'
    ),
}
"""Text replaced in a Python example, as the commands' budgets are."""


def heavy_programs() -> list[Block]:
    from test_docs_examples import whole_programs

    return whole_programs(heavy=True)


@pytest.mark.parametrize("block", heavy_programs(), ids=lambda b: b.where)
def test_every_whole_program_that_trains_or_checks_runs(
    block: Block, tmp_path, monkeypatch
) -> None:
    from test_docs_examples import run_program

    needs(block)
    text = block.text
    for old, new in PROGRAM_BUDGET.items():
        text = text.replace(old, new)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    run_program(Block(block.page, block.line, block.lang, text, block.note), tmp_path)
