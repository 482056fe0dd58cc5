"""Rough edges of ``finetune``, ``export`` and ``evaluate`` as a user met them, each held by
the behaviour that fixed it.

Truth: the command line's exit status and stderr, the files a run leaves, and a loader that
fails the test when it is called (what was loaded before a refusal).
"""

from __future__ import annotations

import json

import pytest

from test_rough_edges import _err


@pytest.fixture
def nothing_loads(monkeypatch):
    """Loading a run's model and task (and with it the user's rewards) fails the test."""
    from eligibility.lm import runs

    def load(run_dir):
        raise AssertionError(f"export loaded the run in {run_dir} before refusing it")

    monkeypatch.setattr(runs, "load", load)


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


def test_export_of_a_tiny_model_run_is_refused_before_loading_anything(
    tmp_path, capsys, reward_that_tells, nothing_loads
):
    """It used to build the task (calling the user's reward) and the model, 17 s, first."""
    run = _run_dir(tmp_path, "run", model="tiny")
    rc, err = _err(capsys, ["export", run, str(tmp_path / "out")])
    assert rc == 2
    assert "tiny transformer" in err and err.count("\n") == 1, err
    assert not reward_that_tells.exists() and not (tmp_path / "out").exists()


def test_export_merge_of_a_full_fine_tune_is_refused_before_loading_anything(
    tmp_path, capsys, reward_that_tells, nothing_loads
):
    """It used to load the model (22 s for the kit's) before saying there is no adapter."""
    (tmp_path / "model").mkdir()
    run = _run_dir(tmp_path, "run", model=str(tmp_path / "model"))
    rc, err = _err(capsys, ["export", run, str(tmp_path / "out"), "--merge"])
    assert rc == 2
    assert "no adapter to merge" in err and "without --merge" in err and err.count("\n") == 1
    assert not reward_that_tells.exists()


@pytest.mark.slow  # a run of finetune, then its resume (the run layer's refusal: test_runs)
def test_resume_of_a_run_whose_metrics_were_deleted_is_refused_in_one_line(tmp_path, capsys):
    """It continued silently: the history before the checkpoint, its curve and the watches'
    replay gone, and metrics.csv restarted at the next update."""
    run = tmp_path / "run"
    argv = ["finetune", "repeat", "--max-updates", "1", "--d-model", "8", "--n-head", "2"]
    argv += ["--group-size", "2", "--prompts-per-batch", "1", "--checkpoint-every", "1"]
    assert _err(capsys, [*argv, "--no-progress", "--out", str(run)])[0] == 0
    (run / "metrics.csv").unlink()
    rc, err = _err(capsys, ["finetune", "--resume", str(run), "--max-updates", "2"])
    assert rc == 2
    assert "metrics.csv is missing" in err and err.count("\n") == 1, err
    assert not (run / "metrics.csv").exists()


def test_a_factory_model_with_no_vocabulary_is_one_line_naming_what_to_return(tmp_path, capsys):
    """An ``nn.Module`` with neither ``config`` nor ``get_output_embeddings()``: AttributeError
    traceback in ``vocab_of``."""
    (tmp_path / "mymodel.py").write_text(
        "from torch import nn\n"
        "def build():\n"
        "    return nn.Sequential(nn.Embedding(64, 8), nn.Linear(8, 64))\n"
    )
    run = tmp_path / "run"
    argv = ["finetune", "repeat", "--model", f"{tmp_path / 'mymodel.py'}:build"]
    rc, err = _err(capsys, [*argv, "--max-updates", "1", "--out", str(run)])
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "the model (Sequential) declares no vocabulary" in err, err
    assert "a factory must return a Hugging Face causal LM" in err and not run.exists()


def test_a_resume_names_an_option_by_its_own_flag(tmp_path, capsys, reward_that_tells):
    """``--env`` given to a resume was named --environment-factory, a flag that does not exist."""
    run = _run_dir(tmp_path, "run", model="tiny")
    rc, err = _err(capsys, ["finetune", "--resume", run, "--env", "a=x.py:E"])
    assert rc == 2 and err.count("\n") == 1, err
    assert "these options differ from it: --env 'a=x.py:E' (the run has None)" in err, err


SYSTEM = {"role": "system", "content": "copy a b c d : copy d c b a"}  # in hf_kit's words
DATA = [{"prompt": [SYSTEM, {"role": "user", "content": f"copy {w}"}]} for w in "ab"]
DATA.append({"prompt": "copy c d"})  # a standard prompt is shown as it is


def _user_task(tmp_path, model_dir):
    """FinetuneConfig of a user task on DATA with hf_kit's tokenizer (and chat template)."""
    from eligibility.lm import FinetuneConfig

    (tmp_path / "rew.py").write_text(
        "def r(completions, **kw):\n    return [0.0] * len(completions)\n"
    )
    return FinetuneConfig(
        f"{tmp_path}/rew.py:r",
        model=str(model_dir),
        prompts=str(tmp_path / "p.jsonl"),
        max_completion_length=2,
        dtype="float32",
        out=str(tmp_path / "run"),
    )


def _hf_kit():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from lm_user import hf_kit

    return hf_kit


def test_a_user_tasks_prompts_are_shown_as_the_user_wrote_them(tmp_path):
    """What evaluate prints of each prompt: the user's message; the ids hold the template. The
    reward is called here (``tests/_user_code_here.py``): the prompts, not the reward, are held."""
    pytest.importorskip("datasets")  # in the parent: the reward workers fork from it
    from _user_code_here import rewards_here
    from eligibility.lm.usertask import make_task

    _hf_kit().tokenizer().save_pretrained(tmp_path / "tok")
    with rewards_here():
        task = make_task(_user_task(tmp_path, tmp_path / "tok"), records=(DATA, None))
    try:
        ev = task.evaluation
        assert [ev.prompt_text(i) for i in range(3)] == ["copy a", "copy b", "copy c d"]
        assert SYSTEM["content"] in ev.text(ev.prompts[0])  # what was printed: all of it
    finally:
        task.close()


@pytest.mark.slow  # builds a transformers Llama: its modules' import is seconds
def test_evaluate_shows_the_users_message_not_the_whole_chat_template(
    tmp_path, capsys, monkeypatch
):
    """Each example was its chat-templated prompt decoded whole (the system prompt, the roles)
    before its completion; it is the user's message now, as it stands in their data."""
    pytest.importorskip("datasets")  # in the parent: the reward workers fork from it
    import sys
    from pathlib import Path

    from eligibility.cli import main
    from eligibility.lm import FinetuneConfig, runs
    from eligibility.lm.build import task_and_model

    sys.path.insert(0, str(Path(__file__).parent))
    from lm_user import hf_kit

    system = {"role": "system", "content": "copy a b c d : copy d c b a"}  # in its vocabulary
    data = [{"prompt": [system, {"role": "user", "content": f"copy {w}"}]} for w in "ab"]
    data.append({"prompt": "copy c d"})  # a standard prompt is shown as it is
    (tmp_path / "rew.py").write_text(
        "def r(completions, **kw):\n    return [0.0] * len(completions)\n"
    )
    config = FinetuneConfig(
        f"{tmp_path}/rew.py:r",
        model=str(hf_kit.model_dir(tmp_path / "model")),
        prompts=str(tmp_path / "p.jsonl"),
        max_completion_length=2,
        dtype="float32",
        out=str(tmp_path / "run"),
    )
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps(config.to_dict()))

    def load(run_dir):  # the run's model as built (its checkpoint's weights are not the point)
        task, model, _ = task_and_model(config, records=(DATA, None))
        return config, model, task

    monkeypatch.setattr(runs, "load", load)
    assert main(["evaluate", str(tmp_path / "run")]) == 0
    examples = capsys.readouterr().out.splitlines()[1:]
    assert [e.split(" → ")[0].strip() for e in examples] == ["copy a", "copy b", "copy c d"]


@pytest.mark.parametrize(
    "flags,said",
    [
        (["--top-k", "-1"], "--top-k"),
        (["--min-p", "1.5"], "min_p"),
        (["--min-p", "1"], "min_p"),  # [0, 1), as check --min-p takes it
        (["--repetition-penalty", "0"], "repetition_penalty"),
        (["--report-to", "comet_ml"], "comet_ml"),
        (["--defaults", "nope"], "--defaults"),
        (["--config", "missing.yaml"], "missing.yaml"),
        (["--config", "bad.yaml"], "bad.yaml"),
        (["--config", "ok.yaml", "--resume", "somewhere"], "--config"),
    ],
)  # fmt: skip
def test_sampling_tracker_defaults_and_recipe_options_refuse_bad_input(
    tmp_path, monkeypatch, capsys, flags, said
):
    """The sampling, tracker, defaults and recipe options: exit 2, one line on stderr, no
    traceback, and nothing written beside the input files."""
    from eligibility.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("a: b: c\n")
    (tmp_path / "ok.yaml").write_text("learning_rate: 0.001\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    try:
        rc = main(["finetune", "repeat", "--max-updates", "1", "--no-progress", *flags])
    except SystemExit as stop:  # refused by the parser
        rc = stop.code
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and said in err[0] and "Traceback" not in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
