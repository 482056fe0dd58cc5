"""``check --framework``: the configuration, the rows, the errors and the KL-weight naming.

Fast and framework-free; the adapters running verl's and OpenRLHF's code are in
``tests/test_check_frameworks_peers.py`` (slow).
"""

from __future__ import annotations

import json
import types
import warnings
from dataclasses import MISSING, fields

import pytest

from eligibility import check
from eligibility.check import frameworks
from eligibility.check.diagnosis import Diagnosis
from eligibility.check.frameworks import FRAMEWORKS, Framework, load_config, name_kl_weight, row
from eligibility.check.frameworks import openrlhf as openrlhf_adapter
from eligibility.check.verdict import ProblemReport
from eligibility.cli import main


def test_config_from_json_yaml_or_mapping(tmp_path):
    cfg = {"algorithm": {"adv_estimator": "rloo"}, "actor": {"loss_agg_mode": "token-mean"}}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    (tmp_path / "c.yaml").write_text(
        "algorithm:\n  adv_estimator: rloo\nactor:\n  loss_agg_mode: token-mean\n"
    )
    assert load_config(tmp_path / "c.json") == cfg
    assert load_config(str(tmp_path / "c.yaml")) == cfg
    assert load_config(cfg) == cfg and load_config(cfg) is not cfg


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        ("bad.json", "{", "not valid JSON"),
        ("bad.yaml", "a: [", "not valid YAML"),
        ("twice.yaml", "beta: 0.1\nbeta: 0.0\n", r"gives 'beta' \(line 2\) twice: keep one"),
        ("nested.yaml", "actor:\n  clip_ratio: 1\n  clip_ratio: 2\n", "'clip_ratio' \\(line 3\\)"),
        ("twice.json", '{"beta": 0.1, "beta": 0}', "gives 'beta' twice: keep one"),
        ("alias.yaml", "a: &x 1\nb: *x\n", "uses the YAML alias"),
        ("list.json", "[1, 2]", "must hold a mapping"),
        ("missing.json", None, "cannot read the --config file"),
    ],
)
def test_bad_config_files_are_value_errors(tmp_path, name, text, needle):
    if text is not None:
        (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=needle):
        load_config(tmp_path / name)


def test_unknown_and_missing_frameworks_say_what_to_do(monkeypatch):
    with pytest.raises(ValueError, match="choose one of openrlhf, trl, verl"):
        row("trlx")
    missing = Framework("ghost", "no_such_package_xyz", "1.0", "pip install ghost==1.0", "", "")
    monkeypatch.setitem(FRAMEWORKS, "ghost", missing)
    with pytest.raises(ValueError, match=r"ghost 1\.0 is not importable.*pip install ghost==1\.0"):
        row("ghost")


def test_another_version_runs_with_a_warning_naming_the_tested_one(monkeypatch):
    other = Framework("np", "numpy", "0.0.1", "pip install numpy==0.0.1", "", "logps")
    monkeypatch.setitem(FRAMEWORKS, "np", other)
    with pytest.warns(UserWarning, match=r"the adapter is tested with np 0\.0\.1"):
        assert row("np") is other
    import numpy

    monkeypatch.setitem(FRAMEWORKS, "np", Framework("np", "numpy", numpy.__version__, "", "", ""))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row("np")  # the tested version: no warning


def test_openrlhf_keys_take_its_parser_defaults_and_dashes():
    args = openrlhf_adapter.arguments(
        {"--algo.advantage.estimator": "rloo", "algo.kl.use_loss": True, "--actor.eps_clip": 0.3}
    )
    assert args.algo.advantage.estimator == "rloo"
    assert args.algo.kl.use_loss is True and args.algo.kl.init_coef == 0.01
    assert args.actor.eps_clip_low_high == (0.3, 0.3)  # train_ppo_ray's post-parse rule
    assert args.actor.loss_agg_mode == "token-mean"
    with pytest.raises(ValueError, match="critic-free"):
        openrlhf_adapter.arguments({})  # its default estimator is gae
    with pytest.raises(ValueError, match=r"'--algo\.kl\.bogus' is not one the check reads"):
        openrlhf_adapter.arguments({"--algo.kl.bogus": 1})
    assert openrlhf_adapter.kl_coefficient({"--algo.advantage.estimator": "rloo"}) == 0.01
    zero = {"--algo.advantage.estimator": "rloo", "--algo.kl.init_coef": 0}
    assert openrlhf_adapter.kl_coefficient(zero) is None


def _report(*rows):
    empty = dict.fromkeys(f.name for f in fields(ProblemReport) if f.default is MISSING)
    problems = [ProblemReport(**{**empty, "problem": p, "verdict": v, "finding": d})
                for p, v, d in rows]  # fmt: skip
    return types.SimpleNamespace(problems=problems)


def test_a_kl_weight_other_than_beta_is_named_with_both_values():
    report = _report(
        ("kl", "biased", Diagnosis(("other",))),
        ("length", "biased", Diagnosis(("length-normalised",))),
        ("difficulty", "unbiased", None),
    )
    betas = {"kl": 0.1, "length": 0.0, "difficulty": 0.0}  # the lab's (docs/lab.md)
    name_kl_weight(report, 0.05, betas)
    kl, length, difficulty = report.problems
    assert kl.diagnosis == "kl-weight (config 0.05, objective β = 0.1)"
    assert length.diagnosis == "kl-weight (config 0.05, objective β = 0), length-normalised"
    assert difficulty.diagnosis is None  # unbiased: nothing to explain
    fitted = _report(("kl", "biased", Diagnosis(("std-normalised",), times=0.45)))  # the other β's
    assert name_kl_weight(fitted, 0.05, betas).problems[0].diagnosis == (
        "kl-weight (config 0.05, objective β = 0.1)"
    )
    same = _report(("kl", "biased", Diagnosis(("kl-forward",))))
    assert name_kl_weight(same, 0.1, betas).problems[0].diagnosis == "kl-forward"
    assert name_kl_weight(same, None, betas).problems[0].diagnosis == "kl-forward"


def test_python_api_takes_a_function_or_a_framework():
    with pytest.raises(ValueError, match="either a function or framework="):
        check(lambda logps, batch: logps.sum(), {}, framework="verl")
    with pytest.raises(ValueError, match="needs framework="):
        check(lambda logps, batch: logps.sum(), {"actor": {}})
    with pytest.raises(ValueError, match="give the function to check"):
        check()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["x.py:f", "--framework", "verl", "--config", "c.yaml"], "one of them"),
        ([], "one of them"),
        (["x.py:f", "--config", "c.yaml"], "--config needs --framework"),
        (["--framework", "verl"], "needs --config FILE"),
        (["--framework", "verl", "--config", "/no/such/file.yaml"], "cannot read"),
    ],
)
def test_cli_bad_framework_input_is_one_line_exit_2(capsys, argv, needle):
    rc = main(["check", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_every_row_names_its_adapter_module():
    import importlib

    for f in FRAMEWORKS.values():
        adapter = importlib.import_module(f"{frameworks.__name__}.{f.adapter}")
        assert adapter.VERSION == f.version
        assert callable(adapter.loss_function) and callable(adapter.kl_coefficient)


def test_a_variant_is_named_from_all_batches_not_from_one_rounding():
    """bf16-like noise keeps a variant's name; a constant-on-this-problem variant stays a scale."""
    import numpy as np

    from eligibility.check.verdict import _names_over_a_scale, relative_residual

    rng = np.random.default_rng(0)
    R = rng.normal(size=(400, 6))  # the reference estimator's batches
    V = R * rng.uniform(0.2, 2.0, size=(400, 1))  # a batch-dependent normaliser: not c·R
    bf16 = V * (1 + 0.01 * rng.normal(size=V.shape))  # the same estimator, 1 % per entry
    assert 0.005 < relative_residual(bf16, V) < 0.02
    assert _names_over_a_scale(bf16, V, [R])  # was lost to a scale at 0.1 % per batch
    assert _names_over_a_scale(V, V, [R])
    assert not _names_over_a_scale(R + 0.5 * rng.normal(size=R.shape), V, [R])  # another estimator
    constant = 0.2 * R  # a normaliser that is a constant on this problem
    assert not _names_over_a_scale(constant * (1 + 0.01 * rng.normal(size=R.shape)), constant, [R])
    assert not _names_over_a_scale(constant, constant, [R])


def test_the_batch_speaks_both_dialects():
    """Mapping access beside attributes; TRL's and verl's names as aliases."""
    import torch

    from eligibility.lab.sequence.enumeration import ALIASES, SequenceBatch

    n, w = 4, 3
    batch = SequenceBatch(
        completion_ids=torch.zeros(n, w, dtype=torch.long),
        completion_mask=torch.ones(n, w),
        prompt_ids=torch.ones(n, 2, dtype=torch.long),
        rewards=torch.arange(n, dtype=torch.float32),
        group_ids=torch.tensor([0, 0, 1, 1]),
        group_size=2,
        old_logps=torch.full((n, w), -1.0),
        ref_logps=torch.full((n, w), -2.0),
        beta=0.1,
        max_completion_length=w,
        input_ids=torch.zeros(n, 2 + w, dtype=torch.long),
        attention_mask=torch.ones(n, 2 + w, dtype=torch.long),
    )
    assert batch["rewards"] is batch.rewards and batch["completion_mask"] is batch.completion_mask
    assert batch["old_per_token_logps"] is batch.old_logps  # TRL
    assert batch["ref_log_prob"] is batch.ref_logps and batch["responses"] is batch.completion_ids
    assert batch["num_generations"] == 2 and "response_mask" in batch
    assert torch.equal(batch["prompt_mask"], torch.ones(n, 2, dtype=torch.long))
    assert set(ALIASES) <= set(batch.keys()) and batch.get("values") is None
    assert batch["advantages"] is None  # only with --advantages
    with pytest.raises(KeyError, match=r"no 'values'.*batch\.rewards is batch\['rewards'\]"):
        batch["values"]


def test_a_named_variant_times_a_constant_is_named_with_the_constant():
    import numpy as np

    from eligibility.check.family import Draw
    from eligibility.check.verdict import scaled_variant

    rng = np.random.default_rng(1)
    V = rng.normal(loc=1.0, size=(500, 5))  # a named variant's estimates on the batches
    G = 0.2 * V + 0.01 * rng.normal(size=V.shape)  # the user's: 0.2 × that variant
    draw = Draw(step=lambda k: None, variants=[("batch-dependent-normaliser", V)])
    stderr = G.std(axis=0, ddof=1) / np.sqrt(len(G))
    assert scaled_variant(draw, G, stderr, 4.0).text == "batch-dependent-normaliser × 0.2"
    zero = np.hstack([G, np.zeros((len(G), 1))]), np.hstack([V, np.zeros((len(V), 1))])
    draw0 = Draw(step=lambda k: None, variants=[("batch-dependent-normaliser", zero[1])])
    s0 = zero[0].std(axis=0, ddof=1) / np.sqrt(len(G))
    assert (
        scaled_variant(draw0, zero[0], s0, 4.0).text == "batch-dependent-normaliser × 0.2"
    )  # no spread
    other = rng.normal(size=5)  # unrelated to V: no constant fits
    assert scaled_variant(draw, G + other, stderr, 4.0) is None
    # the same mean as 0.2 × V, other batches: another estimator, not V × 0.2
    shuffled = 0.2 * V[rng.permutation(len(V))] + 0.01 * rng.normal(size=V.shape)
    assert scaled_variant(draw, shuffled, stderr, 4.0) is None


def test_the_framework_tables_agree_with_the_derivations():
    """docs/measurements/check.md's framework tables: every verdict as derived, all three, but
    the exceptions the slow test explains (``EXPLAINED`` of test_check_frameworks_peers.py)."""
    from pathlib import Path

    from test_check_frameworks_peers import EXPLAINED

    text = (Path(__file__).resolve().parents[1] / "docs" / "measurements" / "check.md").read_text()
    rows, differ = 0, []
    for name in FRAMEWORKS:
        start, end = (
            f"<!-- framework-table:{name}:start -->",
            f"<!-- framework-table:{name}:end -->",
        )
        table = text.split(start)[1].split(end)[0].strip().splitlines()[2:]
        assert table, f"docs/measurements/check.md has no {name} table"
        rows += len(table)
        for line in table:
            if line.rstrip(" |").endswith("≠"):
                configuration, problem = line.strip("| ").split(" | ")[:2]
                differ.append((name, configuration, problem))
    assert rows >= 90, rows
    assert set(differ) <= set(EXPLAINED), sorted(set(differ) - set(EXPLAINED))


def test_trls_batch_sizes_of_one_optimiser_step():
    """The adapter's arithmetic alone (no TRL import): N completions into micro-batches."""
    from eligibility.check.frameworks.trl import accumulation

    assert accumulation({}, 16) == (1, 1, 16)
    assert accumulation({"gradient_accumulation_steps": 4}, 16) == (4, 4, 4)
    assert accumulation({"gradient_accumulation_steps": 4, "steps_per_generation": 2}, 16) == (
        4,
        2,
        4,
    )
    assert accumulation({"steps_per_generation": 4}, 16) == (1, 4, 4)
    with pytest.raises(ValueError, match="does not split into 3 micro-batches"):
        accumulation({"gradient_accumulation_steps": 3}, 16)
    with pytest.raises(ValueError, match="not a multiple of steps_per_generation 3"):
        accumulation({"gradient_accumulation_steps": 4, "steps_per_generation": 3}, 16)


def test_ranks_and_advantages_of_your_own_are_refused_with_a_framework():
    """A framework's step runs in one process and computes its own advantages: --world-size
    would split TRL's step without its num_processes, and --advantages would replace them."""
    with pytest.raises(ValueError, match="--world-size and --advantages are for your own loss"):
        frameworks.check_settings("verl", {"world_size": 2})
    with pytest.raises(ValueError, match="--world-size and --advantages are for your own loss"):
        frameworks.check_settings("trl", {"advantages": "a.py:f"})
    assert frameworks.check_settings("trl", {"world_size": 1})["family"] == "sequence"
