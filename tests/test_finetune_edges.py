"""Rough edges of ``finetune``, ``export`` and ``evaluate`` as a user met them, each held by
the behaviour that fixed it.

Truth: the command line's exit status and stderr, ``sys.modules`` of a fresh interpreter (what
was loaded before a refusal), the files a run leaves and their modes as ``os.stat`` reads them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def _cli_in_fresh_process(argv: list[str], cwd) -> dict:
    """``main(argv)`` in a new interpreter: its exit status, stderr, and what it imported."""
    probe = (
        "import contextlib, io, json, sys\n"
        "from eligibility.cli import main\n"
        "err = io.StringIO()\n"
        "with contextlib.redirect_stderr(err):\n"
        f"    rc = main({argv!r})\n"
        "print(json.dumps({'rc': rc, 'err': err.getvalue(), "
        "'transformers': 'transformers' in sys.modules}))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=cwd
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def reward_that_tells(tmp_path):
    """A reward file whose import leaves a mark: was the user's task loaded?"""
    mark = tmp_path / "reward-loaded"
    (tmp_path / "rew.py").write_text(
        f"open({str(mark)!r}, 'w').close()\n"
        "def r(completions, **kw):\n    return [1.0] * len(completions)\n"
    )
    (tmp_path / "p.jsonl").write_text('{"prompt": "ab"}\n')
    return mark


def _run_dir(tmp_path, name: str, **config) -> str:
    run = tmp_path / name
    run.mkdir()
    task = {"task": f"{tmp_path / 'rew.py'}:r", "prompts": str(tmp_path / "p.jsonl")}
    (run / "config.json").write_text(json.dumps({**task, **config}))
    return str(run)


def test_export_of_a_tiny_model_run_is_refused_before_loading_anything(tmp_path, reward_that_tells):
    """It used to build the task (calling the user's reward) and the model, 17 s, first."""
    run = _run_dir(tmp_path, "run", model="tiny")
    got = _cli_in_fresh_process(["export", run, str(tmp_path / "out")], tmp_path)
    assert got["rc"] == 2
    assert "tiny transformer" in got["err"] and got["err"].count("\n") == 1
    assert not reward_that_tells.exists() and not got["transformers"]
    assert not (tmp_path / "out").exists()


def test_export_merge_of_a_full_fine_tune_is_refused_before_loading_anything(
    tmp_path, reward_that_tells
):
    """It used to load the model (22 s for the kit's) before saying there is no adapter."""
    (tmp_path / "model").mkdir()
    run = _run_dir(tmp_path, "run", model=str(tmp_path / "model"))
    got = _cli_in_fresh_process(["export", run, str(tmp_path / "out"), "--merge"], tmp_path)
    assert got["rc"] == 2
    assert "no adapter to merge" in got["err"] and "without --merge" in got["err"]
    assert not reward_that_tells.exists() and not got["transformers"]
