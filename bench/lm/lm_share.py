"""Prompt sharing on a non-Llama family: one update's model work, each prompt once or G times.

    OMP_NUM_THREADS=1 python bench/lm/lm_share.py --family qwen3 --pairs 10

A random-init model of the family built from its ``transformers`` config (width 256, 4 layers,
8 heads, 4 key-value heads of 32, a 8 192-token vocabulary), float32, eval mode. One update's
model work: ``sample`` (G = 8 completions of each of 4 prompts of 64 tokens, T_max = 16, at
τ = 1), then ``token_logps`` with gradients and ``backward``. Each pair runs it once with each
prompt computed once on the model's own cache (the default) and once with every row's prompt
anew (``ELIGIBILITY_SHARE_PROMPTS=0``), alternating which goes first, on the same draws.
Printed: each side's median seconds and the median of the pairwise ratios anew/shared, with
the load average (2 cores, shared: say it with the figure).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from eligibility.lm.sample import sample, token_logps

V = 8192


def build(family: str) -> torch.nn.Module:
    """A random model of ``family`` at the bench's size."""
    import transformers as tf

    torch.manual_seed(0)
    common = dict(
        vocab_size=V,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=32,
        max_position_embeddings=256,
    )
    if family == "qwen3":
        model = tf.Qwen3ForCausalLM(tf.Qwen3Config(**common))
    elif family == "gemma3":
        model = tf.Gemma3ForCausalLM(tf.Gemma3TextConfig(**common, query_pre_attn_scalar=32))
    else:
        raise SystemExit(f"--family {family}: qwen3 or gemma3")
    return model.float().eval()


def update(model: torch.nn.Module, prompts: list[list[int]], seed: int) -> float:
    """Seconds of one update's model work (sample, score with gradients, backward)."""
    t = time.perf_counter()
    batch = sample(model, prompts, vocab_size=V, max_new_tokens=16, rng=np.random.default_rng(seed))
    model.zero_grad()
    lp = token_logps(model, batch, vocab_size=V)
    (-lp.sum()).backward()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="qwen3")
    parser.add_argument("--pairs", type=int, default=10)
    args = parser.parse_args()
    model = build(args.family)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(1, V, 64).tolist() for _ in range(4)]
    prompts = [p for p in prompts for _ in range(8)]
    times: dict[str, list[float]] = {"shared": [], "anew": []}

    def one(side: str, seed: int) -> None:
        os.environ["ELIGIBILITY_SHARE_PROMPTS"] = "1" if side == "shared" else "0"
        times[side].append(update(model, prompts, seed))

    one("shared", 0), one("anew", 0)  # warm-up
    times = {"shared": [], "anew": []}
    for k in range(args.pairs):
        for side in ("shared", "anew") if k % 2 == 0 else ("anew", "shared"):
            one(side, k)
    ratios = [a / s for a, s in zip(times["anew"], times["shared"], strict=True)]
    print(f"load average: {os.getloadavg()[0]:.1f} (2 cores); {args.pairs} pairs, {args.family}")
    for side, ts in times.items():
        print(f"{side}: {statistics.median(ts):.3f} s an update (median)")
    q = np.quantile(ratios, [0.25, 0.5, 0.75])
    print(f"anew/shared: {q[1]:.2f} (IQR {q[0]:.2f}-{q[2]:.2f})")


if __name__ == "__main__":
    main()
