"""The worlds' one worker (``lm.episodes.worker``), as a hostile user meets it: a stop is answered
while the user's code runs (a slow reset, a tool that signals the run), an episode's context is
bounded by the model's positions, and a row naming no environment is one line up front."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from eligibility._signals import Interrupted, stop_on_signals
from eligibility.lm.edge.hf import tool_schema
from eligibility.lm.episodes.chat import Call
from eligibility.lm.episodes.toolbox import Toolbox

ENV = textwrap.dedent(
    '''
    import os, signal, sys, time
    from pathlib import Path

    class Sleepy:
        """Its reset says it started (a file beside it), then sleeps."""

        def reset(self, **kwargs):
            Path(__file__).with_suffix(".started").touch()
            time.sleep(600)

        def ping(self) -> str:
            """Answer pong."""
            return "pong"

    class Signals:
        """Its reset sends SIGTERM to the run (os.getppid(): the run's process), then sleeps."""

        def reset(self, **kwargs):
            os.kill(os.getppid(), signal.SIGTERM)
            time.sleep(600)

        def ping(self) -> str:
            """Answer pong."""
            return "pong"

    class Huge:
        """A reset text of a million characters and one (10 MB tokenized for minutes)."""

        def reset(self, **kwargs):
            return "x" * 1_000_001

        def ping(self) -> str:
            """Answer pong."""
            return "pong"

    class Long:
        """A reset text of 2,000 characters."""

        def reset(self, **kwargs):
            return "x" * 2000

        def ping(self) -> str:
            """Answer pong."""
            return "pong"
    '''
)


@pytest.fixture
def env_file(tmp_path):
    path = tmp_path / "worlds_env.py"
    path.write_text(ENV)
    return path


def test_a_stop_is_answered_while_the_users_code_runs(env_file):
    """72.17, 72.18: a stop that comes during a slow reset ends the wait (the worker closed,
    Interrupted raised) instead of waiting out --tool-timeout; one that came before a request
    stops it before it is sent (an episode that never ends is stopped at its next step)."""
    with stop_on_signals(install=False) as stop:
        box = Toolbox((), f"{env_file}:Sleepy", timeout=300, schema=tool_schema).start()
        started = env_file.with_suffix(".started")
        threading.Thread(target=lambda: (_wait_for(started), stop.set()), daemon=True).start()
        with pytest.raises(Interrupted) as err:
            box.open({})
        assert err.value.signum == signal.SIGTERM
        with pytest.raises(Interrupted):
            box.call(1, Call("ping", {}))
        box.close()


def _wait_for(path: Path) -> None:
    import time

    while not path.exists():
        time.sleep(0.05)


def _kit(tmp_path: Path, weights: bool = False) -> tuple[Path, Path]:
    """A model directory (its tokenizer and a config of 512 positions; weights if asked), the
    rows, a reward ``reward.py:zero``."""
    from lm_user import hf_kit

    model = tmp_path / "model"
    if weights:
        hf_kit.tool_model_dir(model, hf_kit.tool_tokenizer())
    else:  # what the task reads of it: the tokenizer and the positions
        hf_kit.tool_tokenizer().save_pretrained(model)
        (model / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    rows = [{"prompt": [{"role": "user", "content": "Go"}]} for _ in range(2)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    zero = "def zero(completions, **kw):\n    return [0.0] * len(completions)\n"
    (tmp_path / "reward.py").write_text(zero)
    return model, tmp_path / "rows.jsonl"


@pytest.mark.parametrize(
    "world,words",
    [
        # 72.7, 72.22: a 2,000-character reset on a 512-position model is refused in one line,
        # as the same prompt is in a single turn (never trained past the positions, nor allocated)
        ("Long", r"row 0's prompt with its reset\(\) text makes a prompt of \d+ tokens: .* more "
                 "than the model's 512"),
        # 72's re-pass: a reset returning 10 MB was tokenized whole (104 s) before its refusal;
        # text no model's context can hold is refused by its length, untokenized
        ("Huge", r"reset\(\) returned 1,000,001 characters"),
    ],
)  # fmt: skip
def test_a_reset_text_past_what_the_model_reads_is_refused(env_file, tmp_path, world, words):
    from eligibility.lm.config import FinetuneConfig
    from eligibility.lm.usertask import make_task

    model, rows = _kit(tmp_path)
    config = FinetuneConfig(task=f"{tmp_path / 'reward.py'}:zero", prompts=str(rows),
                            model=str(model), environment_factory=f"{env_file}:{world}",
                            max_completion_length=8)  # fmt: skip
    task = make_task(config)
    try:
        with pytest.raises(ValueError, match=words) as err:
            task.world(0)
        assert "\n" not in str(err.value)
    finally:
        task.close()


def test_a_row_naming_no_environment_is_refused_before_the_run(env_file, tmp_path):
    """72.8, 72.9: --env a=…,b=… with a row whose environment is unknown, or missing: one line
    naming the row and the environments given, before any episode (never a KeyError)."""
    from eligibility.lm.config import FinetuneConfig
    from eligibility.lm.usertask import make_task

    model, rows = _kit(tmp_path)
    lines = [{"prompt": [{"role": "user", "content": "Go"}], "environment": "a"},
             {"prompt": [{"role": "user", "content": "Go"}], "environment": "nope"}]  # fmt: skip
    rows.write_text("".join(json.dumps(r) + "\n" for r in lines))
    envs = f"a={env_file}:Long,b={env_file}:Long"
    config = FinetuneConfig(task=f"{tmp_path / 'reward.py'}:zero", prompts=str(rows),
                            model=str(model), environment_factory=envs)  # fmt: skip
    with pytest.raises(ValueError, match=r"row 1 has environment 'nope': each row names one of "
                       r"the environments given \(a, b\)"):  # fmt: skip
        make_task(config)


@pytest.mark.slow
@pytest.mark.parametrize("factory", ["Sleepy", "Signals"])
def test_sigterm_during_the_users_code_checkpoints_and_says_so(env_file, tmp_path, factory):
    """72.17, 72.23 from the command line: SIGTERM during a slow reset (under --tool-timeout
    300), or sent by the user's code itself, ends the run with its line and 143 at once."""
    model, rows = _kit(tmp_path, weights=True)
    argv = [sys.executable, "-m", "eligibility", "finetune", f"{tmp_path / 'reward.py'}:zero",
            "--prompts", str(rows), "--model", str(model), "--env", f"{env_file}:{factory}",
            "--tool-timeout", "300", "--max-updates", "3", "--group-size", "2",
            "--prompts-per-batch", "1", "--max-completion-length", "4", "--no-progress",
            "--target-accuracy", "none", "--out", str(tmp_path / "run")]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env)  # fmt: skip
    if factory == "Sleepy":
        _wait_for(env_file.with_suffix(".started"))
        run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=150)  # a hang guard: the reset sleeps 600 s
    assert run.returncode == 143, err
    assert (
        "Traceback" not in err
        and f"SIGTERM); checkpoint written; resume with: eligibility "
        f"finetune --resume {tmp_path / 'run'}"
        in err
    ), err


def test_a_built_in_task_honours_max_turns_and_refuses_what_it_ignores():
    """72.27: --max-turns on guess is its episodes' bound; --max-tool-calls (0 or 1000000) on a
    task with no tools, or --max-turns on one of single turns, is refused, never saved unused."""
    from eligibility.lm.config import FinetuneConfig
    from eligibility.lm.usertask import make_task

    assert make_task(FinetuneConfig(task="guess", max_turns=2)).max_turns == 2
    assert make_task(FinetuneConfig(task="guess")).max_turns == 3
    for calls in (0, 1_000_000):
        with pytest.raises(ValueError, match="--max-tool-calls given: 'guess' plays its own"):
            make_task(FinetuneConfig(task="guess", max_tool_calls=calls))
    with pytest.raises(ValueError, match="--max-turns given: 'repeat' plays its own world"):
        make_task(FinetuneConfig(task="repeat", max_turns=2))


def test_an_async_reward_function_is_awaited():
    """75.2: an ``async def`` reward function of a task of prompts is awaited, as TRL's."""
    from eligibility.lm.rewards import Rewards

    async def half(completions, **kwargs):
        return [0.5] * len(completions)

    with Rewards([half], timeout=10) as rewards:
        r, scorable, *_ = rewards(["p", "q"], ["a", "b"], [[1], [2]], {})
    assert r.tolist() == [0.5, 0.5] and scorable.all()
