"""The CPU's attention kernel in bf16 against float32 at a sampler's shapes, paired.

    OMP_NUM_THREADS=2 python bench/lm/lm_attention_bf16.py --rounds 20

One decoding step of SmolLM2-135M's attention for a sampler's batch: q [32, 9 heads, 1, 64]
against a cache of keys and values [32, 3 heads, 60, 64] (grouped-query heads), through
``F.scaled_dot_product_attention``, in float32 and in bf16 (what autocast gives it). Each round
times 200 calls of each, the two alternating which goes first; printed: each one's median
milliseconds a call and the median of the per-round ratios bf16 / float32. Why the direct
Llama forward keeps its attention in float32 on the CPU under ``--dtype bfloat16``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch.nn import functional as F


def per_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, calls: int = 200) -> float:
    """Milliseconds a call of the attention on (q, k, v)."""
    t0 = time.perf_counter()
    for _ in range(calls):
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    return (time.perf_counter() - t0) / calls * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    g = torch.Generator().manual_seed(0)
    f32 = [torch.randn(shape, generator=g) for shape in ((32, 9, 1, 64), (32, 3, 60, 64))]
    f32.append(torch.randn((32, 3, 60, 64), generator=g))
    bf16 = [x.bfloat16() for x in f32]
    per_call(*f32, 20), per_call(*bf16, 20)  # warm-up
    got: dict[str, list[float]] = {"float32": [], "bf16": []}
    for r in range(a.rounds):
        for name in ("float32", "bf16") if r % 2 == 0 else ("bf16", "float32"):
            got[name].append(per_call(*(f32 if name == "float32" else bf16)))
    ratios = [b / f for b, f in zip(got["bf16"], got["float32"], strict=True)]
    print(f"{a.rounds} rounds, threads {torch.get_num_threads()}")
    for name, ms in got.items():
        print(f"{name}: {statistics.median(ms):.3f} ms a call")
    print(f"bf16 / float32, median of the rounds: {statistics.median(ratios):.2f}x "
          f"(quartiles {statistics.quantiles(ratios, n=4)[0]:.2f}-"
          f"{statistics.quantiles(ratios, n=4)[2]:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
