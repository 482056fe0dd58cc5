"""A LoRA run on a ``transformers`` Llama, exported as an adapter and merged, loaded back by
``peft`` and ``transformers`` themselves.

Slow (a Hugging Face model directory, ``transformers`` and ``peft`` loaders); the fast
representatives of the LoRA math are in ``tests/test_lm_lora.py`` on the built-in model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from _needs import installed

torch = pytest.importorskip("torch")
installed("peft")
pytestmark = pytest.mark.slow

from eligibility.cli import main  # noqa: E402
from eligibility.lm import FinetuneConfig, finetune  # noqa: E402
from eligibility.lm.sample import sample, token_logps  # noqa: E402

REWARD = (
    "def odd(prompts, completions, **kw):\n    return [float(len(c) % 2) for c in completions]\n"
)


def base_dir_model(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path).eval()


def test_a_lora_run_exports_an_adapter_and_a_merged_model(tmp_path):
    """Adapters on q_proj, v_proj of the kit's Llama: 2 updates move them; the adapter directory
    on the base model and the merged model give the run's log-probs (merged: to rounding)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    sys.path.insert(0, str(Path(__file__).parent))
    from lm_user import hf_kit

    base_dir = hf_kit.model_dir(tmp_path / "model")
    (tmp_path / "train.txt").write_text("copy a\ncopy b\ncopy a b\ncopy c d\n")
    (tmp_path / "rewards.py").write_text(REWARD)
    out = tmp_path / "run"
    config = FinetuneConfig(
        f"{tmp_path}/rewards.py:odd", prompts=str(tmp_path / "train.txt"),
        model=str(base_dir), max_completion_length=4, group_size=2,
        prompts_per_batch=2, eval_every=0, target_accuracy=None, progress=False,
        max_updates=2, lr=5e-2, lora_r=4, lora_alpha=8, device="cpu", out=str(out),
        dtype="float32",  # the same run on every machine (a pretrained model's auto may be bf16)
        lora_target_modules=("q_proj", "v_proj"),
    )  # fmt: skip
    result = finetune(config)
    policy, task = result.model, result.task
    task.close()
    moved = [p for n, p in policy.named_parameters() if "lora_B" in n]
    assert moved and all(bool(p.abs().sum() > 0) for p in moved)
    batch = sample(policy, [task.prompts[0]] * 3, vocab_size=task.vocab_size,
                   max_new_tokens=4, rng=np.random.default_rng(0), eos_id=task.eos_id)  # fmt: skip
    with torch.no_grad():
        want = token_logps(policy, batch, vocab_size=task.vocab_size)
    torch.testing.assert_close(batch.logps, want)  # the sampler's are the adapted policy's
    with torch.no_grad():  # and the base model's differ (the adapters are in both passes)
        assert not torch.allclose(token_logps(base_dir_model(base_dir), batch,
                                              vocab_size=task.vocab_size), want)  # fmt: skip

    assert main(["export", str(out), str(tmp_path / "adapter")]) == 0
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    adapted = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(token_logps(adapted, batch, vocab_size=task.vocab_size), want)

    assert main(["export", str(out), str(tmp_path / "merged"), "--merge"]) == 0
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    assert not any("lora" in k for k in merged.state_dict())
    with torch.no_grad():
        got = token_logps(merged, batch, vocab_size=task.vocab_size)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
