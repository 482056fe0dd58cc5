"""The check's model in TRL's hands: its log-probs through TRL's own fused head, and bf16.

:func:`eligibility.check.frameworks.trl.hf_model` gives the check's :class:`TinyCausalLM` the
Hugging Face structure (``config``, a backbone, ``lm_head``) so that TRL's
``_get_per_token_logps_and_entropies``, after TRL's ``add_fused_lm_head``, runs on it
unchanged. The references: the lab's own log-probs and their autograd gradient. Slow (TRL
builds a trainer in seconds); TRL missing fails with its install line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eligibility import check
from eligibility.check.frameworks import row
from eligibility.lab.sequence import get_problem

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trl_adapter():
    try:
        row("trl")
    except ValueError as err:
        pytest.fail(str(err))
    from eligibility.check.frameworks import trl

    return trl


def _inputs(batch):
    completion = torch.where(batch.completion_mask > 0, batch.completion_ids, batch.eos_token_id)
    ids = torch.cat([batch.prompt_ids, completion], 1)  # padded as TRL pads: its pad is EOS
    mask = torch.cat([torch.ones_like(batch.prompt_ids), batch.completion_mask.long()], 1)
    return ids, mask, batch.completion_ids.shape[1]


def test_trls_fused_head_reads_the_models_own_logps_and_gradient(trl_adapter):
    from trl.trainer.utils import add_fused_lm_head

    p = get_problem("length")
    batch = p.sample(2, np.random.default_rng(1))
    trainer = trl_adapter.build_trainer({"bf16": False}, p.model.vocab_size, 0, 8, 16, 5)
    hf = trl_adapter.hf_model(p.model)
    add_fused_lm_head(hf, temperature=trainer.temperature, outputs=("log_probs", "entropy"))
    m = batch.completion_mask
    logps, _, _ = trainer._get_per_token_logps_and_entropies(hf, *_inputs(batch))
    (g_trl,) = torch.autograd.grad((logps * m).sum(), [p.model.token.weight])
    own = p.logps(batch)
    (g_own,) = torch.autograd.grad((own * m).sum(), [p.model.token.weight])
    torch.testing.assert_close(logps * m, own * m, rtol=0, atol=1e-5)
    torch.testing.assert_close(g_trl, g_own, rtol=1e-5, atol=1e-5)
    assert hf.config.vocab_size == p.model.vocab_size and hf.get_output_embeddings() is hf.lm_head


def test_the_reference_replays_the_batchs_reference_logps(trl_adapter):
    p = get_problem("kl")
    batch = p.sample(2, np.random.default_rng(2))
    trainer = trl_adapter.build_trainer({"bf16": False}, p.model.vocab_size, 0, 8, 16, 5)
    trainer.ref_model.backbone.ref_logps = batch.ref_logps
    ref, _, _ = trainer._get_per_token_logps_and_entropies(trainer.ref_model, *_inputs(batch))
    m = batch.completion_mask
    torch.testing.assert_close(ref * m, batch.ref_logps * m, rtol=0, atol=1e-5)


def test_a_diagnosis_survives_trls_bf16_autocast(trl_adapter):
    """TRL's default bf16 autocast against float32: the same verdict and diagnosis."""
    found = {}
    for bf16 in (True, False):
        config = {"trainer": "grpo", "loss_type": "dapo", "scale_rewards": "group", "bf16": bf16}
        (p,) = check(framework="trl", config=config, problem="length").problems
        found[bf16] = (p.verdict, p.diagnosis)
    assert found[True] == found[False], found


def test_rloo_trainer_from_a_yaml_file_on_the_command_line(trl_adapter, tmp_path, capsys):
    """`check --framework trl --config rloo.yaml`: TRL's RLOOTrainer, nothing else written by
    the user. Its sequence-level KL in the reward is unbiased for the objective it declares
    (β = 0.1, and as it ships, β = 0.05: exit 0, the objective said); against another
    declared objective (`--beta 0.1` beside the shipped 0.05) the KL weight is named with both
    values (exit 1)."""
    from eligibility.cli import main

    cfg = tmp_path / "rloo.yaml"
    cfg.write_text("trainer: rloo\nbeta: 0.1\n")
    argv = ["check", "--framework", "trl", "--config", str(cfg), "--problem", "kl"]
    assert main([*argv, "--format", "json"]) == 0, capsys.readouterr()
    capsys.readouterr()
    cfg.write_text("trainer: rloo\n")
    assert main(argv) == 0, capsys.readouterr()
    assert "0.05" in capsys.readouterr().out  # the objective the configuration declares
    rc = main([*argv, "--beta", "0.1"])
    text = capsys.readouterr().out
    assert rc == 1 and "kl-weight (config 0.05, objective β = 0.1)" in text


def test_a_key_of_the_other_trainer_is_refused_by_name(trl_adapter):
    with pytest.raises(ValueError, match=r"RLOOConfig \(TRL 1\.16\.0\) has no key 'loss_type'"):
        trl_adapter.loss_function({"trainer": "rloo", "loss_type": "dapo"})
    with pytest.raises(ValueError, match="trainer must be one of grpo, rloo, got 'ppo'"):
        trl_adapter.loss_function({"trainer": "ppo"})


def test_trls_warnings_stay_out_and_the_header_names_what_was_checked(trl_adapter, tmp_path, capfd):
    """TRL's and transformers' deprecation and "experimental feature" lines used to reach
    stderr on every run; the report did not say which framework, trainer or file it held."""
    from eligibility.cli import main

    cfg = tmp_path / "grpo.yaml"
    cfg.write_text("loss_type: dr_grpo\nscale_rewards: none\n")
    argv = ["check", "--framework", "trl", "--config", str(cfg), "--problem", "length"]
    main([*argv, "--samples", "60"])
    out, err = capfd.readouterr()
    first = out.splitlines()[0]
    assert first.startswith(f"checked: trl 1.16.0 (GRPOTrainer), config {cfg}; keys read: ")
    assert "keys read: loss_type, scale_rewards; set by the check: num_generations" in first
    assert "warning" not in err.lower() and "deprecated" not in (out + err).lower(), err


def test_a_configuration_that_raises_is_one_line_and_exit_2(trl_adapter, tmp_path, capfd):
    """`loss_type: nonsense` used to print a whole report, TRL's traceback inside and
    "verdict: NOT unbiased", on stdout."""
    from eligibility.cli import main

    cfg = tmp_path / "bad.yaml"
    cfg.write_text("loss_type: nonsense\n")
    argv = ["check", "--framework", "trl", "--config", str(cfg), "--problem", "length"]
    rc = main([*argv, "--samples", "30"])
    out, err = capfd.readouterr()
    assert rc == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert "ValueError: Unknown loss type: nonsense" in line and str(cfg) in line


def _gradient(loss, problem, batch):
    model = problem.model
    value = loss(model, batch)
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(value, list(model.parameters()))])


@pytest.mark.parametrize(
    "loss_type, setting",
    [
        ("grpo", {"num_iterations": 2}),
        ("dapo", {"num_iterations": 3}),
        ("dr_grpo", {"epsilon": 0.05, "num_iterations": 2}),
        ("grpo", {"gradient_accumulation_steps": 2}),
        ("dapo", {"gradient_accumulation_steps": 2}),
        ("dr_grpo", {"gradient_accumulation_steps": 4, "steps_per_generation": 2}),
        ("dapo", {"gradient_accumulation_steps": 2, "num_iterations": 2}),
    ],
)
def test_on_policy_settings_that_cannot_change_the_gradient_do_not(trl_adapter, loss_type, setting):
    """At θ = θ_old the ratio is 1 whatever num_iterations and ε, and TRL's accumulation
    divides each micro-batch so that the step's sum is the whole batch's loss: one batch's
    gradient is the same, batch by batch (before the fix, num_iterations: 2 scored the old
    log-probs with a freshly built model: cos 0.818 against the on-policy gradient)."""
    p = get_problem("length")
    batch = p.on_policy(p.sample(2, np.random.default_rng(3)))[1]
    base = {"loss_type": loss_type, "scale_rewards": "none", "bf16": False}
    torch.manual_seed(0)
    want = _gradient(trl_adapter.loss_function(base), p, batch)
    torch.manual_seed(0)
    got = _gradient(trl_adapter.loss_function({**base, **setting}), p, batch)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6 * float(want.abs().max()))


# -- the configuration read whole: its sampler and its KL weight -----------------------------------


def test_the_configs_temperature_is_the_samplers_and_other_sampling_keys_are_refused(trl_adapter):
    """`temperature: 0.7` read `biased (other)` on every problem: the check sampled at 1.0
    while TRL scored at 0.7. top_p, top_k, min_p and repetition_penalty were ignored."""
    from eligibility.check import frameworks

    assert trl_adapter.sampler({"loss_type": "dapo", "temperature": 0.7}) == {"temperature": 0.7}
    assert trl_adapter.sampler({"trainer": "rloo"}) == {"temperature": 1.0}
    for key, value in [("top_p", 0.9), ("top_k", 20), ("min_p", 0.1), ("repetition_penalty", 1.1)]:
        with pytest.raises(ValueError, match=f"the config's {key}: {value!r} samples from another"):
            trl_adapter.sampler({key: value})
    assert trl_adapter.sampler({"top_p": 1.0, "top_k": 0}) == {"temperature": 1.0}
    setup = {"temperature": 0.7}
    with pytest.raises(ValueError, match=r"--temperature 0\.9 differs from the configuration"):
        frameworks.settings_from("trl", setup, {"temperature": 0.9})
    got = frameworks.settings_from("trl", {"temperature": 0.7, "beta": 0.04}, {})
    assert got == {"temperature": 0.7, "beta": 0.04}  # the configuration's β: the objective's
    got = frameworks.settings_from("trl", {"beta": 0.04}, {"beta": 0.1})
    assert got == {"temperature": 1.0, "beta": 0.1, "loss_beta": 0.04}  # another declared
    (p,) = check(framework="trl", config={"loss_type": "dapo", "temperature": 0.7},
                 problem="length").problems  # fmt: skip
    assert (p.verdict, p.diagnosis) == ("biased", "std-normalised, batch-dependent-normaliser")


def test_a_correct_rloo_passes_at_its_declared_beta_and_a_wrong_weight_keeps_the_rest(trl_adapter):
    """`trainer: rloo, beta: 0.1` exited 1 (kl-weight on length and difficulty, β = 0 there);
    `loss_type: grpo, beta: 0.04` read only kl-weight on kl though its std and length
    normalisations are visible there."""
    report = check(framework="trl", config={"trainer": "rloo", "beta": 0.1}, beta=0.1)
    assert report.passed, [(p.problem, p.verdict, p.diagnosis) for p in report.problems]
    (p,) = check(framework="trl", config={"loss_type": "grpo", "beta": 0.04},
                 problem="kl", beta=0.1).problems  # fmt: skip
    assert p.diagnosis == (
        "kl-weight (config 0.04, objective β = 0.1), std-normalised, length-normalised, "
        "kl-token-local"
    )


def test_the_configurations_beta_is_the_objective_without_beta(trl_adapter):
    """β 0.04 in the configuration read kl-weight on every problem (the default objective's β
    is 0 on length and difficulty): it is the objective's now, and the report says so."""
    from eligibility.check.report import report_text

    report = check(framework="trl", config={"trainer": "rloo", "beta": 0.04})
    assert report.passed, [(p.problem, p.verdict, p.diagnosis) for p in report.problems]
    assert "β = 0.04 on every problem" in report.declared_objective
    assert "k1 of the whole sequence in the reward" in report_text(report)


TRL_FIXES = [  # (a configuration showing the name, the name, the key its fix sets, options)
    ({"loss_type": "grpo", "scale_rewards": "none"}, "length-normalised", {}, {"kl": "none"}),
    ({"loss_type": "dr_grpo", "scale_rewards": "group"}, "std-normalised", {}, {"kl": "none"}),
    ({"loss_type": "dapo", "scale_rewards": "none"}, "batch-dependent-normaliser", {},
     {"kl": "none"}),
    ({"loss_type": "dr_grpo", "scale_rewards": "none", "mask_truncated_completions": True},
     "truncated-masked", {}, {"kl": "none"}),
    ({"loss_type": "dr_grpo", "scale_rewards": "none"}, "kl-no-gradient", {},
     {"problem": "kl"}),
    ({"loss_type": "dr_grpo", "scale_rewards": "none", "beta": 0.1}, "kl-token-local", {},
     {"problem": "kl"}),
    ({"trainer": "rloo", "beta": 0.05, "normalize_advantages": False}, "kl-weight", {},
     {"problem": "kl", "beta": 0.1}),
]  # fmt: skip


def _applied(config, name):
    """The configuration with the keys of ``name``'s TRL fix set (``trainer: rloo`` and
    ``beta: β`` set both; ``β`` the objective's, 0.1 on kl)."""
    from eligibility.check.fixes import fix_keys
    from eligibility.torch.options import BETA

    out = dict(config)
    for key, value in fix_keys(name, "trl").items():
        out[key] = 0.1 if value == BETA else value
        if key == "trainer":
            out.pop("loss_type", None), out.pop("scale_rewards", None)
            out.pop("mask_truncated_completions", None)
    return out


@pytest.mark.parametrize("config, name, _unused, options", TRL_FIXES,
                         ids=[c[1] for c in TRL_FIXES])  # fmt: skip
def test_each_trl_fix_is_a_key_that_removes_its_name(trl_adapter, config, name, _unused, options):
    from eligibility.check.fixes import fix

    report = check(framework="trl", config=config, **options)
    assert any(name in p.names for p in report.problems)
    said = fix(name, framework="trl")
    assert any(said in line for p in report.problems for line in p.fix or ())
    fixed = _applied(config, name)
    after = check(framework="trl", config=fixed, allow_scale=True, **options)
    assert after.passed, (fixed, [(p.problem, p.verdict, p.diagnosis) for p in after.problems])
