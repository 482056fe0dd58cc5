"""The shared pieces of the command-line convention: the dataclass parser and the output helpers."""

from __future__ import annotations

import dataclasses
import io
import json
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from eligibility._dataclass_args import type_hints
from eligibility._output import emit_json, forward_warnings, plain, stdout_console
from eligibility.cli import COMMANDS, Parser, build_parser
from eligibility.cli.convention import Exit, add_command, config_from_args, exit_for_signal


@dataclass(frozen=True)
class _Config:
    dirs: tuple[str, ...] = field(default=(), metadata={"help": "runs", "metavar": "DIR"})
    hidden: tuple[int, ...] = field(default=(32,), metadata={"help": "widths"})
    episodes: int = field(
        default=8,
        metadata={"help": "E", "flag": "--episodes-per-call", "deprecated": {"--episodes": ...}},
    )
    policy: Literal["greedy", "sample"] = field(
        default="greedy",
        metadata={
            "help": "how to act",
            "shorthand": {"--sample": "sample"},
            "deprecated": {"--greedy": "greedy"},
        },
    )
    sets: tuple[str, ...] = field(
        default=(), metadata={"help": "grid", "flag": "--set", "repeat": True}
    )
    target: float | None = field(default=None, metadata={"help": "a target"})


def _parse(argv: list[str]) -> tuple[_Config, str]:
    parser = Parser(prog="eligibility")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    add_command(sub, "demo", _Config, lambda a: 0, help="demo", positional=("dirs",))
    args = parser.parse_args(["demo", *argv])
    return config_from_args(_Config, args), args.format


def test_the_parser_reads_every_kind_of_field(capsys):
    config, fmt = _parse(["a", "b", "--hidden", "4", "5", "--sample", "--target", "none"])
    assert config == _Config(dirs=("a", "b"), hidden=(4, 5), policy="sample", target=None)
    assert fmt == "text"
    assert _parse(["a", "--hidden", "none", "--format", "json"]) == (
        _Config(dirs=("a",), hidden=()),
        "json",
    )
    config, _ = _parse(["a", "--set", "x=1", "y=2", "--set", "z=3", "--target", "2.5"])
    assert config.sets == ("x=1", "y=2", "z=3") and config.target == 2.5
    assert capsys.readouterr().err == ""  # nothing deprecated was used


def test_the_type_hints_read_once_are_typings_for_every_commands_config():
    """Each config's hints are evaluated once and shared (``type_hints``): the same as
    ``typing.get_type_hints`` gives, for every command's config, and the same dict when read
    again."""
    configs = [_Config]
    for name in COMMANDS:
        configs.append(
            build_parser([name]).get_default("subcommands")[name].get_default("config_class")
        )
    for config in configs:  # by repr: two InitVar[bool] are equal but not ==
        assert dataclasses.is_dataclass(config), config
        got, want = type_hints(config), typing.get_type_hints(config)
        same = {k: repr(v) for k, v in got.items()} == {k: repr(v) for k, v in want.items()}
        assert same, config.__name__
        assert type_hints(config) is type_hints(config), config.__name__


def test_old_spellings_work_with_one_line_each_on_stderr(capsys):
    config, _ = _parse(["a", "--episodes", "3", "--greedy"])
    assert config.episodes == 3 and config.policy == "greedy"
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "eligibility demo: deprecated: --episodes is deprecated and will be removed; "
        "use --episodes-per-call",
        "eligibility demo: deprecated: --greedy is deprecated and will be removed; "
        "use --policy greedy",
    ]


def test_none_mixed_with_values_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        _parse(["a", "--hidden", "4", "none"])
    assert stop.value.code == Exit.USAGE
    assert "none stands alone" in capsys.readouterr().err


def test_json_on_stdout_is_utf8_not_escaped():
    buf = io.StringIO()
    emit_json({"verdict": "∇J ≈ ĝ", "z": 1.5}, file=buf)
    text = buf.getvalue()
    assert "∇J ≈ ĝ" in text and "\\u" not in text and text.endswith("\n")
    assert json.loads(text) == {"verdict": "∇J ≈ ĝ", "z": 1.5}
    with pytest.raises(ValueError):
        emit_json({"x": float("nan")}, file=io.StringIO())


def test_coloured_warnings_reach_stderr_as_plain_lines(capsys):
    with forward_warnings("train"):
        warnings.warn("\x1b[33mWARN: the env is old\x1b[0m\nsecond line", UserWarning, stacklevel=1)
        warnings.warn("\x1b[33mWARN: the env is old\x1b[0m\nsecond line", UserWarning, stacklevel=1)
    err = capsys.readouterr().err
    assert err == "eligibility train: warning: WARN: the env is old second line\n"
    gymnasium = pytest.importorskip("gymnasium")
    with forward_warnings("evaluate"):
        gymnasium.logger.warn("a Gymnasium warning")  # coloured by Gymnasium itself
    assert capsys.readouterr().err == "eligibility evaluate: warning: WARN: a Gymnasium warning\n"
    assert plain("\x1b[1;31mred\x1b[0m \x1b]8;;http://x\x07link\x1b]8;;\x07") == "red link"


def test_a_piped_table_never_cuts_a_long_word(capsys):
    from rich.table import Table

    from eligibility._output import key_column

    table = Table()
    key_column(table, "diagnosis")
    table.add_column("numbers", justify="right")
    word = "missing-discount-weighting-" * 8
    table.add_row(word, "1.0 " * 40)
    stdout_console().print(table)
    out = capsys.readouterr().out
    assert word in out and "…" not in out and "\x1b" not in out


def test_exit_statuses():
    assert [int(e) for e in Exit] == [0, 1, 2, 130, 143]
    assert exit_for_signal(2) == 130 and exit_for_signal(15) == 143


def test_the_example_subcommand_of_docs_cli_runs(capsys):
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    ns: dict = {}
    exec(compile("from __future__ import annotations\n" + code, "docs/cli.md", "exec"), ns)
    parser = Parser(prog="eligibility")
    ns["add_parser"](parser.add_subparsers(dest="command", parser_class=Parser))
    args = parser.parse_args(["hello", "Ada", "--times", "2", "--format", "json"])
    assert args.run(args) == Exit.OK
    assert json.loads(capsys.readouterr().out) == {"greeting": "hello Ada hello Ada"}
