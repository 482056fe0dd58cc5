"""What a hostile re-pass of issue 72 still found: each input is one line and exit 2 (or a
``ValueError`` naming it in the library), nothing waits on it, and no history is lost.

Truth: the command line's exit status and stderr, the bytes a run directory holds before and
after, and ``float`` arithmetic (1e308 + 1e308 overflows).
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from eligibility.cli import main
from eligibility.lm.edge import data
from eligibility.lm.rewards import Rewards, call_all
from eligibility.runs.directory import read_history
from test_finetune_recipe import _Built, built  # noqa: F401  (a fixture: finetune stops where it would train)


def _err(capsys, argv: list[str]) -> tuple[int | None, str]:
    """(exit status, stderr) of ``main(argv)``; None where it reached training."""
    try:
        rc = main(argv)
    except SystemExit as stop:
        rc = stop.code
    except _Built:
        rc = None
    return rc, capsys.readouterr().err


def _one_error_line(err: str) -> str:
    """The one line on stderr, an error, with no note before it."""
    assert err.count("\n") == 1 and "error:" in err and "note:" not in err, err
    return err


@pytest.fixture
def fifo(tmp_path):
    """A named pipe whose writer gives it a recipe and a prompt, then closes (no wait: the
    reader sees an end either way); released at the end if nothing read it."""
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)

    def write() -> None:
        with open(path, "w") as f:  # blocks until a reader opens it
            f.write('{"prompt": "ab"}\n')

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    yield path
    if writer.is_alive():  # refused unread: open it so the writer ends
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        writer.join(5)
        os.close(fd)


@pytest.mark.usefixtures("built")
def test_a_recipe_that_is_a_named_pipe_is_refused_unread(capsys, fifo):
    """``--config`` on a FIFO waited for a writer forever (with one, it read from it)."""
    rc, err = _err(capsys, ["finetune", "repeat", "--config", str(fifo)])
    assert rc == 2 and "not a regular file" in _one_error_line(err)


def test_a_framework_config_that_is_a_pipe_or_a_device_is_refused_unread(capsys, fifo):
    """``check --framework trl --config FIFO`` waited forever; ``/dev/zero`` filled memory."""
    for source in [str(fifo)] + (["/dev/zero"] if os.path.exists("/dev/zero") else []):
        rc, err = _err(capsys, ["check", "--framework", "trl", "--config", source])
        assert rc == 2 and "not a regular file" in _one_error_line(err) and source in err


def test_prompts_that_are_a_pipe_or_a_device_are_refused_unread(capsys, fifo, tmp_path):
    """``--prompts /dev/zero`` hashed an endless file; a FIFO waited for its writer."""
    (tmp_path / "rew.py").write_text(
        "def r(completions, **kw):\n    return [0.0] * len(completions)\n"
    )
    task = f"{tmp_path / 'rew.py'}:r"
    rc, err = _err(capsys, ["finetune", task, "--prompts", str(fifo)])
    assert rc == 2 and "named pipe" in _one_error_line(err) and str(fifo) in err
    if os.path.exists("/dev/zero"):
        rc, err = _err(capsys, ["finetune", task, "--prompts", "/dev/zero"])
        assert rc == 2 and "character device" in _one_error_line(err)
    with pytest.raises(ValueError, match=r"--eval-prompts .*named pipe"):
        data.load_records(str(fifo), "--eval-prompts")


def test_prompt_data_over_the_bound_is_refused_before_it_is_read(capsys, tmp_path, monkeypatch):
    """A huge file was hashed, then parsed into memory whole: now its size is checked first,
    a file alone or the files of a directory in all."""
    monkeypatch.setattr(data, "MAX_BYTES", 40)
    (tmp_path / "rew.py").write_text(
        "def r(completions, **kw):\n    return [0.0] * len(completions)\n"
    )
    big = tmp_path / "p.jsonl"
    big.write_text('{"prompt": "ab"}\n' * 3)  # 51 bytes
    rc, err = _err(capsys, ["finetune", f"{tmp_path / 'rew.py'}:r", "--prompts", str(big)])
    assert rc == 2 and "GB" in _one_error_line(err) and "give a sample" in err
    folder = tmp_path / "saved"
    folder.mkdir()
    for n in range(3):
        (folder / f"part{n}.arrow").write_bytes(b"x" * 20)
    with pytest.raises(ValueError, match="over the"):
        data.fingerprint(str(folder))
    small = tmp_path / "small.jsonl"
    small.write_text('{"prompt": "ab"}\n')
    assert data.load_records(str(small)) == [{"prompt": "ab"}]  # under the bound: read


@pytest.mark.parametrize(
    "argv",
    [("--report-to", "none,tensorboard"), ("--config", "recipe.yaml")],
)
@pytest.mark.usefixtures("built")
def test_none_beside_a_tracker_says_none_stands_alone(capsys, tmp_path, argv):
    """It said "got 'none'", as if none were not a value (transformers refuses it too)."""
    (tmp_path / "recipe.yaml").write_text("report_to: [none, tensorboard]\n")
    argv = [a.replace("recipe.yaml", str(tmp_path / "recipe.yaml")) for a in argv]
    rc, err = _err(capsys, ["finetune", "repeat", *argv])
    assert rc == 2 and "none means no tracker and stands alone" in _one_error_line(err)
    assert "got 'none'" not in err


@pytest.mark.usefixtures("built")
def test_a_model_that_cannot_be_one_is_refused_before_any_note(capsys, tmp_path):
    """``model_name_or_path: /etc/passwd`` said its note, then the error."""
    (tmp_path / "weights.bin").write_text("root:x:0:0\n")
    (tmp_path / "recipe.yaml").write_text(
        f"model_name_or_path: {tmp_path / 'weights.bin'}\nlearning_rate: 1.0e-4\n"
    )
    rc, err = _err(capsys, ["finetune", "repeat", "--config", str(tmp_path / "recipe.yaml")])
    assert rc == 2 and "recipe.yaml: model_name_or_path" in _one_error_line(err)
    assert "give tiny" in err


@pytest.mark.parametrize("target", ["*", "q_proj|v_proj", ".*proj", "a..b"])
@pytest.mark.usefixtures("built")
def test_a_target_module_that_no_module_can_be_named_is_refused_before_any_note(
    capsys, tmp_path, target
):
    """``lora_target_modules: "*"`` printed three notes, then peft's own sentence."""
    (tmp_path / "recipe.yaml").write_text(
        f"use_peft: true\nlora_target_modules: {json.dumps(target)}\n"
    )
    rc, err = _err(capsys, ["finetune", "repeat", "--config", str(tmp_path / "recipe.yaml")])
    assert rc == 2 and "must be module names" in _one_error_line(err)
    assert "recipe.yaml: lora_target_modules" in err


@pytest.mark.slow  # peft imports transformers: seconds; the refusal of a bad name is above
def test_a_target_module_the_model_lacks_is_our_line_naming_its_layers():
    """peft's "Target modules {...} not found in the base model. Please check ..." read as
    ours: which names the model has."""
    from eligibility.lm.edge.lora import wrap
    from eligibility.lm.edge.model import TinyLM

    model = TinyLM(8, 8, 1, 2, 16)
    with pytest.raises(ValueError) as caught:
        wrap(model, r=2, alpha=1.0, dropout=0.0, targets=("q_proj",))
    said = str(caught.value)
    assert said.startswith("--lora-target-modules q_proj: no module of the model is named so")
    assert "qkv" in said and "Please check" not in said


@pytest.mark.parametrize(
    ("recipe", "shown"),
    [
        ('{"lear\\u0000ning_rate": 1}', "lear\\x00ning_rate"),
        ('{"lr\\u0007\\rx": 1}', "lr\\x07\\x0dx"),
    ],
)
def test_control_characters_of_the_users_text_are_escaped_in_an_error(
    capsys, tmp_path, recipe, shown
):
    """A NUL in a recipe's key reached the terminal raw."""
    (tmp_path / "recipe.json").write_text(recipe)
    rc, err = _err(capsys, ["finetune", "repeat", "--config", str(tmp_path / "recipe.json")])
    assert rc == 2 and shown in _one_error_line(err)
    assert not any(ord(c) < 0x20 and c != "\n" for c in err), repr(err)


@pytest.mark.usefixtures("built")
def test_the_recipes_key_is_named_when_its_value_is_out_of_range(capsys, tmp_path):
    """``num_iterations: 0`` said "epochs_per_batch (--epochs-per-batch) must be >= 1"."""
    (tmp_path / "recipe.yaml").write_text("num_iterations: 0\n")
    rc, err = _err(capsys, ["finetune", "repeat", "--config", str(tmp_path / "recipe.yaml")])
    assert rc == 2 and "recipe.yaml: num_iterations 0: epochs_per_batch" in _one_error_line(err)


def _big(completions, **kw):
    return [1e308] * len(completions)


def _also_big(completions, **kw):
    return [1e308] * len(completions)


def test_rewards_whose_weighted_sum_overflows_are_said_so_by_function():
    """1e308 + 1e308 = inf was blamed later as "rewards[0] = inf" (each reward is finite)."""
    assert 1e308 + 1e308 == float("inf")
    with Rewards([_big, _also_big], timeout=30) as rewards:
        with pytest.raises(ValueError, match="overflowed") as caught:
            rewards(["p", "p"], ["a", "b"], [[1], [2]], {})
    said = str(caught.value)
    assert "_big 1e+308 × weight 1" in said and "_also_big 1e+308" in said


class _Unconvertible(float):
    def __float__(self):
        raise RuntimeError("no float for you")


def test_a_reward_whose_conversion_raises_names_the_function_and_the_completion():
    """It read "the reward functions could not be loaded"."""

    def bad(completions, **kw):
        return [0.0, _Unconvertible(1.0)]

    batch = {"prompts": ["p", "p"], "completions": ["a", "b"], "completion_ids": [[1], [2]]}
    with pytest.raises(ValueError) as caught:
        call_all([("rew.py:bad", bad)], {**batch, "columns": {}})
    said = str(caught.value)
    assert "rew.py:bad" in said and "completion 1" in said and "could not be converted" in said
    assert "no float for you" in said


_ROWS = "update,loss,time\n1,0.5,1.0\n2,0.25,2.0\n"


@pytest.mark.parametrize("tail", ["\0\0\0\0", "\0\0\n", "garbage", "3,0.1,abc"])
def test_a_last_line_that_no_kill_can_leave_is_damage_not_a_cut_row(tmp_path, tail):
    """NUL bytes appended to metrics.csv were dropped as a row cut short, and the file
    rewritten at the resume's first write."""
    path = tmp_path / "metrics.csv"
    path.write_text(_ROWS + tail)
    with pytest.raises(ValueError, match="line 4 is damaged"):
        read_history(path)


@pytest.mark.parametrize("tail", ["3,0.1", "3,0.1,", "3,1e-0", "3,-in", ""])
def test_a_row_cut_short_by_a_kill_is_still_dropped(tmp_path, tail):
    """The one thing a kill leaves on the last line: the start of a row as written."""
    path = tmp_path / "metrics.csv"
    path.write_text(_ROWS + tail)
    assert [r["update"] for r in read_history(path)] == ["1", "2"]


@pytest.mark.parametrize("kind", ["fifo", "dangling link", "directory"])
def test_a_run_file_that_is_there_as_something_else_is_not_called_missing(tmp_path, kind):
    """A metrics.csv or config.json that is a pipe, a dangling link or a directory read "is
    missing", which sent the user looking for a file that is there."""
    from eligibility.lm.config import FinetuneConfig
    from eligibility.runs.directory import _take_dir
    from eligibility.runs.resume import load_config

    for name in ("metrics.csv", "config.json"):
        run = tmp_path / f"{kind}-{name}"
        run.mkdir()
        (run / "config.json").write_text(json.dumps({"task": "repeat"}))
        (run / "checkpoint.safetensors").write_bytes(b"x")
        (run / name).unlink(missing_ok=True)
        if kind == "fifo":
            os.mkfifo(run / name)
        elif kind == "directory":
            (run / name).mkdir()
        else:
            (run / name).symlink_to(run / "nowhere")
        with pytest.raises(ValueError, match=f"{name} is not a regular file"):
            if name == "config.json":
                load_config(run, FinetuneConfig)
            else:
                _take_dir(run, resume=True, overwrite=None)


@pytest.mark.usefixtures("built")
def test_a_tokenizer_given_to_a_built_in_task_is_refused_not_ignored(capsys, tmp_path):
    """``finetune repeat --tokenizer DIR`` (even a missing DIR) trained, the flag unread."""
    rc, err = _err(capsys, ["finetune", "repeat", "--tokenizer", str(tmp_path / "nowhere")])
    assert rc == 2 and "--tokenizer" in _one_error_line(err) and "built-in task" in err


def test_a_run_json_that_is_a_device_a_pipe_or_too_deep_is_one_valueerror(tmp_path, fifo):
    """A resume read config.json whole: /dev/zero filled the memory (killed), a pipe waited,
    100,000 nested brackets were a RecursionError traceback."""
    from eligibility._io import read_json

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested past"):
        read_json(deep)
    with pytest.raises(ValueError, match="not a regular file"):
        read_json(fifo)
    if os.path.exists("/dev/zero"):
        with pytest.raises(ValueError, match="not a regular file"):
            read_json("/dev/zero")


def test_a_checkpoint_counter_past_any_range_is_a_refusal_not_an_overflow(tmp_path, monkeypatch):
    """``updates`` 10**30 in the checkpoint was an OverflowError traceback (range of it)."""
    from eligibility.runs import directory

    class _Config:
        def to_dict(self):
            return {}

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text(_ROWS)
    (run / "checkpoint.safetensors").write_bytes(b"x")
    meta = {"counters": {"updates": 10**30}, "config": {}}
    monkeypatch.setattr(directory, "read_checkpoint", lambda *a, **k: ({}, meta))
    run_dir = directory.RunDir(run, _Config(), None, frozenset())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="holds updates 1–2 where"):
        run_dir.restore({}, None)  # type: ignore[arg-type]


def test_a_reward_function_returning_a_mapping_is_refused():
    """A dict of one reward per completion was read by its keys: rewards 0, 1, … silently."""

    def keyed(completions, **kw):
        return {i: 5.0 for i in range(len(completions))}

    batch = {"prompts": ["p", "p"], "completions": ["a", "b"], "completion_ids": [[1], [2]]}
    with pytest.raises(ValueError, match="returned a dict, not a list"):
        call_all([("rew.py:keyed", keyed)], {**batch, "columns": {}})
