"""The direct forward's KV cache grown in place against concatenated, on one sampling, paired.

    make kit
    OMP_NUM_THREADS=2 python bench/lm/lm_cache_append.py --t-max 16 --pairs 6 [--lora-r 16]

A sampler appends each token's keys and values to the cache; ``torch.cat`` copies the whole
cache a step, while ``lm.llama._appended`` writes into room after it. One process: the kit's
SmolLM2-135M-Instruct (``--lora-r``: with peft's adapters on ``q_proj`` ``v_proj``), the first 4
prompts of the kit's ``--task`` (its training split) 8 times each, ``--t-max`` tokens, bf16
autocast (``--dtype``), ``--threads`` threads; one warm-up sampling, then ``--pairs`` pairs of
samplings, one with each append, the order alternating. Printed: each side's seconds and the
median of the per-pair ratios concatenated / in place.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

KIT = Path(os.environ.get("ELIGIBILITY_KIT", Path.home() / ".cache" / "eligibility-kit"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--t-max", type=int, default=16)
    p.add_argument("--pairs", type=int, default=6)
    p.add_argument("--task", default="json")
    p.add_argument("--lora-r", type=int, default=None)
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()

    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from eligibility.lm.edge import llama
    from eligibility.lm.sample import sample

    torch.set_num_threads(a.threads)
    where = KIT / "models" / "smollm2-135m-instruct"
    tok = AutoTokenizer.from_pretrained(where)
    model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32).eval()
    if a.lora_r is not None:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=a.lora_r)).eval()
    with open(KIT / "tasks" / a.task / "train.jsonl") as f:
        rows = [json.loads(line) for line, _ in zip(f, range(4), strict=False)]
    chat = [
        tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False)
        for r in rows
    ]
    prompts = [list(tok(c, add_special_tokens=False)["input_ids"]) for c in chat for _ in range(8)]

    def one() -> float:
        on = a.dtype == "bfloat16"
        t = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=on, cache_enabled=False):
            sample(model, prompts, vocab_size=len(tok), max_new_tokens=a.t_max,
                   rng=np.random.default_rng(0), eos_id=tok.eos_token_id)  # fmt: skip
        return time.perf_counter() - t

    grown = llama._appended
    sides = {"in place": grown, "concatenated": lambda past, new: torch.cat([past, new], dim=2)}
    one()
    times: dict[str, list[float]] = {name: [] for name in sides}
    for i in range(a.pairs):
        for name in sorted(sides, reverse=i % 2 == 1):
            llama._appended = sides[name]
            times[name].append(one())
    llama._appended = grown
    ratios = [c / g for c, g in zip(times["concatenated"], times["in place"], strict=True)]
    print(f"{a.pairs} pairs of samplings, {len(prompts)} rows, prompts of "
          f"{min(map(len, prompts))}-{max(map(len, prompts))} tokens, T_max {a.t_max}, "
          f"{a.dtype}, LoRA r {a.lora_r}, threads {a.threads}")  # fmt: skip
    for name, ts in times.items():
        print(f"{name}: median {statistics.median(ts):.3f} s ({', '.join(f'{t:.3f}' for t in ts)})")
    print(f"concatenated / in place, median of the pairs: {statistics.median(ratios):.3f}x")


if __name__ == "__main__":
    main()
