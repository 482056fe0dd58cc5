"""Issue 91, "what happened, shown readably": ``evaluate`` and ``episodes.jsonl`` of a tool run
show the turns as messages and the system prompt (the chat template's text, every tool's
schema) once, and only when asked; a run made from Python names its modules by their files, so
that it evaluates from any directory.

The runs here are a tiny Hugging Face model with a chat template of tools
(``tests/lm_user/hf_kit.py``), one update of two episodes; the environments and rewards are
served in the test's process (``tests/_user_code_here.py``) except in the real process of the
slow case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).parent))

from _user_code_here import rewards_here, worlds_here  # noqa: E402
from eligibility.cli import main  # noqa: E402
from lm_user import hf_kit  # noqa: E402
from test_episodes_chat import ENV as COUNTER  # noqa: E402

SRC = str(Path(__file__).resolve().parents[1] / "src")
USER = COUNTER + "\n\ndef fmt(completions, **kwargs):\n    return [0.0] * len(completions)\n"
"""The user's own module: TRL's environment class (``tests/test_episodes_chat.py``'s counter,
whose reset appends `` (from START)``) and a reward function."""
SYSTEM = "<|im_start|>system\nTools: increment"
"""The tool chat template's system prompt with the counter's tool (``hf_kit.TOOLS_SHOWN``)."""
ROWS = [{"prompt": [{"role": "user", "content": f"Reach {k}"}], "start": k} for k in (1, 2)]
SMALL = dict(max_updates=1, group_size=2, prompts_per_batch=1, eval_every=1,
             max_completion_length=8, max_tool_calls=1, target_accuracy=None,
             progress=False)  # fmt: skip


@pytest.fixture
def here():
    """The environments and rewards served in this process (see the docstring)."""
    with worlds_here(), rewards_here():
        yield


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return hf_kit.tool_model_dir(tmp_path_factory.mktemp("kit") / "model")


def _tool_run(tmp_path: Path, model: Path) -> Path:
    """One update of the counter's episodes from the command line (``--env FILE.py:Counter``)."""
    (tmp_path / "user.py").write_text(USER)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "run"
    argv = ["finetune", f"{tmp_path / 'user.py'}:fmt", "--prompts", str(tmp_path / "rows.jsonl"),
            "--model", str(model), "--env", f"{tmp_path / 'user.py'}:Counter",
            "--max-tool-calls", "1", "--max-updates", "1", "--group-size", "2",
            "--prompts-per-batch", "1", "--eval-every", "1", "--max-completion-length", "8",
            "--target-accuracy", "none", "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    return out


def test_evaluate_of_a_tool_run_prints_no_schema_unasked(here, model, tmp_path, capsys):
    """91: ``evaluate`` printed the whole rendered prompt, every tool's schema and the
    template's system text, in each episode. Now each episode is its messages (the user's, the
    replies, the tools' results), the system prompt left out with a word on how to see it;
    ``--show-system`` prints it once; ``episodes.jsonl`` holds it once a line, each episode
    naming it by index, and so does ``--format json`` only when asked."""
    out = _tool_run(tmp_path, model)
    capsys.readouterr()
    assert main(["evaluate", str(out), "--episodes", "2"]) == 0
    text = capsys.readouterr().out
    assert "Tools:" not in text, text
    assert "  user: Reach 1 (from 1)" in text and "--show-system prints it" in text
    assert "    1 assistant:" in text and "return " in text
    assert main(["evaluate", str(out), "--episodes", "2", "--show-system"]) == 0
    asked = capsys.readouterr().out
    assert asked.count("Tools: increment") == 1 and "  system prompt:" in asked
    assert main(["evaluate", str(out), "--episodes", "2", "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert "system" not in summary and "Tools:" not in json.dumps(summary)
    assert [e["system"] for e in summary["episodes"]] == [0, 0]
    assert summary["episodes"][0]["prompt"] == [{"role": "user", "content": "Reach 1 (from 1)"}]
    assert main(["evaluate", str(out), "--show-system", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["system"] == [SYSTEM]
    (line,) = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert line["system"] == [SYSTEM] and "Tools:" not in json.dumps(line["episodes"])
    first = line["episodes"][0]
    assert first["completion"][0]["role"] == "assistant" and first["system"] == 0
    assert len(first["rewards"]) == sum(m["role"] == "assistant" for m in first["completion"])


def test_show_system_is_refused_for_a_train_run(tmp_path):
    """``--show-system`` is a finetune run's: a Gymnasium run's policy reads no prompt."""
    from eligibility.reinforce.runs import evaluate_run

    with pytest.raises(ValueError, match="--show-system is for finetune runs"):
        evaluate_run(tmp_path, show_system=True)


def _python_run(tmp_path: Path, model: Path) -> tuple[Path, Path]:
    """A run made from Python with the user's module's class and reward function, the module
    then forgotten: neither importable by name nor on the path. (user file, run directory)"""
    from eligibility.lm import FinetuneConfig, finetune

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "counting91.py").write_text(USER)
    sys.path.insert(0, str(folder))
    try:
        import counting91  # the user's module, imported by name as a script of theirs does

        out, rows = tmp_path / "run", tmp_path / "rows.jsonl"
        rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
        config = FinetuneConfig("counting", model=str(model), out=str(out), prompts=str(rows),
                                **SMALL)  # fmt: skip
        finetune(config, reward_funcs=[counting91.fmt], environment_factory=counting91.Counter)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("counting91", None)
    return folder / "counting91.py", out


def test_a_python_made_run_evaluates_from_another_directory(
    here, model, tmp_path, monkeypatch, capsys
):
    """91: a run made from Python recorded ``counting91:fmt`` (its module's name), so
    ``evaluate`` worked only where that module imports. It records the module's file, as the
    command line takes ``FILE.py:fn``; from another directory, the module on no path, the run
    evaluates."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # a file's folder loaded joins the path
    user, out = _python_run(tmp_path, model)
    saved = json.loads((out / "config.json").read_text())
    assert saved["task"] == f"{user}:fmt" and saved["environment_factory"] == f"{user}:Counter"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ImportError):
        __import__("counting91")  # not importable by name from here
    assert main(["evaluate", str(out), "--episodes", "2", "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"][1]["prompt"][0]["content"] == "Reach 2 (from 2)"


@pytest.mark.slow
def test_a_python_made_run_evaluates_from_another_directory_in_a_real_process(model, tmp_path):
    """The same, ``eligibility evaluate RUN`` in a process of its own started elsewhere, its
    environments and rewards in their worker."""
    user, out = _python_run(tmp_path, model)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "eligibility.cli", "evaluate", str(out), "--format", "json"],
        capture_output=True, text=True, timeout=240, cwd=elsewhere, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["episodes"][0]["prompt"][0]["content"] == "Reach 1 (from 1)"
    assert "Tools:" not in done.stdout
    assert str(user.parent) not in env["PYTHONPATH"]
