"""The command-line convention (docs/cli.md), held over every registered subcommand.

The subcommands come from ``eligibility.cli.COMMANDS``: one added later is walked by the same
tests. The static half reads each parser (one config dataclass, ``--format``, ``--out`` a
directory, old spellings hidden); the running half runs each subcommand once on a tiny input
(``EXAMPLES``: a new subcommand adds one line there) and holds its streams to the promises:
stdout is the result only (one JSON document with ``--format json``), nothing on either stream
carries a colour code when it is not a terminal, the exit status is one of ``Exit``'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

import _source
from eligibility._dataclass_args import Alias
from eligibility.cli import COMMANDS, build_parser, main
from eligibility.cli.convention import Exit

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples" / "check"

_PARSER = build_parser()
_SUBPARSERS = next(a for a in _PARSER._actions if isinstance(a, argparse._SubParsersAction))


def _sub(name: str) -> argparse.ArgumentParser:
    return _SUBPARSERS.choices[name]


def _dests(p: argparse.ArgumentParser) -> set[str]:
    return {a.dest for a in p._actions if not isinstance(a, argparse._HelpAction)}


def test_every_module_registers_its_command():
    assert set(_SUBPARSERS.choices) == set(COMMANDS)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_one_config_dataclass_feeds_every_option(name):
    p = _sub(name)
    config = p.get_default("config_class")
    assert config is not None and dataclasses.is_dataclass(config), (
        f"{name}: register it with eligibility.cli.convention.add_command (or "
        "configure_command) over its config dataclass"
    )
    fields = {f.name for f in dataclasses.fields(config)}
    extras = set(p.get_default("extras") or ())
    missing = fields - _dests(p)
    assert not missing, f"{name}: config fields without an option: {sorted(missing)}"
    stray = _dests(p) - fields - extras - {"format"}
    assert not stray, f"{name}: options outside {config.__name__} (declare extras): {stray}"
    assert callable(p.get_default("run"))


@pytest.mark.parametrize("name", list(COMMANDS))
def test_format_text_and_json(name):
    (fmt,) = [a for a in _sub(name)._actions if "--format" in a.option_strings]
    assert {"text", "json"} <= set(fmt.choices) and fmt.default == "text"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_out_is_a_directory_and_files_have_named_flags(name):
    for a in _sub(name)._actions:
        if "--out" in a.option_strings:
            assert a.metavar == "DIR", f"{name} --out must be a directory (metavar DIR)"
        if a.metavar == "FILE":
            assert "--out" not in a.option_strings


@pytest.mark.parametrize("name", list(COMMANDS))
def test_old_spellings_are_hidden_aliases(name):
    for a in _sub(name)._actions:
        if isinstance(a, Alias) and a.deprecated:
            assert a.help == argparse.SUPPRESS, (name, a.option_strings)


def test_usage_errors_are_one_line_exit_2(capsys):
    """An unknown option and an unknown ``--format`` on every subcommand, in one test: every
    one not answered by one line and the usage exit is named."""
    wrong = {}
    for name in COMMANDS:
        for argv in (["--no-such-option"], ["--format", "xml"]):
            try:
                main([name, *argv])
                code = None
            except SystemExit as stop:
                code = stop.code
            err = capsys.readouterr().err
            one_line = err.count("\n") == 1 and err.startswith(f"eligibility {name}: error:")
            if code != Exit.USAGE or not one_line:
                wrong[" ".join([name, *argv])] = (code, err)
    assert not wrong, wrong


# -- running each subcommand once ----------------------------------------------------------------


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """One tiny training run, for the commands that read one."""
    out = tmp_path_factory.mktemp("convention") / "run"
    argv = ["train", "CartPole-v1", "--out", str(out), "--total-steps", "200", "--hidden", "4"]
    argv += ["--episodes-per-batch", "2", "--num-envs", "2"]
    assert main([*argv, "--eval-every", "0", "--no-progress"]) == 0
    return out


EXAMPLES = {
    "explain": "categorical --probs 0.69 0.1 0.2 --action 0",
    "train": "CartPole-v1 --out {new} --total-steps 32 --hidden none --eval-every 32 "
    "--eval-episodes 2 --episodes-per-batch 2 --num-envs 2",
    "evaluate": "{run} --episodes 2",
    "plot": "{run} --out {new}",
    "lab": "--problem bandit-bernoulli --samples 30",
    "check": "{examples}/correct.py:loss --problem bandit --samples 30",
    "sweep": "CartPole-v1 --seeds 1 --jobs 1 --set total_steps=32 --out {tmp}/s --no-pictures",
    "finetune": "repeat --out {new} --max-updates 1 --d-model 8 --n-head 2 --group-size 2 "
    "--prompts-per-batch 1 --eval-every 1",
    "export": "{hf_run} {new}",
}
"""Per subcommand, the arguments of a run that takes a fraction of a second: ``{run}`` is a
trained run, ``{hf_run}`` a finetune run of a Hugging Face model, ``{new}`` a fresh directory,
``{tmp}`` one shared by the text and JSON runs."""


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory) -> Path:
    """One update of finetune on a tiny Llama directory with its tokenizer (lm_user/hf_kit.py)."""
    pytest.importorskip("transformers")
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from lm_user import hf_kit

    root = tmp_path_factory.mktemp("convention")
    model = hf_kit.model_dir(root / "model")
    out = root / "hf_run"
    argv = ["finetune", "repeat", "--model", str(model), "--out", str(out), "--max-updates", "1"]
    argv += ["--group-size", "2", "--prompts-per-batch", "1", "--eval-every", "0"]
    assert main([*argv, "--target-accuracy", "none", "--no-progress"]) == 0
    return out


IN_PROCESS = {"sweep": "sweep_in_process", "check": "check_calls_in_process"}
"""Fixtures (tests/conftest.py) a subcommand's example needs to run in this process (the
check's calls here, not in a forked worker: its output is the same report either way)."""


SLOW_EXAMPLES = {"export"}
"""Examples that import a transformers model (seconds on 2 cores): nightly only (slow)."""


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_EXAMPLES else n for n in COMMANDS]
)
def test_stdout_holds_the_result_only(name, run_dir, tmp_path, capsys, request):
    assert name in EXAMPLES, f"add a tiny example of {name} to EXAMPLES in {__file__}"
    if name in IN_PROCESS:
        request.getfixturevalue(IN_PROCESS[name])
    hf = request.getfixturevalue("hf_run") if "{hf_run}" in EXAMPLES[name] else None
    capsys.readouterr()  # what making a fixture's run printed
    for fmt in ("json", "text"):
        words = EXAMPLES[name].format(
            run=run_dir, new=tmp_path / fmt, tmp=tmp_path, examples=EXAMPLES_DIR, hf_run=hf
        )
        rc = main([name, *words.split(), "--format", fmt])
        out, err = capsys.readouterr()
        assert rc in {int(e) for e in Exit}, rc
        assert rc != Exit.USAGE, err
        assert "\x1b" not in out and "\x1b" not in err  # neither stream is a terminal here
        if fmt == "json":
            doc = json.loads(out)  # the whole of stdout is one document
            assert isinstance(doc, dict)
            assert "\\u" not in out  # UTF-8 as it is, not ASCII escapes
        else:
            assert out.strip(), f"{name} --format text printed nothing on stdout"
            with pytest.raises(json.JSONDecodeError):
                json.loads(out)


def test_the_commands_are_built_with_argparses_public_api_only():
    """No module of the command line reads a parser's private ``_actions`` (nor other
    ``argparse._`` names) or rewrites an action's ``__class__``: what a command needs is said
    when its options are added (``given_only``, ``alias_actions``, an ``Action`` subclass)."""
    import ast

    src = Path(__file__).resolve().parents[1] / "src" / "eligibility"
    found = []
    for path in [*sorted((src / "cli").glob("*.py")), src / "_dataclass_args.py"]:
        for node in _source.nodes(path):
            if not isinstance(node, ast.Attribute):
                continue
            if node.attr == "__class__" and isinstance(node.ctx, ast.Store):
                found.append((path.name, node.lineno, "__class__ ="))
            private = node.attr.startswith("_") and not node.attr.startswith("__")
            if private and (node.attr == "_actions" or ast.unparse(node.value) == "argparse"):
                found.append((path.name, node.lineno, node.attr))
    assert found == []
