"""The rough edges a new user hit (issue 39), each held by the behaviour that fixed it.

Truth: the command line's own exit status and stderr, the config's ValueError, and hand-counted
probabilities of improvement.
"""

from __future__ import annotations

import sys

import pytest

from eligibility.cli import main


def _err(capsys, argv) -> tuple[int, str]:
    try:
        rc = main(argv)
    except SystemExit as stop:
        rc = stop.code
    return rc, capsys.readouterr().err


# -- finetune's data, model and run directory --------------------------------------------------


@pytest.fixture
def user(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rew.py").write_text(
        "def r(completions, **kw):\n    return [1.0] * len(completions)\n"
    )
    return tmp_path


def test_a_missing_prompts_file_is_named_not_cannot_write(user, capsys):
    rc, err = _err(capsys, ["finetune", "rew.py:r", "--prompts", "nothere.jsonl", "--out", "o"])
    assert rc == 2
    assert "--prompts" in err and "no such file" in err and "cannot write" not in err


@pytest.mark.slow  # the data are read in a protected worker process
def test_a_truncated_jsonl_names_its_file_and_line(user, capsys):
    (user / "t.jsonl").write_text('{"prompt": "abc"}\n{"prompt": "ab')
    rc, err = _err(capsys, ["finetune", "rew.py:r", "--prompts", "t.jsonl", "--out", "o"])
    assert rc == 2
    assert "t.jsonl, line 2" in err and err.count("\n") == 1


@pytest.mark.slow  # the data are read in a protected worker process
def test_an_empty_jsonl_says_it_holds_no_prompts(user, capsys):
    (user / "e.jsonl").write_text("")
    rc, err = _err(capsys, ["finetune", "rew.py:r", "--prompts", "e.jsonl", "--out", "o"])
    assert rc == 2
    assert "e.jsonl is empty" in err and "StopIteration" not in err


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"prompt": "abc"}\n{"prompt": "ab', "j.jsonl, line 2, column 12: does not parse as JSON"),
        ('{"prompt": "abc"}\n\n[1, 2]\n', "j.jsonl, line 3: a JSON list, not an object"),
        ("", "j.jsonl is empty: it holds no prompts"),
    ],
)
def test_a_jsonl_that_does_not_read_is_named_by_file_and_line(tmp_path, text, message):
    from eligibility.lm.edge.data import load_records

    (tmp_path / "j.jsonl").write_text(text)
    with pytest.raises(ValueError, match=message):
        load_records(str(tmp_path / "j.jsonl"))


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("./missing", "no such directory"),
        ("models/missing", "no such directory"),
        ("weights.bin", "a file that is not GGUF"),
        ("smollm", "not a model"),
    ],
)
def test_a_model_that_cannot_be_one_says_what_it_is(tmp_path, monkeypatch, spec, said):
    """The refusal before anything loads (the slow test below: through the command)."""
    pytest.importorskip("torch")
    from eligibility.lm.edge.loaders import model_kind

    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights.bin").write_bytes(b"not a model")
    with pytest.raises(ValueError, match=f"^--model '{spec}': {said}; give tiny"):
        model_kind(spec)


@pytest.mark.slow  # the data are read in a protected worker process
def test_a_missing_model_directory_is_blamed_not_the_chat_template(user, capsys):
    (user / "c.jsonl").write_text('{"prompt": [{"role": "user", "content": "hi"}]}\n')
    argv = ["finetune", "rew.py:r", "--prompts", "c.jsonl", "--model", "./missing", "--out", "o"]
    rc, err = _err(capsys, argv)
    assert rc == 2
    assert "--model './missing': no such directory" in err and "chat template" not in err


def test_finetune_does_not_recommend_an_overwrite_it_does_not_have(user, capsys):
    (user / "held").mkdir()
    (user / "held" / "config.json").write_text("{}")
    rc, err = _err(capsys, ["finetune", "repeat", "--out", "held", "--max-updates", "1"])
    assert rc == 2
    assert "already holds a run" in err and "--overwrite" not in err


# -- finetune's flags ----------------------------------------------------------------------------


@pytest.mark.parametrize("k", ["-1", "0"])
def test_epochs_per_batch_below_one_is_one_message(capsys, k):
    rc, err = _err(capsys, ["finetune", "repeat", "--epochs-per-batch", k])
    assert rc == 2
    assert f"expected an integer ≥ 1, got {k}" in err


@pytest.mark.parametrize("setting", [{"clip": 0.2}, {"ratio": "token"}])
def test_clip_and_ratio_with_one_step_per_batch_are_refused(setting):
    from eligibility.lm import FinetuneConfig

    name = next(iter(setting))
    with pytest.raises(ValueError, match=f"--{name}.*--epochs-per-batch 1"):
        FinetuneConfig("repeat", **setting)
    FinetuneConfig("repeat", epochs_per_batch=2, **setting)  # K > 1: they act


@pytest.fixture
def captured(monkeypatch):
    pytest.importorskip("torch")
    import eligibility.lm.trainer as trainer

    seen = {}

    def fake(config, **kw):
        seen["config"] = config
        raise KeyboardInterrupt  # stop before anything runs

    monkeypatch.setattr(trainer, "finetune", fake)
    return seen


def test_trls_max_steps_are_optimiser_steps(captured, capsys, tmp_path):
    """TRL's ``max_steps`` counts optimiser steps, ``num_iterations`` of them per generation
    batch: 12 steps at K = 3 are 4 updates (batches) here."""
    argv = ["finetune", "repeat", "--max_steps", "12", "--num_iterations", "3"]
    _err(capsys, [*argv, "--out", str(tmp_path / "r")])
    config = captured["config"]
    assert (config.max_updates, config.epochs_per_batch) == (4, 3)
    rc, err = _err(capsys, ["finetune", "repeat", "--max_steps", "10", "--epochs-per-batch", "3"])
    assert rc == 2 and "multiple of 3" in err


@pytest.mark.slow  # two updates of a tiny model: seconds
def test_the_loop_takes_k_optimiser_steps_per_batch(monkeypatch):
    pytest.importorskip("torch")
    import eligibility.lm.trainer as trainer
    import eligibility.lm.update as update
    from eligibility.lm import FinetuneConfig

    steps = []
    real = update._step
    monkeypatch.setattr(update, "_step", lambda *a: steps.append(a[-1]) or real(*a))
    tiny = dict(d_model=16, n_layer=1, n_head=2, group_size=2, prompts_per_batch=2)
    config = FinetuneConfig(
        "repeat", max_updates=2, epochs_per_batch=3, eval_every=0, progress=False, **tiny
    )
    result = trainer.finetune(config)
    assert result.updates == 2 and len(steps) == 6
    assert [w.split(" of ")[0] for w in steps] == [
        "at update 1", "on step 2", "on step 3", "at update 2", "on step 2", "on step 3",
    ]  # fmt: skip


# -- train's module:Id imports from the current directory, as finetune's module:fn -------------


def test_train_env_module_beside_the_user_imports(tmp_path, monkeypatch):
    pytest.importorskip("gymnasium")
    from eligibility.reinforce.envs import resolve_id

    (tmp_path / "myenvs_h39.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('GuessSignH39-v0',\n"
        "             entry_point='gymnasium.envs.classic_control:CartPoleEnv')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "myenvs_h39", raising=False)
    assert resolve_id("myenvs_h39:GuessSignH39-v0") == "GuessSignH39-v0"


# -- the sweep compares what carries information ------------------------------------------------


def _run(setting: str, steps: int | None, final: float) -> dict:
    return {
        "setting": setting, "steps_to_target": steps, "final_eval_return": final,
        "target_return": 475.0,
    }  # fmt: skip


def test_the_sweep_compares_steps_to_the_target_not_final_returns_at_it():
    from eligibility.sweep.run import IMPROVEMENT_TITLES, _improvement

    groups = {  # a reaches the target sooner every time; its final returns are the lower noise
        "a": [_run("a", 1000, 475.0), _run("a", 2000, 475.1)],
        "b": [_run("b", 3000, 475.9), _run("b", None, 300.0)],
    }
    improvement, by = _improvement(groups)
    assert by == "steps_to_target"
    assert improvement["a"]["b"] == 1.0 and improvement["b"]["a"] == 0.0
    assert "fewer steps" in IMPROVEMENT_TITLES[by]
    never = {"a": [_run("a", None, 1.0)], "b": [_run("b", None, 2.0)]}
    assert _improvement(never)[0]["a"]["b"] == 0.5  # neither reached it: a tie


@pytest.mark.slow  # imports TRL
def test_a_bad_beta_in_a_trl_config_names_the_key():
    pytest.importorskip("trl")
    from eligibility.check.frameworks.trl import _beta

    with pytest.raises(ValueError, match=r"beta .*must be a number; got 'abc'"):
        _beta("grpo", {"beta": "abc"})


def _train_run(tmp_path):
    """A directory holding a run of eligibility train (its config.json)."""
    from eligibility._io import atomic_write_json
    from eligibility.reinforce.config import Config

    run = tmp_path / "cartpole"
    run.mkdir()
    atomic_write_json(run / "config.json", Config.for_env("CartPole-v1").to_dict())
    return run


def test_export_of_a_train_run_says_what_the_run_is(tmp_path, capsys):
    """Bug: export said "no config.json" of a train run, which has one."""
    run = _train_run(tmp_path)
    code, err = _err(capsys, ["export", str(run), str(tmp_path / "out")])
    assert code == 2 and "is a run of eligibility train, not of eligibility finetune" in err
    assert "no config.json" not in err


def test_finetune_resume_of_a_train_run_names_the_command_that_resumes_it(tmp_path, capsys):
    """Bug: finetune --resume on a train run printed its 28 keys as unknown config keys."""
    run = _train_run(tmp_path)
    code, err = _err(capsys, ["finetune", "--resume", str(run)])
    assert code == 2 and f"resume it with eligibility train --resume {run}" in err
    assert "unknown config keys" not in err
