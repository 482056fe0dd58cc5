"""Gymnasium environments of text (``finetune module:Id``): the reply is the action, the
observation the next user turn, each step's reward the turn's; only the model's tokens scored."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("gymnasium")
sys.path.insert(0, str(Path(__file__).parent))

from _user_code_here import worlds_here  # noqa: E402
from eligibility.lm.edge.model import TinyLM  # noqa: E402
from eligibility.lm.episodes.episode_rollout import play  # noqa: E402
from eligibility.lm.episodes.gym import text_env_id, text_task  # noqa: E402

ENV = "_text_env:EchoText-v0"


@pytest.fixture
def here():
    """The test's environments served here, not in a forked worker (``tests/_user_code_here.py``):
    the tests that take it hold the episodes, not the worker (the module's other tests do)."""
    with worlds_here():
        yield


def test_a_text_environment_is_played_turn_by_turn(here):
    assert text_env_id(ENV) == "EchoText-v0" and text_env_id("_text_env:Echo") is None
    task = text_task(ENV, episodes=4, held_out=2, max_turns=5)
    try:
        assert task.vocab[2:] == ("\n", "a", "b")
        torch.manual_seed(0)
        model = TinyLM(task.vocab_size, 8, 1, 2, 64)
        turned = []
        batch = play(model, task, [0, 1, 2, 3], t_max=2, rng=np.random.default_rng(0),
                     turned=lambda k, playing: turned.append((k, playing)))  # fmt: skip
        assert (batch.turns == 2).all()  # the environment ends at its second step
        assert turned == [(1, 4), (2, 4)]  # 90: the progress's word after each turn
        assert batch.turn_rewards.shape == (4, 2)
        assert set(batch.turn_rewards.flatten().tolist()) <= {0.0, 0.5}
        for row, m, prompt in zip(batch.completion_ids.tolist(), batch.completion_mask.tolist(),
                                  batch.prompt_ids.tolist(), strict=True):  # fmt: skip
            world = "".join(task.vocab[t] for t, k in zip(row, m, strict=True) if not k)
            assert world.strip("\n<eos>") in ("a", "b")  # the second observation, masked
            assert task.vocab[prompt[-2]] in "ab"  # the first, the prompt
    finally:
        task.close()


def test_the_episodes_steps_of_a_turn_run_at_once_and_play_as_one_after_another():
    """Four episodes' steps of a turn, in the worker, each waiting at a barrier of four (none
    passes alone): the turn completes, and the episodes are Echo's own played one step after
    another (the same seeds, the same replies)."""
    from eligibility.lm.episodes.gym import probe

    batches = []
    for env_id, workers in (("_text_env:MeetText-v0", None), ("_text_env:EchoText-v0", 1)):
        envs = probe(env_id, workers=workers)
        task = text_task(env_id, episodes=4, held_out=1, max_turns=5, envs=envs)
        try:
            torch.manual_seed(0)
            model = TinyLM(task.vocab_size, 8, 1, 2, 64)
            batches.append(play(model, task, [0, 1, 2, 3], t_max=2, rng=np.random.default_rng(0)))
        finally:
            task.close()
    met, one = batches
    assert (met.turns == 2).all()  # both turns' four steps passed the barrier
    for name in ("prompt_ids", "completion_ids", "completion_mask", "turn_rewards"):
        assert torch.equal(getattr(met, name), getattr(one, name)), name


def test_the_evaluation_reads_a_text_environments_is_success(here):
    """75.3: a step's info["is_success"] (Gymnasium's word) is the episode's success: the
    evaluation counts it, though the return is 0."""
    from eligibility.lm.episodes.episode_rollout import evaluate_episodes

    task = text_task("_text_env:StatedText-v0", episodes=2, held_out=3, max_turns=5)
    try:
        model = TinyLM(task.vocab_size, 8, 1, 2, 64)
        batch = play(model, task, [0, 1], t_max=2, rng=np.random.default_rng(0))
        assert batch.success.tolist() == [1.0, 1.0] and batch.returns.tolist() == [0.0, 0.0]
        ev = evaluate_episodes(model, task, 2, 8, keep=1)
        assert ev.accuracy == 1.0 and ev.mean_reward == 0.0 and ev.completions == 3
        (shown,) = ev.episodes  # 91: the observations the model read as user messages
        (first,) = shown["prompt"]
        assert first["role"] == "user" and first["content"] in ("a", "b")
        roles = [m["role"] for m in shown["completion"]]
        assert roles == ["assistant", "user", "assistant"] and len(shown["rewards"]) == 2
        assert shown["completion"][1]["content"] in ("a", "b")  # Echo's next letter
        assert "system" not in shown and ev.systems == []  # the built-in model's: BOS alone
    finally:
        task.close()


def test_an_environment_that_raises_is_one_line():
    task = text_task("_text_env:BrokenText-v0", episodes=1, held_out=1)
    try:
        world = task.world(0)
        with pytest.raises(
            ValueError, match=r"BrokenText-v0 at step: .*the environment broke \(at"
        ):
            world.step([task.vocab.index("a")], False)
    finally:
        task.close()


@pytest.mark.slow
def test_finetune_trains_on_a_text_environment(tmp_path, monkeypatch):
    """``eligibility finetune module:Id`` on the built-in model: the rewards per step rise."""
    import csv

    from eligibility.cli import main

    monkeypatch.chdir(Path(__file__).parent)  # module:Id imports from the current directory
    out = tmp_path / "run"
    argv = ["finetune", ENV, "--max-updates", "40", "--eval-every", "10", "--no-progress"]
    assert main([*argv, "--max-completion-length", "2", "--out", str(out)]) in (0, 1)
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    first = np.mean([float(r["mean_reward"]) for r in rows[:5]])
    last = np.mean([float(r["mean_reward"]) for r in rows[-5:]])
    assert last > first + 0.2 and float(rows[-1]["turns"]) == 2


@pytest.mark.slow
def test_a_runs_accuracy_and_eval_accuracy_read_the_environments_is_success(tmp_path, monkeypatch):
    """91.1: an environment that says every episode succeeded and pays nothing: the batch's
    accuracy and the greedy one both 1 (the batch's was 0, as its return), and the column
    says the environment decided."""
    import csv

    from eligibility.cli import main

    monkeypatch.chdir(Path(__file__).parent)
    out = tmp_path / "run"
    argv = ["finetune", "_text_env:StatedText-v0", "--max-updates", "1", "--eval-every", "1"]
    assert main([*argv, "--no-progress", "--max-completion-length", "2", "--out", str(out)]) in (
        0,
        1,
    )
    (row,) = csv.DictReader((out / "metrics.csv").open())
    assert float(row["accuracy"]) == float(row["eval_accuracy"]) == 1.0
    assert float(row["success_stated"]) == 1.0


HOSTILE = """
import gymnasium as gym
from gymnasium import spaces

import _text_env


class Numbers(_text_env.Echo):
    def reset(self, *, seed=None, options=None):
        return 12345, {}


class Upper(_text_env.Echo):
    def step(self, action):
        return "AB", 0.0, False, False, {}


gym.register("NumbersText-v0", entry_point=Numbers)
gym.register("UpperText-v0", entry_point=Upper)
"""


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """A user's module of text environments, beside ``_text_env`` on the path."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    (tmp_path / "hostile_text.py").write_text(HOSTILE)
    return tmp_path / "hostile_text.py"


def test_an_id_its_module_does_not_register_says_so(hostile):
    """A misspelt id or a file path (75's minor point): never "needs --prompts FILE"."""
    with pytest.raises(ValueError, match=r"no such environment registered.*did you mean EchoText"):
        text_env_id("_text_env:EchoTxt-v0")
    assert text_env_id(f"{hostile}:UpperText-v0") == "UpperText-v0"  # a file imports as well


@pytest.mark.parametrize(
    ("body", "timeout", "words"),
    [
        (
            "print('hello from import')\nimport sys\nsys.exit(3)",
            1,
            "does not import: SystemExit: 3",
        ),
        ("import os\nos._exit(0)", 1, "ended the process (exit status 0)"),
        ("import nosuchmodule_at_all", 1, "does not import: ModuleNotFoundError"),
        ("import time\ntime.sleep(60)", 0.2, "did not return within 0.2 s (--tool-timeout)"),
    ],
)
def test_a_module_is_imported_in_the_worker(tmp_path, body, timeout, words):
    """19, 21: the import runs in the timed worker: an exit or an error at import is one line,
    a sleep is stopped at the timeout (0.2 s: the sleep is the only case that waits for it)."""
    (tmp_path / "badenv.py").write_text(body)
    with pytest.raises(ValueError) as err:
        text_env_id(f"{tmp_path / 'badenv.py'}:Any-v0", timeout=timeout)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow  # a subprocess of the CLI; fast cover: test_a_module_is_imported_in_the_worker
def test_a_module_that_prints_and_exits_at_import_is_one_line_on_the_command_line(tmp_path):
    """21: its print does not break --format json (stdout stays empty); exit 2, one line."""
    import os
    import subprocess

    (tmp_path / "badenv.py").write_text("print('hello from import')\nimport sys\nsys.exit(3)")
    argv = [sys.executable, "-m", "eligibility", "finetune", "badenv:Any-v0", "--format", "json"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})  # fmt: skip
    assert done.returncode == 2 and done.stdout == "", done
    lines = [x for x in done.stderr.splitlines() if "hello" not in x]
    assert len(lines) == 1 and "badenv does not import: SystemExit: 3" in lines[0], lines


@pytest.mark.parametrize(
    ("env_id", "words"),
    [
        ("NumbersText-v0", r"reset\(\) returned an int \(12345\) as its observation"),
        ("UpperText-v0", r"observation 'AB' holds 'AB', outside its spaces' character sets"),
    ],
)
def test_an_observation_the_model_cannot_read_is_refused(hostile, env_id, words):
    """25, 26: not text, or characters the built-in model has no token for: never silently
    empty."""
    task = text_task(f"{hostile}:{env_id}", episodes=1, held_out=1)
    try:
        with pytest.raises(ValueError, match=words):
            task.world(0).step([task.vocab.index("a")], False)
    finally:
        task.close()


def _two_played(**config):
    """K_max and two episodes of the run ``FinetuneConfig(**config)`` makes, on a tiny model."""
    from eligibility.lm.config import FinetuneConfig
    from eligibility.lm.usertask import make_task

    task = make_task(FinetuneConfig(**config))
    try:
        torch.manual_seed(0)
        model = TinyLM(task.vocab_size, 8, 1, 2, 64)
        return task.max_turns, play(model, task, [0, 1], t_max=2, rng=np.random.default_rng(0))
    finally:
        task.close()


@pytest.mark.parametrize(
    ("env_id", "steps"), [("_text_env:EightText-v0", 8), ("_text_env:LongText-v0", 8)]
)
def test_an_episode_runs_to_the_environments_own_end_by_default(
    monkeypatch, capfd, here, env_id, steps
):
    """91.2: without --max-turns an episode runs to its environment's end: its termination
    (8 steps), or its registered max_episode_steps (8, Gymnasium's TimeLimit), which is also
    K_max; neither is a cut, and nothing is said."""
    monkeypatch.chdir(Path(__file__).parent)
    _, batch = _two_played(task=env_id, max_completion_length=2)
    assert batch.turns.tolist() == [steps, steps] and not batch.cut.any()  # was: 5, cut
    assert "cut there" not in capfd.readouterr().err


def test_a_runaway_environment_is_cut_at_the_bound_and_says_so(monkeypatch, capfd, here):
    """91.2: a world that never ends and registers no limit is cut at the bound against
    runaway worlds (:data:`RUNAWAY_TURNS`), said once, counted as cut."""
    from eligibility.lm.episodes import gym as text

    monkeypatch.chdir(Path(__file__).parent)
    monkeypatch.setattr(text, "RUNAWAY_TURNS", 6)
    k_max, batch = _two_played(task="_text_env:EndlessText-v0", max_completion_length=2)
    assert k_max == 6 and batch.turns.tolist() == [6, 6] and batch.cut.all()
    err = capfd.readouterr().err
    assert err.count("reached 6 replies") == 1, err
    assert "registers no max_episode_steps" in err and "--max-turns" in err, err


def test_a_registered_reward_threshold_is_the_default_success(monkeypatch, here):
    """91.1: an environment that states no is_success is judged by its return; where it
    registers a reward_threshold (Gymnasium's "solved"), that is the default --success-return,
    saved so; --success-return overrides it; without one, a return of exactly 1."""
    from eligibility.lm.build import task_and_model
    from eligibility.lm.config import FinetuneConfig

    monkeypatch.chdir(Path(__file__).parent)
    for given, want in ((None, 0.5), (0.25, 0.25)):
        task, _, _ = task_and_model(
            FinetuneConfig(task="_text_env:HalfText-v0", success_return=given)
        )
        assert task.success_return == task.evaluation.success_return == want
        task.close()
    task, _, _ = task_and_model(FinetuneConfig(task=ENV))
    assert task.success_return is None
    task.close()


def test_max_turns_bounds_an_episode_and_max_tool_calls_is_refused(
    tmp_path, monkeypatch, capfd, here
):
    """75.4, 27: a text environment's replies bounded by --max-turns (the cut said once on
    stderr); --max-tool-calls, which it has no use for, refused in one line."""
    from eligibility.lm.config import FinetuneConfig
    from eligibility.lm.usertask import make_task

    monkeypatch.chdir(Path(__file__).parent)
    _, batch = _two_played(task=ENV, max_turns=1)
    assert (batch.turns == 1).all()
    assert capfd.readouterr().err.count("reached 1 replies (--max-turns)") == 1
    with pytest.raises(ValueError, match=r"--max-tool-calls given: .* bounded by --max-turns"):
        make_task(FinetuneConfig(task=ENV, max_tool_calls=7))
