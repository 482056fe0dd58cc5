"""TRL's names as a TRL user meets them: in a recipe and as flags, taken or refused in one line.

Truth: the config the command builds (captured where it would train), its exit status and its
stderr; TRL's ``GRPOConfig`` docs for what ``scale_rewards: true``/``false`` mean (group, none),
``use_vllm: false`` (transformers' sampler) and ``lr_scheduler_type`` (``constant``).
"""

from __future__ import annotations

import os
import signal
import textwrap
from pathlib import Path

import pytest

from eligibility.cli import main


class _Built(Exception):
    """Raised where the command would start training: it carries the config built."""


@pytest.fixture
def built(monkeypatch):
    """``finetune``'s loop replaced by one that hands back the config it was given."""
    from eligibility.lm import trainer

    def capture(config, resume=None):
        raise _Built(config)

    monkeypatch.setattr(trainer, "finetune", capture)


def _run(capsys, argv: list[str]):
    """(config built or None, exit status, stderr lines) of ``finetune`` with ``argv``."""
    try:
        rc, config = main(["finetune", *argv]), None
    except _Built as stop:
        rc, config = 0, stop.args[0]
    except SystemExit as stop:
        rc, config = stop.code, None
    return config, rc, capsys.readouterr().err.splitlines()


def _recipe(tmp_path: Path, text: str, name: str = "recipe.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


SAMPLING = """
top_p: 0.9
top_k: 5
min_p: 0.05
repetition_penalty: 1.1
scale_rewards: true
use_vllm: false
lr_scheduler_type: constant
vllm_importance_sampling_correction: true
vllm_importance_sampling_mode: token_truncate
num_train_epochs: 3
max_steps: 4
"""


def test_the_sampling_keys_are_taken_from_a_recipe(built, capsys, tmp_path):
    config, rc, err = _run(capsys, ["repeat", "--config", _recipe(tmp_path, SAMPLING)])
    assert rc == 0, err
    assert (config.top_p, config.top_k, config.min_p, config.repetition_penalty) == (
        0.9,
        5,
        0.05,
        1.1,
    )
    assert (config.scale, config.importance_sampling, config.max_updates) == (
        "group-std",
        "token-truncate",
        4,
    )
    assert len(err) == SAMPLING.count(":"), err  # one line a key
    assert any("use_vllm false: finetune samples with its own sampler" in x for x in err)


def test_the_same_names_are_flags(built, capsys):
    argv = ["repeat", "--top_p", "0.8", "--top_k", "3", "--min_p", "0.1"]
    argv += ["--repetition_penalty", "1.2", "--scale_rewards", "false", "--use_vllm", "false"]
    argv += ["--lr_scheduler_type", "constant"]
    config, rc, err = _run(capsys, argv)
    assert rc == 0, err
    assert (config.top_p, config.top_k, config.min_p, config.repetition_penalty) == (
        0.8,
        3,
        0.1,
        1.2,
    )
    assert config.scale == "none"
    assert any("--top_p 0.8 is --top-p 0.8" in line for line in err), err  # as every TRL name


@pytest.mark.parametrize("value, scale", [("true", "group-std"), ("false", "none")])
def test_scale_rewards_true_and_false_are_trls_group_and_none(
    built, capsys, tmp_path, value, scale
):
    path = _recipe(tmp_path, f"scale_rewards: {value}\n")
    config, rc, err = _run(capsys, ["repeat", "--config", path])
    assert rc == 0 and config.scale == scale, err
    config, rc, err = _run(capsys, ["repeat", "--scale_rewards", value.capitalize()])
    assert rc == 0 and config.scale == scale, err


def test_num_train_epochs_is_taken_beside_max_steps_or_max_updates(built, capsys):
    config, rc, err = _run(capsys, ["repeat", "--num_train_epochs", "2", "--max-updates", "7"])
    assert rc == 0 and config.max_updates == 7, err


def _one_error(capsys, argv: list[str], *expected: str) -> None:
    """Exit 2, one line on stderr naming what is wrong, no traceback, no note before it."""
    config, rc, err = _run(capsys, argv)
    assert config is None and rc == 2 and len(err) == 1, err
    assert "error" in err[0] and "Traceback" not in err[0]
    for text in expected:
        assert text in err[0], err


@pytest.mark.parametrize(
    "text, expected",
    [
        ("use_vllm: true\n", ("use_vllm true: finetune takes false only",)),
        ("lr_scheduler_type: linear\n", ("lr_scheduler_type linear: finetune takes constant",)),
        ("scale_rewards: maybe\n", ("scale_rewards 'maybe'",)),
        ("top_p: 2\n", ("top_p (--top-p) must be in (0, 1]",)),
        ("num_train_epochs: 3\n", ("num_train_epochs 3: finetune counts the run in updates",)),
        ("max_prompt_length: 64\n", ("does not take TRL's max_prompt_length",)),  # not 1.16's
        ("learning_rate: 1e-3\nlearning_rate: 2e-3\n", ("gives 'learning_rate' (line 2) twice",)),
        ("learning_rate: 1e-3\ntop_p: 0\n", ("top_p",)),  # the error, and no note before it
    ],
)
def test_a_recipes_bad_key_is_one_line(built, capsys, tmp_path, text, expected):
    _one_error(capsys, ["repeat", "--config", _recipe(tmp_path, text)], *expected)


def test_a_json_recipes_key_given_twice_is_refused_by_name(built, capsys, tmp_path):
    path = _recipe(tmp_path, '{"beta": 0.1, "seed": 1, "beta": 0.2}', "recipe.json")
    _one_error(capsys, ["repeat", "--config", path], "recipe.json gives 'beta' twice")


def test_a_yaml_number_without_a_dot_is_a_number_as_trl_reads_it(built, capsys, tmp_path):
    config, rc, err = _run(capsys, ["repeat", "--config", _recipe(tmp_path, "beta: 4e-2\n")])
    assert rc == 0 and config.beta == 0.04, err


@pytest.mark.parametrize("content", [b"\xff\xfe\x00 beta: 1", None])
def test_an_unreadable_recipe_names_the_file(built, capsys, tmp_path, content):
    path = tmp_path / "recipe.yaml"
    if content is None:
        path.mkdir()  # a directory: not a file to read
    else:
        path.write_bytes(content)
    _one_error(capsys, ["repeat", "--config", str(path)], str(path))


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--use_vllm", "true"], "--use_vllm 'true'"),
        (["--lr_scheduler_type", "cosine"], "--lr_scheduler_type 'cosine'"),
        (["--num_train_epochs", "2"], "num_train_epochs 2: finetune counts the run in updates"),
        (["--num_train_epochs", "x"], "--num_train_epochs 'x'"),
        (["--scale_rewards", "maybe"], "--scale_rewards 'maybe'"),
        (["--learning_rate", "1e-3", "--top_p", "7"], "top_p (--top-p) must be in (0, 1]"),
        (["--bf16", "false", "--max_steps", "3", "--num_iterations", "2"], "multiple of 2"),
    ],
)
def test_a_bad_trl_flag_is_one_line_before_any_note(built, capsys, argv, expected):
    _one_error(capsys, ["repeat", *argv], expected)


@pytest.mark.parametrize(
    "argv, expected",
    [
        ("--top_p 0.9 --top-p 0.5", "--top_p 0.9 and --top-p 0.5 both set --top-p: give it once"),
        ("--top-p 0.5 --top_p 0.9", "--top-p 0.5 and --top_p 0.9 both set --top-p: give it once"),
        (
            "--loss_type grpo --aggregation constant",
            "--loss_type grpo (--aggregation sequence-mean) and --aggregation constant both set "
            "--aggregation: give it once",
        ),
        (
            "--aggregation constant --loss_type grpo",
            "--aggregation constant and --loss_type grpo (--aggregation sequence-mean) both set",
        ),
        (
            "--per_device_train_batch_size 8 --gradient_accumulation_steps 2 --prompts-per-batch 3",
            "--gradient_accumulation_steps 2 and --prompts-per-batch 3 both set the batch",
        ),
    ],
)
def test_two_spellings_of_one_option_with_two_values_are_refused(built, capsys, argv, expected):
    """The last one won, without a word (``--loss_type grpo`` said it was sequence-mean and
    ran --aggregation constant)."""
    _one_error(capsys, ["repeat", *argv.split()], expected)


@pytest.mark.parametrize(
    "argv, field, value",
    [
        ("--top_p 0.9 --top-p 0.9", "top_p", 0.9),
        ("--aggregation sequence-mean --loss_type grpo", "aggregation", "sequence-mean"),
        ("--top_p 0.9 --top_p 0.5", "top_p", 0.5),  # one spelling twice: argparse's last wins
    ],
)
def test_two_spellings_that_agree_are_taken(built, capsys, argv, field, value):
    config, rc, err = _run(capsys, ["repeat", *argv.split()])
    assert rc == 0 and getattr(config, field) == value, err


@pytest.mark.parametrize("option", ["--lr", "--loss_type", "--num_train_epochs", "--top_p"])
def test_what_a_flags_error_quotes_is_bounded(built, capsys, option):
    """A value of 100,000 characters was quoted whole in the error line."""
    config, rc, err = _run(capsys, ["repeat", option, "x" * 100_000])
    assert config is None and rc == 2 and len(err) == 1 and len(err[0]) < 4_200, err[0][:200]
    assert option in err[0]


def test_a_cap_without_importance_sampling_says_it_does_nothing(built, capsys):
    config, rc, err = _run(capsys, ["repeat", "--importance-sampling-cap", "2"])
    assert rc == 0 and config.importance_sampling == "auto"  # float32 (tiny): none
    assert err == [
        "eligibility finetune: note: --importance-sampling-cap 2 does nothing without "
        "--importance-sampling MODE (the distribution sampled is the one trained)"
    ]
    config, rc, err = _run(
        capsys, ["repeat", "--importance-sampling-cap", "2", "--importance-sampling", "token-mask"]
    )
    assert rc == 0 and err == []


def _terminated(*args, **kwargs):
    """What a command's work meets when SIGTERM comes while it cannot poll a flag."""
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):  # the handler runs between two bytecodes of this loop
        pass
    raise AssertionError("SIGTERM did not stop the work")


@pytest.mark.parametrize(
    "module, name, argv",
    [
        ("eligibility.lm.trainer", "finetune", ["finetune", "repeat"]),  # while it loads
        ("eligibility.check", "check", ["check", "x.py:loss"]),
    ],
)
def test_sigterm_says_one_line_as_sigint_does(monkeypatch, capsys, module, name, argv):
    import importlib

    monkeypatch.setattr(importlib.import_module(module), name, _terminated)
    before = signal.getsignal(signal.SIGTERM)
    assert main(argv) == 143
    assert capsys.readouterr().err.splitlines() == [f"eligibility {argv[0]}: interrupted (SIGTERM)"]
    assert signal.getsignal(signal.SIGTERM) is before  # given back
