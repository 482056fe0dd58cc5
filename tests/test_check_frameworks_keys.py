"""``check --framework X --config``: every key held to what the framework itself declares.

Truth: each framework's own declarations and parsers, not a table written here: TRL's
``HfArgumentParser`` over ``GRPOConfig`` (the parser its scripts read a configuration with),
verl's dataclasses through ``omegaconf`` (its Hydra configs are structured: a value of another
type is a ``ValidationError``), OpenRLHF's ``train_ppo_ray.py`` parser (read from its source:
``type=float``, ``nargs``, ``store_true``). A value a framework refuses is refused here in
one line before anything runs; one it takes is taken; the report names the keys it read and
the ones the check sets itself.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import warnings
from pathlib import Path

import pytest

from eligibility.check import frameworks
from eligibility.check.frameworks import openrlhf as openrlhf_adapter
from eligibility.check.frameworks._types import fits, refuse_mistyped

SLOW = pytest.mark.slow


@dataclasses.dataclass
class _Declared:
    count: int = 2
    rate: float = 0.1
    on: bool = False
    name: str = "a"
    maybe: int | None = None
    pair: list[float] = dataclasses.field(default_factory=list)


PARSED = {"count": int, "rate": float, "name": str, "maybe": int}
"""The type= argparse converts each with (as HfArgumentParser declares a dataclass's fields)."""


@pytest.mark.parametrize(
    ("key", "value"),
    [("count", 2.5), ("count", "2"), ("count", True), ("rate", "fast"), ("rate", None),
     ("on", 1), ("on", "yes"), ("name", 3), ("maybe", 1.5), ("pair", [0.1, "x"]),
     ("count", 3), ("rate", 2), ("on", True), ("maybe", None), ("pair", [0.1, 2])],
)  # fmt: skip
def test_a_value_is_refused_where_the_declared_type_refuses_it(key, value):
    """The reference: argparse's ``type=`` conversion of the value's YAML text (what
    HfArgumentParser does with a field of that type), and ``isinstance`` for bools and lists."""
    if isinstance(value, bool) and key != "on":
        takes = False  # YAML's true is no count, rate or name
    elif value is None:
        takes = key == "maybe"
    elif key == "on":
        takes = isinstance(value, bool)
    elif key == "pair":
        takes = all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    else:
        parser = argparse.ArgumentParser(exit_on_error=False)
        parser.add_argument("--x", type=PARSED[key])
        try:
            parser.parse_args(["--x", str(value)])
            takes = isinstance(value, str) == (PARSED[key] is str)  # YAML typed it already
        except argparse.ArgumentError:
            takes = False
    assert fits(value, _hint(key)) is takes
    if takes:
        refuse_mistyped({key: value}, _Declared, "the test")
    else:
        with pytest.raises(ValueError) as err:
            refuse_mistyped({key: value}, _Declared, "the test")
        assert f"the test's {key}: " in str(err.value) and "\n" not in str(err.value)


def _hint(key: str):
    import typing

    return typing.get_type_hints(_Declared)[key]


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"algo.kl.init_coef": "0.01"}, "'algo.kl.init_coef': '0.01' is not a number"),
        ({"--algo.kl.use_loss": "yes"}, "'--algo.kl.use_loss': 'yes' is not true or false"),
        ({"actor.eps_clip_low_high": [0.1]}, "has 1 numbers; OpenRLHF 0.11.2 takes 2"),
        ({"reward.clip_range": [-1.0, 0.0, 1.0]}, "has 3 numbers"),
        ({"algo.advantage.is_correction_threshold": [1, 2, 3]}, "takes 1 or 2"),
        ({"actor.loss_agg_mode": 3}, "is not text"),
    ],
)
def test_openrlhf_keys_are_held_to_its_parser(config, words):
    with pytest.raises(ValueError) as err:
        openrlhf_adapter.arguments({"algo.advantage.estimator": "rloo", **config})
    assert words in str(err.value) and "\n" not in str(err.value)
    one = {"algo.advantage.estimator": "rloo", "algo.advantage.is_correction_threshold": [4.0]}
    assert openrlhf_adapter.arguments(one).algo.advantage.is_correction_threshold == [0.0, 4.0]


def test_the_report_names_the_keys_read_and_those_the_check_sets():
    """``num_generations: 4`` was silently replaced by each problem's G, and nothing said which
    keys were read: the first line now says both (OpenRLHF's, which needs no import)."""
    config = {"--algo.advantage.estimator": "rloo", "rollout.n_samples_per_prompt": 4}
    given = frameworks.given_keys(config)
    assert given == {"algo.advantage.estimator": "rloo", "rollout.n_samples_per_prompt": 4}
    owned = openrlhf_adapter.SET_BY_CHECK
    assert set(owned) == {"rollout.n_samples_per_prompt"}


def _source(package: str, path: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"{package} is not importable: {frameworks.FRAMEWORKS[package].install}")
    return Path(spec.submodule_search_locations[0]) / path


@pytest.mark.slow
def test_openrlhfs_table_is_its_parsers():
    """Every key the adapter types is declared so by OpenRLHF's own ``train_ppo_ray`` parser:
    ``type=float`` a number, ``store_true`` a bool, ``nargs=2`` two numbers (read from the
    source: importing it starts Ray's and DeepSpeed's imports)."""
    tree = ast.parse(_source("openrlhf", "cli/train_ppo_ray.py").read_text())
    declared = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            flag = (
                node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else ""
            )
            kw = {k.arg: k.value for k in node.keywords}
            declared[str(flag).lstrip("-")] = kw
    for key, kind in openrlhf_adapter.TYPES.items():
        kw = declared[key]
        if kind is bool:
            assert ast.literal_eval(kw["action"]) == "store_true", key
        elif kind is str:
            assert "type" not in kw or kw["type"].id == "str", key
        else:
            assert kw["type"].id == "float", key
        if key in openrlhf_adapter.COUNTS:
            nargs = ast.literal_eval(kw["nargs"])
            assert openrlhf_adapter.COUNTS[key] == ((2,) if nargs == 2 else (1, 2)), key


TRL_CASES = [
    ("num_generations", 2.5),
    ("num_generations", "4"),
    ("beta", "0.1"),
    ("beta", "fast"),
    ("bf16", "maybe"),
    ("num_iterations", 1.5),
    ("log_level", "loud"),
    ("num_generations", 4),
    ("beta", 0.04),
    ("loss_type", "dr_grpo"),
    ("log_level", "info"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("key", "value"), TRL_CASES)
def test_trl_keys_are_refused_where_its_own_parser_refuses_them(key, value, tmp_path):
    """The reference: ``transformers.HfArgumentParser(GRPOConfig)``, TRL's scripts' parser, on
    the value's text (a YAML string given where a number is declared is refused here though the
    parser would convert its text: a recipe's ``"0.1"`` is text, as TRL's dataclass receives
    it from a mapping)."""
    warnings.simplefilter("ignore")
    from transformers import HfArgumentParser
    from trl import GRPOConfig

    parser = HfArgumentParser(GRPOConfig)
    text = str(value).lower() if isinstance(value, bool) else str(value)
    try:
        parser.parse_args_into_dataclasses(
            ["--output_dir", str(tmp_path), "--use_cpu", "true", f"--{key}", text]
        )
        takes = not isinstance(value, str) or key in ("loss_type", "log_level")
    except SystemExit:
        takes = False
    config = {key: value}
    if takes:
        frameworks.adapt("trl", config)
        first = frameworks.subject("trl", config, "c.yaml")
        used = key != "num_generations"
        assert (f"keys read: {key}" in first) is used
        assert ("the configuration's 4 not used" in first) is (not used)
    else:
        with pytest.raises(ValueError) as err:
            frameworks.adapt("trl", config)
        assert key in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("section", "key", "value"),
    [("actor", "ppo_epochs", 1.5), ("actor", "clip_ratio", "x"), ("algorithm", "gamma", "one"),
     ("actor", "use_kl_loss", "yes"), ("actor", "clip_ratio", 0.3), ("algorithm", "gamma", 1)],
)  # fmt: skip
def test_verl_keys_are_refused_where_its_structured_config_refuses_them(section, key, value):
    """The reference: ``omegaconf``'s structured merge (how verl's Hydra configuration is
    typed) of the key as verl's own dataclass declares it (the whole ``FSDPActorConfig`` is
    not one omegaconf can structure alone: its ``model_config`` wants a model). Where
    omegaconf converts text to the declared type (``use_kl_loss: "yes"``), the check refuses
    it: the text is not the value, and verl's dataclass built from a mapping would keep it."""
    import typing

    from omegaconf import OmegaConf
    from omegaconf.errors import ValidationError
    from verl.trainer.config import AlgoConfig
    from verl.workers.config import FSDPActorConfig

    cls = {"actor": FSDPActorConfig, "algorithm": AlgoConfig}[section]
    declared = typing.get_type_hints(cls)[key]  # verl's annotation, judged by omegaconf
    default = next(f.default for f in dataclasses.fields(cls) if f.name == key)
    one = dataclasses.make_dataclass("One", [(key, declared, dataclasses.field(default=default))])
    try:
        OmegaConf.merge(OmegaConf.structured(one), {key: value})
        takes = True
    except ValidationError:
        takes = False
    config = {section: {key: value}}
    if takes and isinstance(value, str) and declared is not str:
        takes = False  # omegaconf converts the text ("yes": true); the adapter wants the value
    if takes:
        frameworks.adapt("verl", config)
    else:
        with pytest.raises(ValueError) as err:
            frameworks.adapt("verl", config)
        assert f"{key}: " in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "text",
    ["num_generations: 2\nnum_generations: 4\n", '{"num_generations": 2, "num_generations": 4}'],
)
def test_a_key_given_twice_is_refused_alike_by_check_and_finetune(tmp_path, text):
    """A reader keeps the last of a key given twice without a word: ``check --framework
    --config`` took it so, ``finetune --config`` refused it; both read through one reader."""
    from eligibility.cli import recipe

    path = tmp_path / ("twice.json" if text.startswith("{") else "twice.yaml")
    path.write_text(text)
    said = []
    for read in (recipe.read, frameworks.load_config):
        with pytest.raises(ValueError) as err:
            read(str(path))
        said.append(str(err.value))
    assert all("gives 'num_generations'" in s and "twice: keep one" in s for s in said), said
    assert said[0].split(" gives ")[1] == said[1].split(" gives ")[1]


@pytest.mark.slow
def test_check_refuses_a_mistyped_key_in_one_line_before_any_run(tmp_path, capsys):
    from eligibility.cli import main

    (tmp_path / "c.yaml").write_text("trainer: grpo\nnum_generations: 2.5\n")
    status = main(["check", "--framework", "trl", "--config", str(tmp_path / "c.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert "num_generations: 2.5 is not an integer or null" in err[0]


HOSTILE = [
    ("openrlhf", {"algo.kl.init_coef": float("nan")}, "nan is not a number"),
    ("openrlhf", {"algo.kl.init_coef": float("inf")}, "is out of range"),
    ("openrlhf", {"actor.eps_clip": -1.0}, "is out of range: give a finite number ≥ 0"),
    ("openrlhf", {"algo.kl.estimator": "k9"}, "is not one of k1, k2, k3"),
    ("openrlhf", {"actor.loss_agg_mode": "x" * 100_000}, "is not one of token-mean"),
    ("openrlhf", {3: 1}, "OpenRLHF key 3 is not text"),
    ("openrlhf", {"actor.dual_clip": [1.0, 2.0]}, "is not a number or null"),
    pytest.param("trl", {"beta": float("nan")}, "beta: nan is not a number", marks=SLOW),
    pytest.param("trl", {"beta": float("inf")}, "beta: inf is out of range", marks=SLOW),
    pytest.param("trl", {"temperature": 0.0}, "give a finite number > 0", marks=SLOW),
    pytest.param("trl", {"num_iterations": -1}, "give a finite number ≥ 1", marks=SLOW),
    pytest.param("trl", {"trainer": ["grpo"]}, "got ['grpo']", marks=SLOW),
    pytest.param("trl", {1: 2}, "has no key 1", marks=SLOW),
    pytest.param("trl", {"reward_weights": [1, "a"]}, "is not a list of a number", marks=SLOW),
    pytest.param("verl", {"actor": []}, "actor is a mapping of keys, not list", marks=SLOW),
    pytest.param("verl", {"algorithm": {"gamma": float("nan")}}, "gamma: nan", marks=SLOW),
    pytest.param("verl", {"actor": {"ppo_epochs": 0}}, "ppo_epochs: 0 is out of range", marks=SLOW),
    pytest.param("verl", {"actor": {"clip_ratio": -1.0}}, "clip_ratio: -1.0 is out", marks=SLOW),
]
"""A hostile user's configurations (NaN, ±inf, out of range, text for a number, a key that is
not text, a choice of none, 100,000 characters): each one line, before anything runs."""


@pytest.mark.parametrize(("framework", "config", "words"), HOSTILE)
def test_a_hostile_configuration_is_one_line_before_anything_runs(framework, config, words):
    with pytest.raises(ValueError) as err:
        if framework == "openrlhf":  # its keys are read before its code is imported
            openrlhf_adapter.arguments({"algo.advantage.estimator": "rloo", **config})
        else:
            frameworks.family_keys(framework, config, "sequence")
            frameworks.adapt(framework, config)
    text = str(err.value)
    assert words in text and "\n" not in text and len(text) < 400, text
