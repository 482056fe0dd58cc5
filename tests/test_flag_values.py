"""Every value a flag accepts survives the run's JSON files; the values it refuses name the flag.

Issue #29 item 7: ``sweep --set target_return=inf`` failed writing sweep.json; ``lab --seed -1``
said "expected non-negative integer" without naming ``--seed``. The rules live once, in the
config-to-CLI helper (``_dataclass_args``) and the JSON writer (``_io``), so these tests walk
every command's int and float options rather than naming a few.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import typing
from pathlib import Path

import pytest

from eligibility._dataclass_args import flag_of, unwrap_optional
from eligibility._io import atomic_write_json, json_dumps, json_loads, read_json
from eligibility.cli import COMMANDS, build_parser, main
from eligibility.cli.convention import Exit

_PARSER = build_parser()
_SUBPARSERS = next(a for a in _PARSER._actions if isinstance(a, argparse._SubParsersAction))


def _options_of_type(kind: type) -> list[tuple[str, str]]:
    """(command, flag) of every option whose field is ``kind``, ``kind | None`` or its tuple."""
    out = []
    for name in COMMANDS:
        config = _SUBPARSERS.choices[name].get_default("config_class")
        hints = typing.get_type_hints(config)
        for f in dataclasses.fields(config):
            tp, _ = unwrap_optional(hints[f.name])
            if typing.get_origin(tp) is tuple:
                tp = typing.get_args(tp)[0]
            if tp is kind:
                out.append((name, flag_of(f)))
    return out


FLOAT_OPTIONS = _options_of_type(float)
INT_OPTIONS = _options_of_type(int)


def test_the_walk_finds_the_options_of_every_numeric_command():
    commands = {c for c, _ in FLOAT_OPTIONS + INT_OPTIONS}
    assert {"train", "sweep", "finetune", "check", "lab"} <= commands
    assert ("train", "--target-return") in FLOAT_OPTIONS and ("lab", "--seed") in INT_OPTIONS


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What the command's parser says of ``argv``: "" where it is not refused as a usage error,
    else the last line of its error."""
    try:
        _SUBPARSERS.choices[argv[0]].parse_args(argv[1:])
    except SystemExit as stop:
        err = capsys.readouterr().err
        return err.strip().splitlines()[-1] if stop.code == Exit.USAGE else ""
    return ""


# Each rule walks its options in one test (a test each cost more in pytest's bookkeeping than
# the parse): every option that breaks it is named.


def test_nan_is_refused_by_every_float_option_naming_it(capsys):
    lines = {(c, f): _refused([c, f, "nan"], capsys) for c, f in FLOAT_OPTIONS}
    wrong = {k: last for k, last in lines.items() if not (k[1] in last and "nan" in last)}
    assert not wrong, wrong


def test_inf_is_read_by_every_float_option():
    wrong = []
    for command, flag in FLOAT_OPTIONS:
        (action,) = [a for a in _SUBPARSERS.choices[command]._actions if flag in a.option_strings]
        try:
            read = action.type("inf"), action.type("-inf")
        except (ValueError, argparse.ArgumentTypeError) as err:
            read = err
        if read != (math.inf, -math.inf):
            wrong.append((command, flag, read))
    assert not wrong, wrong


def test_a_negative_int_is_refused_naming_the_flag(capsys):
    lines = {(c, f): _refused([c, f, "-1"], capsys) for c, f in INT_OPTIONS}
    wrong = {k: last for k, last in lines.items() if not (k[1] in last and "-1" in last)}
    assert not wrong, wrong


def test_lab_seed_minus_one_names_the_flag_on_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["lab", "--seed", "-1"])
    err = capsys.readouterr().err
    assert stop.value.code == Exit.USAGE
    assert err.count("\n") == 1 and "--seed" in err, err


# -- the one JSON encoder and decoder ------------------------------------------------------------


def test_infinities_round_trip_through_the_writer_and_the_reader(tmp_path):
    obj = {"target_return": math.inf, "low": [-math.inf, 1.5], "name": "x", "n": 3, "none": None}
    path = tmp_path / "a.json"
    atomic_write_json(path, obj)
    json.loads(path.read_text())  # strict JSON: any reader can parse it
    assert "Infinity" not in path.read_text()
    assert read_json(path) == obj
    assert json_loads(json_dumps(obj)) == obj


def test_nan_is_refused_by_the_writer_and_nothing_is_written(tmp_path):
    path = tmp_path / "a.json"
    with pytest.raises(ValueError, match="NaN"):
        atomic_write_json(path, {"x": [1.0, math.nan]})
    assert list(tmp_path.iterdir()) == []


def test_sweep_with_an_infinite_target_writes_sweep_json_and_reads_it_back(tmp_path, capsys):
    """The command of the issue, up to the grid check (--seeds 0 stops it before any run)."""
    from eligibility.sweep.grid import Grid

    grid = Grid.from_args("CartPole-v1", ["target_return=inf,-inf,200"], [0])
    path = tmp_path / "sweep.json"
    atomic_write_json(path, {"grid": grid.to_json()})
    assert read_json(path)["grid"]["axes"]["target_return"] == [math.inf, -math.inf, 200.0]


def test_sweep_nan_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "sweep"
    code = main(["sweep", "CartPole-v1", "--set", "target_return=nan", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == Exit.USAGE and err.count("\n") == 1 and "target_return" in err, err
    assert not out.exists() or not any(out.iterdir())


def test_train_config_with_infinities_survives_config_json(tmp_path):
    """config.json as train writes it, read back as evaluate reads it: the same Config."""
    from eligibility.reinforce.config import Config
    from eligibility.reinforce.runs import load_config
    from eligibility.runs.directory import _config_json

    config = Config(env_id="CartPole-v1", target_return=math.inf, out=str(tmp_path))
    (Path(tmp_path) / "config.json").write_bytes(_config_json(config))
    json.loads((Path(tmp_path) / "config.json").read_text())  # strict JSON
    assert load_config(tmp_path) == config


def test_a_sweep_record_with_infinities_is_recognised_on_re_run(tmp_path):
    """sweep.json's grid read back equals the grid that wrote it (else the re-run is refused)."""
    from eligibility.sweep.grid import Grid
    from eligibility.sweep.run import _check_record

    grid = Grid.from_args("CartPole-v1", ["target_return=inf,200"], [0, 1])
    _check_record(tmp_path, grid)
    (tmp_path / "x" / "seed-0").mkdir(parents=True)
    (tmp_path / "x" / "seed-0" / "config.json").write_text("{}")  # a run started under it
    _check_record(tmp_path, grid)  # the same grid: no "another grid" refusal
    other = Grid.from_args("CartPole-v1", ["target_return=200"], [0, 1])
    with pytest.raises(ValueError, match="another grid"):
        _check_record(tmp_path, other)


@pytest.mark.slow
def test_the_sweep_of_the_issue_runs_and_resumes(tmp_path, capsys):
    """``sweep CartPole-v1 --set target_return=inf``: strict JSON out, and a re-run resumes."""
    out = tmp_path / "s"
    argv = ["sweep", "CartPole-v1", "--set", "target_return=inf", "--seeds", "1"]
    argv += ["--set", "total_steps=1000", "--set", "eval_every=500", "--set", "eval_episodes=2"]
    argv += ["--out", str(out), "--no-pictures", "--format", "json"]
    for _ in range(2):
        assert main(argv) == Exit.OK
        printed = json.loads(capsys.readouterr().out)
        assert printed["grid"]["axes"]["target_return"] == ["inf"]
        for name in ("sweep.json", "results.json"):
            json.loads((out / name).read_text())
        assert read_json(out / "sweep.json")["grid"]["axes"]["target_return"] == [math.inf]
