"""The examples of the README, the tutorials and the how-to guides, run for real (slow).

Each page's commands run in order in one directory of their own (so `evaluate runs/first` finds
the run `train` wrote above it), as the reader types them, with a tiny budget where the real
command takes minutes (:data:`BUDGET`). The files a page assumes the reader has are made first
(:func:`the_readers_files`): a small Hugging Face model at ``path/to/hf-model`` (one whose chat
template renders tools at ``path/to/tool-model``), prompt files, ``rewards.py``, ``grpo.yaml``,
``mymodule.py``; and each Python block of the page headed ``# name.py`` is saved as that file.
A command passes when it exits 0, or 1 (the command's own finding: a biased loss, a target not
reached in the tiny budget), or the status the page shows for it (``$ echo $?``), with no
traceback. The whole Python programs that train or check run here too; the cheap ones and the
parsing of every command of every page are in ``test_docs_examples.py``.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _doc_examples import ROOT, Block, Command, blocks, commands

pytestmark = pytest.mark.slow

PAGES = [p for p in (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))]
PAGES = [p for p in PAGES if "measurements" not in p.parts]
"""The user guide's pages: the measurement record's commands are its runs, hours long."""

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

WRONG: dict[str, str] = {}
"""Examples known to fail as written, each with why: held to failing, so that fixing the page
fails here until its entry goes."""

KIT = Path(os.environ.get("KIT", Path.home() / ".cache" / "eligibility-kit"))
NEEDS = {
    "TRL": lambda: importlib.util.find_spec("trl") is not None,
    "the real-model kit": KIT.is_dir,
    "the kit's tool model": (KIT / "models" / "smollm2-135m-tools" / "config.json").is_file,
}
"""A block's ``<!-- example: needs X -->`` note, and whether this machine has X."""


def spellings(name: str, flag: str) -> set[str]:
    """``flag`` and the other names ``name`` takes for it: ``finetune``'s TRL names
    (``--max_steps`` sets ``--max-updates``)."""
    if name != "finetune":
        return {flag}
    from eligibility.lm.trl_names import TRL_ALIASES

    field = flag.removeprefix("--").replace("-", "_")
    return {flag} | {f"--{trl}" for trl, (target, _, _) in TRL_ALIASES.items() if target == field}


def with_budget(argv: tuple[str, ...]) -> list[str]:
    """``argv`` (without ``eligibility``) with the tiny budget of its subcommand."""
    argv = list(argv)
    name = argv[0]
    budget = dict(BUDGET.get(name, {}))
    if "--seed-list" in argv:  # a sweep's own seeds: the first of them
        i = argv.index("--seed-list") + 2
        while i < len(argv) and not argv[i].startswith("-"):
            del argv[i]
        budget.pop("--seeds", None)
    if "--resume" in argv:
        budget = RESUMED.get(name, {})
    for flag, value in budget.items():
        given = [i for i, a in enumerate(argv) if a in spellings(name, flag)]
        for i in given:  # the page's spelling (a TRL name too) becomes the budget's
            argv[i : i + 2] = [flag, value]
        if not given:
            argv += [flag, value]
    if name == "sweep":
        trainer = argv[argv.index("--trainer") + 1] if "--trainer" in argv else "train"
        key = SWEPT[trainer].split("=")[0]
        budget_set = [i for i, a in enumerate(argv) if a.startswith(f"{key}=")]
        for i in budget_set:
            argv[i] = SWEPT[trainer]
        if not budget_set:
            argv += ["--set", SWEPT[trainer]]
    return argv


def the_readers_files(work: Path) -> None:
    """What the pages assume the reader has, in ``work``: a model, prompts, rewards, configs."""
    sys.path.insert(0, str(ROOT / "tests"))
    from lm_user import hf_kit

    model = hf_kit.model_dir(work / "path" / "to" / "hf-model")
    for other in ("model", "hf-model-dir"):  # the pages' other names for it
        (work / "path" / "to" / other).symlink_to(model)
    hf_kit.tool_model_dir(work / "path" / "to" / "tool-model")  # renders tools and calls
    rows = [{"prompt": f"copy {w}", "answer": w} for w in ("a", "b", "c", "d")]
    for name in ("train.jsonl", "held_out.jsonl", "prompts.jsonl"):
        (work / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    reach = {"prompt": [{"role": "user", "content": "Reach 10"}], "start": 3}  # the agent's
    (work / "rows.jsonl").write_text(json.dumps(reach) + "\n")
    (work / "mymodule.py").write_text(  # a Gymnasium environment of text, registered
        "import gymnasium\nfrom _text_env import Echo\n\n"
        'gymnasium.register("MyTextEnv-v0", entry_point=Echo)\n'
    )
    rewards = """def reward(prompts, completions, answer=None, **kw):
    answer = answer or [""] * len(completions)
    return [float(c.strip() == a) for c, a in zip(completions, answer)]


exact = correct = reward


def short(prompts, completions, **kw):
    return [1.0 / (1 + len(c)) for c in completions]


fmt = short
"""
    (work / "rewards.py").write_text(rewards)
    (work / "grpo.yaml").write_text(
        "trainer: grpo\nloss_type: dr_grpo\nscale_rewards: none\nbeta: 0.0\n"
    )
    (work / "examples").symlink_to(ROOT / "examples")
    shutil.copy(ROOT / "examples" / "check" / "correct.py", work / "my_reinforce.py")
    shutil.copy(ROOT / "examples" / "check" / "sequence" / "rloo.py", work / "rloo.py")
    shutil.copy(ROOT / "examples" / "check" / "sequence" / "model_form.py", work / "model_form.py")
    (work / "my_grpo.py").write_text(MY_GRPO)
    (work / "my_loss.py").write_text(
        (ROOT / "examples" / "check" / "offpolicy" / "losses.py").read_text() + "\nloss = product\n"
    )


MY_GRPO = """import torch

import model_form
import rloo


def loss(x, batch):
    \"\"\"The reader's GRPO loss in both forms the pages check: logps or model, and batch.\"\"\"
    if isinstance(x, torch.nn.Module):
        return model_form.loss(x, batch)
    return rloo.loss(x, batch)
"""


def resolved(argv: list[str], work: Path) -> list[str]:
    """The shell's globs expanded; ``runs/X-<timestamp>`` and ``runs/X-…``: the newest run."""
    out = []
    for a in map(os.path.expanduser, argv):
        pattern = a.replace("<timestamp>", "*").replace("…", "*")
        if "*" in pattern:
            found = sorted(
                glob.glob(pattern, root_dir=work), key=lambda f: (work / f).stat().st_mtime
            )
            assert found, f"nothing matches {a}: the page uses it before a command writes it"
            out += found if pattern == a else found[-1:]
        else:
            out.append(a)
    return out


def run(command: Command, work: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **dict(command.env)}
    paths = [str(ROOT / "src"), str(ROOT / "tests"), str(work), os.environ.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))  # make ci's peers stay in sight
    argv = [sys.executable, "-m", "eligibility.cli", *resolved(with_budget(command.argv[1:]), work)]
    return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)


def not_here(block: Block) -> str:
    """Why the block cannot run on this machine (its note names what is missing), or ""."""
    for what, present in NEEDS.items():
        if f"needs {what}" in block.note and not present():
            return f"{block.where}: {block.note}"
    return ""


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_of_the_page_runs(page: Path, tmp_path: Path) -> None:
    the_readers_files(tmp_path)
    for block in blocks((page,)):  # a Python block headed `# name.py`: a file the reader saves
        if block.lang == "python" and (name := re.match(r"# ([\w-]+\.py)\n", block.text)):
            (tmp_path / name[1]).write_text(block.text)
    ran, lacking = 0, []
    for block in blocks((page,)):
        if not_here(block):
            lacking.append(not_here(block))
            continue
        for command in commands(block):
            if command.argv[0] != "eligibility" or command.argv[1] == "explain":
                continue  # explain runs in test_docs_examples.py
            done = run(command, tmp_path)
            if str(command) in WRONG:
                assert done.returncode == 2, f"{command.where} works now: remove it from WRONG"
                continue
            allowed = (0, 1) if command.expect is None else (command.expect,)
            assert done.returncode in allowed and "Traceback" not in done.stderr, (
                f"{command.where}: `{command}` exited {done.returncode}:\n{done.stderr[-2000:]}"
            )
            ran += 1
    if lacking:
        pytest.skip(f"ran {ran} commands; not run here: {'; '.join(lacking)}")


PROGRAM_BUDGET = {
    "seeds=10": "seeds=2",
    'problem="bandit")': 'problem="bandit", samples=200)',
    'problem="length")': 'problem="length", samples=200)',
    'out="runs/mine")': 'out="runs/mine", max_updates=2)',
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

    if not_here(block):
        pytest.skip(not_here(block))
    text = block.text
    for old, new in PROGRAM_BUDGET.items():
        text = text.replace(old, new)
    monkeypatch.chdir(tmp_path)
    the_readers_files(tmp_path)
    run_program(Block(block.page, block.line, block.lang, text, block.note), tmp_path)
