"""Runs one fine-tuning config per option row, in float64, as a rank of a launched job or alone.

``python ranks_worker.py OUT`` (one process) or ``torchrun --nproc-per-node 2 ranks_worker.py
OUT``: each config's trained weights and metrics go to ``OUT/<name>.pt`` (rank 0 writes).
The model is the built-in tiny one cast to float64, so that the only difference between world
sizes is the order of the gradient's sums (tests/test_lm_ranks.py).
"""

from __future__ import annotations

import os
import sys
import types

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

import eligibility.lm.build as build
from eligibility.lm import FinetuneConfig, finetune
from eligibility.lm.importance import MODES
from eligibility.torch import options

BASE = dict(
    task="reverse",
    d_model=16,
    n_layer=1,
    n_head=2,
    group_size=4,
    prompts_per_batch=3,  # 12 rows: on 2 ranks a group is split between them
    max_updates=3,
    eval_every=0,
    seed=3,
    progress=False,
)


def configs() -> dict[str, dict]:
    """One config per row of each option (and a micro-batched and an uneven one)."""
    out = {}
    for kind in ("baseline", "scale", "aggregation", "kl"):
        for name in options.names(kind):
            extra = {"beta": 0.05} if kind == "kl" and name != "none" else {}
            out[f"{kind}={name}"] = {kind: name, **extra}
    for name in options.names("ratio"):
        out[f"ratio={name}"] = {"ratio": name, "epochs_per_batch": 2, "clip": 0.2}
    # K = 2 without a KL: both steps score only the rows of nonzero advantage (lm.update)
    out["k2 live rows"] = {"epochs_per_batch": 2, "kl": "none", "group_size": 2}
    out["micro-batches"] = {"micro_batch_size": 2, "kl": "sequence-reward", "beta": 0.05}
    out["uneven"] = {"group_size": 3}  # 9 rows: 5 and 4
    out["uneven micro-batches"] = {"group_size": 3, "micro_batch_size": 2}  # 3 passes and 2
    out["clipped"] = {"max_grad_norm": 0.05}  # torch's clipping, at the whole gradient's norm
    for key, values in (("top_k", [3]), ("top_p", [0.8]), ("min_p", [0.2]),
                        ("repetition_penalty", [1.3])):  # fmt: skip
        for v in values:  # the sampler's truncation, the scorer's kept sets (lm.truncation)
            out[f"{key}={v}"] = {key: v}
    for mode in MODES:  # every importance-sampling mode, against a truncating sampler
        if mode != "none":
            out[f"importance={mode}"] = {"importance_sampling": mode, "top_p": 0.8}
    llama = {"model": "ranks_worker:llama", "beta": 0.05, "kl": "k3"}
    out["llama"] = llama
    out["llama-lora"] = {**llama, "lora_r": 4, "lr": 1e-2}
    tiny = [k for k in out if "llama" not in k and "uneven" not in k]  # (--fsdp: N a multiple of W)
    for k in tiny:  # FSDP2, every row: sharded weights, moments, gradients
        out[f"fsdp {k}"] = {**out[k], "fsdp": True}
    out["fsdp llama"] = {**llama, "fsdp": True}
    # seed 4: LoRA's first update is a real one. At seed 3 its gradient is 0 in exact
    # arithmetic (π = π_ref, equal rewards) and the unsharded scorer leaves 1e-18 of rounding
    # where the model's own call gives 0; Adam's 1/(√v + ε) makes that 1e-8 of weights
    out["fsdp llama-lora"] = {**out["llama-lora"], "fsdp": True, "seed": 4}
    return out


def llama():
    """A tiny Llama (grouped-query heads, tied embeddings) over the task's 6 tokens."""
    import transformers as tf

    cfg = tf.LlamaConfig(
        vocab_size=6,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
        tie_word_embeddings=os.environ.get("RANKS_WORKER_TIED", "1") == "1",
        bos_token_id=1,
        eos_token_id=0,
    )
    model = tf.LlamaForCausalLM(cfg)
    for module in model.modules():  # RMSNorm in float64 for float64 (below)
        if isinstance(module, tf.models.llama.modeling_llama.LlamaRMSNorm):
            module.forward = types.MethodType(_norm, module)
    return model


def _norm(self, h: torch.Tensor) -> torch.Tensor:
    """y = w ⊙ h / √(mean(h²) + ε), as transformers' ``LlamaRMSNorm`` but never narrower than h.

    Its norm computes in float32 whatever its input, so a float64 model is rounded to float32 at
    every norm, and its gradient's rounding then depends on which rows share a pass: 5.4e-8 of a
    gradient between one pass of 12 rows and two of 6, where this norm leaves 3.8e-16. In
    float32 and bf16 it is transformers' own.
    """
    u = h.to(torch.promote_types(h.dtype, torch.float32))
    u = u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return self.weight * u.to(h.dtype)


def main(out: str) -> None:
    torch.set_num_threads(1)
    os.environ["ELIGIBILITY_DIRECT_FORWARD"] = "0"  # its attention is float32: not float64's
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")  # one group for every config (finetune leaves it)
    made = build.load
    build.load = lambda *a, **k: (lambda m, d: (m.double(), d))(*made(*a, **k))
    only = os.environ.get("RANKS_WORKER_ONLY")
    for name, changes in configs().items():
        if only and name not in only.split(","):
            continue
        result = finetune(FinetuneConfig(**{**BASE, **changes}))
        saved(out, name, weights_of(result.model, changes.get("fsdp", False)), result.history)
    left()


def weights_of(model: torch.nn.Module, fsdp: bool) -> dict:
    """A trained model's weights; under --fsdp on ranks its shards gathered (every rank)."""
    if fsdp and dist.is_initialized():
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(model, options=options)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def saved(out: str, name: str, weights: dict, history: list) -> None:
    """A run's weights and metrics rows in ``out/name.pt``, by rank 0 (the one process's too)."""
    if int(os.environ.get("RANK", "0")) == 0:
        torch.save({"weights": weights, "history": history}, f"{out}/{name}.pt")


def left() -> None:
    """The process group left, where one was joined."""
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
