"""``finetune --config recipe.yaml``: a TRL recipe's keys mapped onto options, or refused.

Truth: the config the command builds (captured where it would train), its stderr, and TRL's
own dataclasses (``GRPOConfig``, ``ModelConfig``, ``grpo.py``'s script arguments) for the keys
and defaults the table claims.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import textwrap
from pathlib import Path

import pytest

from eligibility.cli import main, recipe
from eligibility.lm.config import FinetuneConfig


class _Built(Exception):
    """Raised where the command would start training: it carries the config built."""


@pytest.fixture
def built(monkeypatch):
    """``finetune``'s loop replaced by one that hands back the config it was given."""
    from eligibility.lm import trainer

    def capture(config, resume=None):
        raise _Built(config)

    monkeypatch.setattr(trainer, "finetune", capture)


def _run(capsys, tmp_path: Path, yaml: str, *argv: str):
    """(config built or None, exit status, stderr lines) of ``finetune --config`` on ``yaml``."""
    path = tmp_path / "recipe.yaml"
    path.write_text(textwrap.dedent(yaml))
    try:
        rc, config = main(["finetune", "--config", str(path), *argv]), None
    except _Built as stop:
        rc, config = 0, stop.args[0]
    except SystemExit as stop:
        rc, config = stop.code, None
    return config, rc, capsys.readouterr().err.splitlines()


def test_each_key_sets_its_option_and_says_so_in_one_line(built, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # output_dir is relative, as TRL's is: to where it runs
    config, rc, err = _run(
        capsys,
        tmp_path,
        """
        learning_rate: 3.0e-4
        num_generations: 4
        loss_type: dr_grpo
        scale_rewards: none
        beta: 0.04
        temperature: 0.7
        max_completion_length: 6
        seed: 3
        bf16: false
        logging_steps: 5
        output_dir: out
        """,
        "repeat",
    )
    assert rc == 0, err
    assert (config.lr, config.group_size, config.aggregation, config.scale) == (
        3e-4,
        4,
        "constant",
        "none",
    )
    assert (config.beta, config.temperature, config.max_completion_length, config.seed) == (
        0.04,
        0.7,
        6,
        3,
    )
    assert config.dtype == "float32" and config.out == str(tmp_path / "out")
    said = [line for line in err if "recipe.yaml: " in line]
    assert len(said) == 11 and len(err) == 11, err  # one line a key, nothing else
    assert "recipe.yaml: learning_rate 0.0003 is --lr 0.0003 (Adam at a constant rate" in said[0]
    assert "recipe.yaml: loss_type dr_grpo is --aggregation constant" in said[2]
    assert "logging_steps 5: every update is logged" in said[9]


def test_options_given_override_the_file_and_the_key_says_so(built, capsys, tmp_path):
    yaml = "learning_rate: 1.0e-6\nnum_generations: 4\n"
    config, rc, err = _run(capsys, tmp_path, yaml, "repeat", "--lr", "0.01")
    assert rc == 0 and config.lr == 0.01 and config.group_size == 4
    assert any("learning_rate 1e-06 is overridden by --lr 0.01" in line for line in err), err


def test_every_key_it_does_not_take_is_refused_by_name(built, capsys, tmp_path):
    yaml = "learning_rate: 1.0e-6\nwarmup_ratio: 0.1\ngradient_checkpointing: true\n"
    config, rc, err = _run(capsys, tmp_path, yaml, "repeat")
    assert config is None and rc == 2 and len(err) == 1, err
    assert "does not take TRL's warmup_ratio, gradient_checkpointing: remove them" in err[0]


def test_trls_steps_and_batch_resolve_as_their_flags_do(built, capsys, tmp_path):
    """max_steps are optimiser steps (K per update); the batch is M · K_acc / G prompts."""
    yaml = """
    max_steps: 12
    num_iterations: 2
    num_generations: 4
    per_device_train_batch_size: 8
    gradient_accumulation_steps: 2
    """
    config, rc, err = _run(capsys, tmp_path, yaml, "repeat")
    assert rc == 0, err
    assert (config.max_updates, config.epochs_per_batch) == (6, 2)
    assert (config.micro_batch_size, config.prompts_per_batch) == (8, 4)
    assert any("max_steps 12 is --max-updates 6" in line for line in err), err


def test_epsilon_is_the_clip_from_the_second_step_on_and_said_at_one(built, capsys, tmp_path):
    config, rc, err = _run(capsys, tmp_path, "epsilon: 0.2\n", "repeat")
    assert rc == 0 and config.clip is None
    assert "without one, TRL's ratio is 1 and nothing is set" in err[0]
    config, rc, err = _run(capsys, tmp_path, "epsilon: 0.2\nnum_iterations: 2\n", "repeat")
    assert rc == 0 and config.clip == 0.2 and config.epochs_per_batch == 2


def test_use_peft_takes_model_configs_adapter_defaults(built, capsys, tmp_path):
    (tmp_path / "model").mkdir()
    yaml = f"model_name_or_path: {tmp_path / 'model'}\nuse_peft: true\nlora_alpha: 16\n"
    config, rc, err = _run(capsys, tmp_path, yaml, "repeat")
    assert rc == 0, err
    assert config.model == str(tmp_path / "model")
    assert (config.lora_r, config.lora_alpha, config.lora_dropout) == (16, 16.0, 0.05)
    assert "use_peft's lora_r 16 (ModelConfig's default) is --lora-r 16" in err[-2], err
    assert len(err) == 5  # model, use_peft, lora_alpha and the two defaults


def test_adapter_keys_without_use_peft_are_refused(built, capsys, tmp_path):
    """TRL trains no adapters then: taking lora_r would train a model the recipe does not."""
    _, rc, err = _run(capsys, tmp_path, "lora_r: 8\n", "repeat")
    assert rc == 2 and "lora_r without use_peft: true" in err[0], err


def test_a_bad_value_names_the_key(built, capsys, tmp_path):
    _, rc, err = _run(capsys, tmp_path, "learning_rate: fast\n", "repeat")
    assert rc == 2 and len(err) == 1
    assert "recipe.yaml: learning_rate: lr (--lr) must be a number, got 'fast'" in err[0], err


def test_a_recipe_over_the_bound_is_refused_before_it_is_parsed(
    built, capsys, tmp_path, monkeypatch
):
    """100 MB of comments parsed silently for 75 s; one list value of 100 MB was killed."""

    def parse(text):
        raise AssertionError("a recipe over the bound was parsed")

    from eligibility import _keyfile

    monkeypatch.setattr(_keyfile, "_yaml", parse)
    path = tmp_path / "recipe.yaml"
    path.write_text("# a comment\n" * (recipe.MAX_BYTES // 12 + 1))
    rc = main(["finetune", "repeat", "--config", str(path)])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and len(err) == 1 and "over 256 kB" in err[0] and str(path) in err[0], err


LAUGHS = """
a: &a [lol, lol, lol]
b: &b [*a, *a, *a]
report_to: [*b, *b, *b]
"""


def test_a_yaml_alias_is_refused_by_its_name_and_line(built, capsys, tmp_path):
    """A billion laughs as report_to: MemoryError after 118 s (here three levels, harmless)."""
    config, rc, err = _run(capsys, tmp_path, LAUGHS, "repeat")
    assert config is None and rc == 2 and len(err) == 1, err
    assert "recipe.yaml uses the YAML alias *a (line 3): write the value out" in err[0], err


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("learning_rate", "x" * 50_000),
        ("report_to", "[" + ", ".join(f"nope{i}" for i in range(500)) + "]"),
        ("reward_funcs", "x" * 50_000),
        ("lora_target_modules", "['', " + "q, " * 1_000 + "]"),
    ],
)
def test_what_an_error_quotes_of_a_value_is_bounded(built, capsys, tmp_path, key, value):
    """A billion-laughs lora_target_modules printed a 1 GB error "line". Every value here is
    over 3,000 characters, so an error quoting it whole breaks the 1,000 asserted (the lists
    are short enough for the YAML parser's pure-Python flow lists to read quickly)."""
    peft = "use_peft: true\n" if key.startswith("lora") else ""
    task = () if key == "reward_funcs" else ("repeat",)  # the recipe's own task, or repeat
    config, rc, err = _run(capsys, tmp_path, f"{peft}{key}: {value}\n", *task)
    assert config is None and rc == 2 and len(err) == 1, err[0][:300]
    assert key in err[0] and len(err[0]) < 1_000, err[0][:300]


@pytest.mark.parametrize("text", ["", "# nothing set yet\n", "{}\n"])
def test_an_empty_recipe_says_it_sets_nothing(built, capsys, tmp_path, text):
    """It ran the full defaults without a word: most likely not the file meant."""
    config, rc, err = _run(capsys, tmp_path, text, "repeat")
    assert rc == 0 and config.lr == FinetuneConfig("repeat").lr, err
    assert err == [
        "eligibility finetune: note: recipe.yaml holds no key: it sets nothing, and the run "
        "takes finetune's defaults (with the options given here)"
    ]


def test_a_run_directory_that_holds_a_run_is_refused_before_any_note(built, capsys, tmp_path):
    """output_dir naming a run: the recipe's notes came first, then the error."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    yaml = f"learning_rate: 1.0e-4\noutput_dir: {run}\n"
    config, rc, err = _run(capsys, tmp_path, yaml, "repeat")
    assert (
        config is None
        and rc == 2
        and err
        == [
            f"eligibility finetune: error: {run} already holds a run; pass --resume {run} to "
            "continue it, or another --out"
        ]
    )
    rc = main(["finetune", "repeat", "--learning_rate", "1e-4", "--out", str(run)])
    assert rc == 2 and len(capsys.readouterr().err.splitlines()) == 1  # a TRL name's note too


def test_the_docs_table_is_the_table():
    doc = (Path(__file__).parents[1] / "docs" / "recipes-and-trackers.md").read_text()
    assert recipe.markdown() in doc, "python -m eligibility.cli.recipe prints it"


def test_the_keys_and_defaults_are_trls():
    """Each key is a field of the TRL class its row names, and use_peft's defaults are
    ModelConfig's (TRL 1.16)."""
    trl = pytest.importorskip("trl")
    from trl.scripts.grpo import GRPOScriptArguments

    fields = {
        "GRPOConfig": {f.name for f in dataclasses.fields(trl.GRPOConfig)},
        "ModelConfig": {f.name for f in dataclasses.fields(trl.ModelConfig)},
        "script": {f.name for f in dataclasses.fields(GRPOScriptArguments)},
    }
    assert trl.__version__ == recipe.TRL_VERSION
    assert {k for k, row in recipe.KEYS.items() if k not in fields[row.source]} == set()
    defaults = {f.name: f.default for f in dataclasses.fields(trl.ModelConfig)}
    assert {k: defaults[k] for k in recipe.MODEL_CONFIG_LORA} == recipe.MODEL_CONFIG_LORA


def test_the_docs_recipe_builds_its_run(built, capsys, tmp_path, monkeypatch):
    """The recipe on docs/recipes-and-trackers.md, as written: every key taken and said."""
    doc = (Path(__file__).parents[1] / "docs" / "recipes-and-trackers.md").read_text()
    yaml = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    model = yaml.split("model_name_or_path:", 1)[1].split()[0]
    (tmp_path / model).mkdir(parents=True)  # its model's directory (a missing one is refused)
    monkeypatch.setenv("WANDB_MODE", "offline")  # its report_to: wandb, with no login here
    if importlib.util.find_spec("wandb") is None:  # make test has no wandb (the peers' extra):
        (tmp_path / "wandb").mkdir()  # a stand-in the up-front check finds; nothing is logged
        (tmp_path / "wandb" / "__init__.py").write_text("")
        monkeypatch.syspath_prepend(str(tmp_path))
    config, rc, err = _run(capsys, tmp_path, yaml)
    assert rc == 0, err
    assert config.task == "my_rewards:exact" and config.prompts == str(
        tmp_path / "data/train.jsonl"
    )
    # max_steps 60 are optimiser steps: 30 batches of the pretrained model's K = 2
    assert config.epochs_per_batch == 2
    assert (config.max_updates, config.prompts_per_batch, config.group_size) == (30, 4, 8)
    assert config.report_to == ("wandb",) and config.dtype == "bfloat16"
    assert len(err) == yaml.count(":"), err  # one line a key


@pytest.mark.slow  # a run of finetune
def test_a_recipe_runs(capsys, tmp_path):
    """The recipe's settings are the run's (config.json), its steps and batch as TRL counts."""
    import json

    yaml = f"""
    num_generations: 2
    learning_rate: 0.003
    max_steps: 4
    num_iterations: 2
    per_device_train_batch_size: 2
    gradient_accumulation_steps: 2
    temperature: 0.9
    report_to: none
    output_dir: {tmp_path / "run"}
    """
    argv = ["repeat", "--d-model", "8", "--n-head", "2", "--no-progress"]
    _, rc, err = _run(capsys, tmp_path, yaml, *argv)
    assert rc == 0, err
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (saved["max_updates"], saved["epochs_per_batch"], saved["prompts_per_batch"]) == (
        2,
        2,
        2,
    )
    assert (saved["lr"], saved["temperature"], saved["report_to"]) == (0.003, 0.9, [])
    assert len((tmp_path / "run" / "metrics.csv").read_text().splitlines()) == 3


@pytest.mark.parametrize(
    "line",
    ["report_to: 5", "use_peft: true\nlora_target_modules: [q_proj, 3]", "reward_funcs: {a: 1}"],
)
def test_a_list_of_names_given_another_type_is_one_line(capsys, tmp_path, line):
    """``report_to: 5`` was a TypeError traceback in the recipe's reading (a hostile pass)."""
    config, rc, err = _run(capsys, tmp_path, line + "\n")
    assert rc == 2 and config is None and len(err) == 1, err
    assert "give names, a list or one string" in err[0] and "Traceback" not in err[0]


def test_eval_on_start_takes_a_yaml_bool_and_refuses_anything_else_in_one_line(
    built, capsys, tmp_path
):
    """``eval_on_start`` (TRL's key, ``--eval-on-start``): ``true`` sets it; a word that is not
    a YAML bool is refused in one line naming the key, exit 2, nothing built."""
    config, rc, _ = _run(capsys, tmp_path, "eval_on_start: true\n", "repeat")
    assert rc == 0 and config.eval_on_start is True
    config, rc, err = _run(capsys, tmp_path, "eval_on_start: maybe\n", "repeat")
    assert rc == 2 and config is None and len(err) == 1
    assert "recipe.yaml: eval_on_start" in err[0], err
