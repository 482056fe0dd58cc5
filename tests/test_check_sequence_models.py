"""The model form's model and the batch's padding: a Hugging Face causal LM, a pad id not EOS.

Truth: the lab's own log-probs (its enumeration, TinyCausalLM) and autograd through them; the
check's variants (``eos-masked``, the pad token's padding-in-loss) against autograd of the
example losses written from their formulas. The full-size checks are slow.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from eligibility.check import check
from eligibility.check import sequence as seq
from eligibility.check.run import CheckConfig
from eligibility.check.user import load_function
from eligibility.lab.sequence.builtin import PROBLEMS
from eligibility.lab.sequence.handed import PaddedCausalLM, policy_model
from eligibility.lab.sequence.model import PAD_LOGIT
from eligibility.lab.sequence.problem import Draw as Rows

SEQ = Path(__file__).resolve().parents[1] / "examples" / "check" / "sequence"


def _batch(problem, seed=4, tau=1.0):
    rows = seq._draw_rows(problem, 1, len(problem.prompts), np.random.default_rng(seed))
    G = problem.group_size
    draw = Rows(prompts=problem.table.prompt[rows[0, ::G]], rows=rows[0], group_size=G)
    return rows, replace(problem.batch(draw), temperature=tau)


def _grad(value, params):
    return -torch.cat([g.reshape(-1) for g in torch.autograd.grad(value, params)]).numpy()


# -- the pad id ------------------------------------------------------------------------------------


def test_the_batch_pads_with_its_own_pad_id_and_the_log_probs_are_the_lab_s():
    p = PROBLEMS["length"]()
    rows, batch = _batch(p)
    V = p.vocab_size
    assert batch.pad_id == V != batch.eos_token_id == p.eos_token_id
    mask = batch.completion_mask > 0
    assert torch.equal(batch.completion_ids != batch.pad_id, mask)  # the mask from the ids
    assert (batch.completion_ids[mask] < V).all()
    P = batch.prompt_ids.shape[1]
    assert torch.equal(batch.input_ids[:, P:], batch.completion_ids)
    ended = ~torch.as_tensor(p.table.truncated[rows[0]])  # an EOS at each one's last token
    last = mask.sum(1) - 1
    assert (batch.completion_ids[ended, last[ended]] == batch.eos_token_id).all()
    torch.testing.assert_close(p.logps(batch), batch.old_logps, rtol=0, atol=1e-6)


# -- the model the model form hands --------------------------------------------------------------


@pytest.mark.parametrize("hf", [True, False])
def test_the_model_is_a_causal_lm_with_the_hugging_face_calling_convention(hf):
    p = PROBLEMS["length"]()
    before = [w.detach().clone() for w in p.model.parameters()]
    model = policy_model(p.model, p.eos_token_id) if hf else PaddedCausalLM(p.model, 0)
    if hf:
        from transformers import PreTrainedModel

        assert isinstance(model, PreTrainedModel)
    assert all(a is b for a, b in zip(model.parameters(), p.model.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(p.model.parameters(), before, strict=True))
    V = p.vocab_size
    cfg = model.config
    assert (cfg.vocab_size, cfg.pad_token_id, cfg.eos_token_id) == (V + 1, V, p.eos_token_id)
    assert model.vocab_size == V + 1
    assert model.device == torch.device("cpu") and model.dtype == torch.float32
    _, batch = _batch(p)
    full = model(batch.input_ids, attention_mask=batch.attention_mask).logits
    L = batch.input_ids.shape[1]
    assert full.shape == (len(batch.rewards), L, V + 1)
    own = p.model(torch.where(batch.input_ids == V, p.eos_token_id, batch.input_ids)).logits
    torch.testing.assert_close(full[..., :V], own)  # the policy's own logits
    assert (full[..., V] == PAD_LOGIT).all()
    kept = model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, logits_to_keep=3,
        position_ids=torch.arange(L).expand(len(batch.rewards), -1), use_cache=False,
    ).logits  # fmt: skip
    torch.testing.assert_close(kept, full[:, -3:])
    idx = torch.tensor([0, 2])
    torch.testing.assert_close(model(batch.input_ids, logits_to_keep=idx).logits, full[:, idx])
    # the pad token's probability is below 1e-20: every other log-prob is the policy's
    lsm = torch.log_softmax(full.double(), -1)
    torch.testing.assert_close(lsm[..., :V], torch.log_softmax(own.double(), -1), rtol=0, atol=0)


@pytest.mark.parametrize("tau", [1.0, 0.8])
def test_a_loss_written_for_hugging_face_models_runs_unchanged(tau):
    """hf_logps.py calls model(input_ids=…, attention_mask=…, logits_to_keep=K + 1) and reads
    model.device and model.config.pad_token_id; the check's model form used to take only
    model(input_ids, attention_mask=None) (TypeError: unexpected keyword 'logits_to_keep').
    Its gradient is the log-prob form's RLOO (rloo.py) on the same batch, by autograd."""
    p = PROBLEMS["kl"]()
    config = CheckConfig(sequence=True, form="model", temperature=tau)
    _, checked, _, _ = seq._checked(p, config)
    _, batch = _batch(checked, tau=tau)
    params = list(p.model.parameters())
    got = _grad(load_function(f"{SEQ}/hf_logps.py:loss")(policy_model(p.model, 0), batch), params)
    lp, on = checked.on_policy(batch)
    ref_params = list(checked.model.parameters())
    want = _grad(load_function(f"{SEQ}/rloo.py:loss")(lp, on), ref_params) / tau  # ∇θ = ∇θ/τ / τ
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6 * np.abs(want).max())


# -- eos-masked ------------------------------------------------------------------------------------


def test_a_mask_that_drops_eos_is_its_variant_by_autograd():
    p = PROBLEMS["length"]()
    _, checked, found, tables = seq._checked(p, CheckConfig(sequence=True))
    rows, batch = _batch(checked)
    params = list(checked.model.parameters())
    lp, batch = checked.on_policy(batch)
    want = _grad(load_function(f"{SEQ}/pad_and_eos.py:eos_masked")(lp, batch), params)
    v = seq.Variant("logps", "rloo", "none", "sequence-sum", "reward-to-go", mask="eos-masked")
    assert v in found and v.name == "eos-masked"
    got = seq.estimates(checked, tables, rows, [v])[0, 0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    lp, batch = checked.on_policy(batch)
    correct = _grad(load_function(f"{SEQ}/pad_and_eos.py:pad_mask")(lp, batch), params)
    ref = seq.estimates(checked, tables, rows, [seq.REFERENCE])[0, 0]
    np.testing.assert_allclose(correct, ref, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_a_mask_that_drops_eos_is_named_and_the_pad_mask_passes():
    found = check(f"{SEQ}/pad_and_eos.py:eos_masked", sequence=True, kl="none").problems
    assert {(q.verdict, q.diagnosis) for q in found} == {("biased", "eos-masked")}
    assert check(f"{SEQ}/pad_and_eos.py:pad_mask", sequence=True, kl="none").passed


@pytest.mark.slow
def test_a_hugging_face_style_loss_is_unbiased_in_the_model_form():
    assert check(f"{SEQ}/hf_logps.py:loss", sequence=True, form="model").passed
