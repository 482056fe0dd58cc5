"""A sampling's products with the kept weights row-major and column-major, paired, on a kit model.

    OMP_NUM_THREADS=2 python bench/lm/lm_product_layout.py --threads 2 --pairs 5 \
        --json bench/results/lm_product_layout.json

The direct Llama forward keeps each sampling's weights (``lm.edge.llama.DirectLM.merged``) and
lays them out as ``eligibility.torch.hardware.product_layout`` says: column-major on the CPU in
float32 for a decode step of at most ``FEW_ROWS`` (32) rows; at 64 rows both arms are
row-major. ``row`` is the same sampler with that layout turned off (the weights as the model
holds them, row-major), ``column`` the library's. Each pair runs both on the same model,
prompts and generator seed, the order alternating; a sampling is timed whole (the kept
weights' copy included). Printed per case: the median of the pairwise ratios row/column of the
wall seconds, the 25th-75th percentiles, each arm's median seconds, and whether the two drew
the same tokens.

Cases: the kit's tool model (``smollm2-135m-tools``, float32), G completions of P prompts of
245 tokens (the length the calculator's tool prompt renders to), T new tokens at temperature 1;
the rows G·P = 4, 16, 32 and 64 (a greedy evaluation's 32 rows decode as a sampling's do).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np
import torch

from eligibility.lm.edge import llama
from eligibility.lm.sample import sample
from eligibility.torch.hardware import product_layout

KIT = Path(os.environ.get("ELIGIBILITY_KIT", Path.home() / ".cache" / "eligibility-kit"))


def one(model, prompts: list[list[int]], t_max: int, seed: int, layout, eos: int):
    """(seconds, tokens) of one sampling with the kept weights laid out by ``layout``."""
    llama.product_layout = layout
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    out = sample(
        model,
        prompts,
        vocab_size=model.config.vocab_size,
        max_new_tokens=t_max,
        rng=rng,
        eos_id=eos,
    )
    return time.perf_counter() - t0, out.completion_ids


def row_major(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """The weight as the model holds it (row-major), at any rows: before ``product_layout``."""
    return weight


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-tools")
    p.add_argument("--rows", type=int, nargs="+", default=[4, 16, 32, 64])
    p.add_argument("--g", type=int, default=8, help="completions a prompt (rows = G·P)")
    p.add_argument("--prompt-len", type=int, default=245)
    p.add_argument("--t-max", type=int, default=48)
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(KIT / "models" / args.model, dtype=torch.float32)
    model.eval()
    eos = int(
        model.config.eos_token_id
        if isinstance(model.config.eos_token_id, int)
        else model.config.eos_token_id[0]
    )
    gen = torch.Generator().manual_seed(1)
    out = []
    for rows in args.rows:
        g = min(args.g, rows)
        distinct = [
            torch.randint(0, model.config.vocab_size, (args.prompt_len,), generator=gen)
            for _ in range(rows // g)
        ]
        prompts = [d.tolist() for d in distinct for _ in range(g)]
        one(model, prompts, 4, 0, product_layout, eos)  # warm-up
        ratios, times, same = [], {"row": [], "column": []}, True
        for k in range(args.pairs):
            arms = [("row", row_major), ("column", product_layout)]
            got = {}
            for name, layout in arms if k % 2 == 0 else arms[::-1]:
                s, tokens = one(model, prompts, args.t_max, 100 + k, layout, eos)
                times[name].append(s)
                got[name] = tokens
            ratios.append(times["row"][-1] / times["column"][-1])
            same &= torch.equal(got["row"], got["column"])
        q = np.percentile(ratios, [25, 50, 75])
        row = {
            "rows": rows,
            "g": g,
            "median_ratio": float(q[1]),
            "p25": float(q[0]),
            "p75": float(q[2]),
            "row_s": float(np.median(times["row"])),
            "column_s": float(np.median(times["column"])),
            "same_tokens": same,
        }
        print(json.dumps(row), flush=True)
        out.append(row)
    llama.product_layout = product_layout
    if args.json:
        res = {
            "argv": sys.argv,
            "model": args.model,
            "threads": args.threads,
            "prompt_len": args.prompt_len,
            "t_max": args.t_max,
            "cases": out,
        }
        args.json.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
