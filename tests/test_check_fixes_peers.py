"""verl's and OpenRLHF's fix keys, applied: each removes the name it is given for.

For each row of :data:`eligibility.check.fixes.FIXES` whose verl or OpenRLHF fix is a
configuration key: a configuration that shows the name (the check names it and says the key),
the same configuration with the key set to the value the fix says, and the check again (the
frameworks' own code, as in tests/test_check_frameworks_peers.py). verl's rows then pass;
OpenRLHF 0.11.2 has no summed aggregation (``actor.loss_agg_mode`` is a token mean or a
sequence mean), so its rows end with the aggregation's own name only. Truth: the exact
problems' ∇J. Slow (seconds a check); skipped where the framework is not importable
(``make peers`` installs both in .venv/peers).
"""

from __future__ import annotations

import pytest

from eligibility import check
from eligibility.check.fixes import fix, fix_keys
from eligibility.check.frameworks import row
from eligibility.torch import options

pytestmark = pytest.mark.slow

SAMPLES = 400  # enough for an unbiased verdict on kl within seconds
BETA = 0.1  # the value a fix's "β" takes: the kl problem's
BDN, LN = "batch-dependent-normaliser", "length-normalised"


def _verl(estimator: str, mode: str, algorithm: dict | None = None, **actor) -> dict:
    return {
        "algorithm": {"adv_estimator": estimator, **(algorithm or {})},
        "actor": {"loss_agg_mode": mode, **actor},
    }


def _rlhf(estimator: str, **keys) -> dict:
    return {"algo.advantage.estimator": estimator, "algo.kl.init_coef": 0, **keys}


SUM, NO_STD = "seq-mean-token-sum", {"norm_adv_by_std_in_grpo": False}
KL = {"problem": "kl", "beta": BETA}  # the user's β declared: a fix must keep it the loss's
USE_LOSS = {"algo.kl.init_coef": BETA, "algo.kl.use_loss": True}

CASES = [  # (framework, name, a configuration showing it, options, names left after the fix)
    ("verl", LN, _verl("rloo", "seq-mean-token-mean"), {}, set()),
    ("verl", BDN, _verl("rloo", "token-mean"), {}, set()),
    ("verl", "std-normalised", _verl("grpo", SUM), {}, {"self-including-mean"}),
    ("verl", "self-including-mean", _verl("grpo", SUM, NO_STD), {}, set()),
    ("verl", "kl-no-gradient", _verl("rloo", SUM), KL, set()),
    ("verl", "kl-no-gradient", _verl("rloo", SUM, use_kl_loss=True, kl_loss_type="kl",
                                     kl_loss_coef=BETA), KL, set()),
    ("verl", "kl-forward", _verl("rloo", SUM, use_kl_loss=True, kl_loss_type="low_var_kl",
                                 kl_loss_coef=BETA), KL, set()),
    ("verl", "kl-token-local", _verl("rloo", SUM, use_kl_loss=True, kl_loss_type="mse",
                                     kl_loss_coef=BETA), KL, set()),
    ("verl", "kl-weight", _verl("rloo", SUM, {"use_kl_in_reward": True,
                                              "kl_ctrl": {"kl_coef": 0.05}}),
     KL, set()),
    ("openrlhf", "std-normalised", _rlhf("group_norm"), {}, {BDN}),
    ("openrlhf", "batch-whitened", _rlhf("reinforce"), {"problem": "difficulty"}, {BDN}),
    ("openrlhf", "kl-no-gradient", _rlhf("rloo"), KL, {BDN}),
    ("openrlhf", "kl-no-gradient", _rlhf("rloo", **USE_LOSS, **{"algo.kl.estimator": "k1"}), KL,
     {BDN}),
    ("openrlhf", "kl-forward", _rlhf("rloo", **USE_LOSS, **{"algo.kl.estimator": "k3"}), KL,
     {BDN}),
    ("openrlhf", "kl-token-local", _rlhf("rloo", **USE_LOSS, **{"algo.kl.estimator": "k2"}), KL,
     {BDN}),
    ("openrlhf", "kl-weight", _rlhf("rloo", **{"algo.kl.init_coef": 0.05}),
     KL, {BDN}),
]  # fmt: skip


def _importable(framework: str) -> None:
    try:
        row(framework)
    except ValueError as err:  # the install line: `make peers`
        pytest.skip(f"{framework} is not importable here: {err}")


def _applied(framework: str, config: dict, name: str) -> dict:
    """``config`` with the fix's keys set (β the objective's, :data:`BETA`): verl's dotted keys
    into its nested sections."""
    keys = fix_keys(name, framework)
    assert keys, f"{framework}'s fix of {name} sets no key"
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
    for key, value in keys.items():
        value = BETA if value == options.BETA else value
        if framework == "openrlhf":
            out[key] = value
            continue
        *path, leaf = key.split(".")
        node = out
        for part in path:
            node[part] = node = dict(node.get(part) or {})
        node[leaf] = value
    return out


def _names(report) -> set[str]:
    return {n for p in report.problems for n in p.names}


@pytest.mark.parametrize(
    "framework, name, config, options, left",
    CASES,
    ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)],
)
def test_each_peer_fix_is_a_key_that_removes_its_name(framework, name, config, options, left):
    _importable(framework)
    options = {"problem": "length", "samples": SAMPLES, **options}
    report = check(framework=framework, config=config, **options)
    said = fix(name, framework=framework)
    assert name in _names(report), [(p.verdict, p.diagnosis) for p in report.problems]
    assert any(f"{name}: {said}" in (p.fix or ()) for p in report.problems)
    fixed = _applied(framework, config, name)
    after = check(framework=framework, config=fixed, allow_scale=True, **options)
    assert _names(after) == left, (fixed, [(p.verdict, p.diagnosis) for p in after.problems])
    assert after.passed or left, fixed


def test_the_openrlhf_alternative_for_std_normalised_removes_it_too():
    """``algo.advantage.estimator: rloo (or dr_grpo)``: the alternative, dr_grpo's mean
    baseline, leaves the aggregation's name only."""
    _importable("openrlhf")
    assert "(or dr_grpo)" in fix("std-normalised", framework="openrlhf")
    report = check(framework="openrlhf", config=_rlhf("dr_grpo"), problem="length",
                   samples=SAMPLES)  # fmt: skip
    assert _names(report) == {BDN}


def _verl_fields(key: str) -> set[str]:
    """The names verl 0.9.1's config dataclasses take at ``key``'s section (``actor.…``)."""
    from dataclasses import fields

    from verl.trainer.config import AlgoConfig
    from verl.trainer.config.algorithm import KLControlConfig
    from verl.workers.config import FSDPActorConfig, PolicyLossConfig

    section = {"algorithm": AlgoConfig, "algorithm.kl_ctrl": KLControlConfig,
               "actor": FSDPActorConfig, "actor.policy_loss": PolicyLossConfig}  # fmt: skip
    return {f.name for f in fields(section[key.rpartition(".")[0]])}


def test_every_key_of_the_option_tables_framework_columns_is_read_by_the_framework():
    """The fixes' keys are the option table's (one table); the frameworks' own code says which
    keys exist: verl's config dataclasses, OpenRLHF's ``train_ppo_ray`` parser (its source),
    TRL's ``GRPOConfig`` (and the check's ``trainer``: GRPOTrainer or RLOOTrainer)."""
    _importable("verl"), _importable("openrlhf")
    import importlib.util
    from dataclasses import fields
    from pathlib import Path

    from trl import GRPOConfig, RLOOConfig

    parser = Path(importlib.util.find_spec("openrlhf").origin).parent / "cli" / "train_ppo_ray.py"
    openrlhf_cli = parser.read_text()
    trl_keys = {f.name for f in fields(GRPOConfig)} | {f.name for f in fields(RLOOConfig)}
    seen = {"TRL": 0, "verl": 0, "OpenRLHF": 0}
    for o in (*options.ROWS, *options.OFF_POLICY_ROWS):
        for column, said in o.frameworks.items():
            for key, _ in said.keys:
                seen[column] += 1
                if column == "TRL":
                    assert key in trl_keys | {"trainer"}, (o.name, key)
                elif column == "verl":
                    assert key.rpartition(".")[2] in _verl_fields(key), (o.name, key)
                else:
                    assert f'"--{key}"' in openrlhf_cli, (o.name, key)
    assert min(seen.values()) > 5, seen
