"""The check's model in TRL's hands: its log-probs through TRL's own fused head, and bf16.

:func:`eligibility.check.frameworks.trl.hf_model` gives the check's :class:`TinyCausalLM` the
Hugging Face structure (``config``, a backbone, ``lm_head``) so that TRL's
``_get_per_token_logps_and_entropies``, after TRL's ``add_fused_lm_head``, runs on it
unchanged. The references: the lab's own log-probs and their autograd gradient. And the
command line a user runs on a GRPO and an RLOO config file, nothing else written. Slow (TRL
builds a trainer in seconds); TRL missing fails with its install line.
"""

from __future__ import annotations

import json

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
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], 1)
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


@pytest.mark.parametrize(
    ("yaml", "want"),
    [
        # TRL's defaults (dapo, scale_rewards=group): the batch's token mean, the group's std
        ("trainer: grpo\n", "std-normalised, batch-dependent-normaliser, kl-no-gradient"),
        # RLOOTrainer as it ships: β = 0.05 against the kl problem's β = 0.1, both named
        ("trainer: rloo\n", "kl-weight (config 0.05, objective β = 0.1)"),
    ],
)
def test_the_cli_checks_a_trl_config_file_with_nothing_else_written(
    trl_adapter, tmp_path, capsys, yaml, want
):
    """``eligibility check --framework trl --config cfg.yaml`` for a GRPO and an RLOO config."""
    from eligibility.cli import main

    (tmp_path / "cfg.yaml").write_text(yaml)
    argv = ["check", "--framework", "trl", "--config", str(tmp_path / "cfg.yaml")]
    rc = main([*argv, "--problem", "kl", "--format", "json"])
    (found,) = json.loads(capsys.readouterr().out)["problems"]
    assert rc == 1 and found["verdict"] == "biased" and found["diagnosis"] == want, found


def test_rloo_with_the_objectives_beta_is_unbiased(trl_adapter):
    """TRL's RLOOTrainer with β = the problem's: k1 summed in the reward, leave-one-out."""
    (p,) = check(framework="trl", config={"trainer": "rloo", "beta": 0.1}, problem="kl").problems
    assert (p.verdict, p.diagnosis) == ("unbiased", None), p
