"""The floor of one ``finetune`` update on this machine: its matrix products alone, timed.

Reads a run directory (its config.json, metrics.csv and prompts) of a Llama-shaped model (its
config.json: d, n, h, the key-value heads, the MLP's width, V), rebuilds the shapes of each
update's matrix products, and times each of them here with ``torch.mm`` in the run's dtype and
threads:

- the sampling: each distinct prompt's prefix once (U prompts of P̄ tokens), then one step per
  completion token at the batch's N rows;
- the scoring pass: the U prompts and the N completions forward, and backward the two products
  of each forward one (∂X = ∂Y Wᵀ, ∂W = Xᵀ ∂Y; a full fine-tune);
- the head's products counted like the blocks' (V × d, tied or not).

Attention's score products (2 · 2 · L · d a token and layer) and every elementwise operation
are left out, so the sum is a floor for any implementation on torch's matrix product (TRL's
too), not an estimate. It is printed beside the run's own ``time/sample`` and ``time/score``
(the medians over updates that scored) as their ratio to it, and beside the floor of a trainer
that computes each prompt anew for each of its N rows (no prompt shared: TRL's ``generate`` and
scoring pass).

``--ops``: the run's policy (its last checkpoint) samples one batch of its prompts and its
scoring pass (forward and backward) runs under ``torch.profiler``: the operations with the most
self time, and the share of the matrix products among them.

    OMP_NUM_THREADS=2 python bench/lm/lm_floor.py RUN_DIR [--threads 2] [--repeat 5] [--ops]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from eligibility.lm.edge import hf
from eligibility.lm.edge.data import load_records


def products(cfg: dict, m: int) -> list[tuple[int, int, int]]:
    """The (M, K, N) of one forward over ``m`` tokens: every block's weights, then the head."""
    d, ff, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim") or d // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg.get("num_key_value_heads", 1) * hd
    block = [(m, d, q), (m, d, kv), (m, d, kv), (m, q, d), (m, d, ff), (m, d, ff), (m, ff, d)]
    return block * cfg["num_hidden_layers"] + [(m, d, v)]


def backward(forward: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """∂X = ∂Y Wᵀ (M × N by N × K) and ∂W = Xᵀ ∂Y (K × M by M × N) of each forward product."""
    return [s for m, k, n in forward for s in ((m, n, k), (k, m, n))]


def timed(shapes: list[tuple[int, int, int]], dtype: torch.dtype, repeat: int) -> float:
    """Seconds of ``torch.mm`` over ``shapes`` (each distinct shape timed, the median of runs)."""
    seconds: dict[tuple[int, int, int], float] = {}
    for shape in set(shapes):
        m, k, n = shape
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        torch.mm(a, b)  # warm
        runs = []
        for _ in range(repeat):
            t = time.perf_counter()
            torch.mm(a, b)
            runs.append(time.perf_counter() - t)
        seconds[shape] = statistics.median(runs)
    return sum(seconds[s] for s in shapes)


MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul")


def ops(run: Path, prompts: list[list[int]], u: int, g: int, t_max: int) -> None:
    """The scoring pass of one batch under the profiler: the operations with most self time."""
    import numpy as np
    from torch.profiler import ProfilerActivity, profile

    from eligibility.lm import runs
    from eligibility.lm.sample import sample, token_logps

    _config, model, task = runs.load(run)
    task.close()
    rows = [p for p in prompts[:u] for _ in range(g)]
    v = task.vocab_size
    batch = sample(model, rows, vocab_size=v, max_new_tokens=t_max,
                   rng=np.random.default_rng(0), eos_id=task.eos_id)  # fmt: skip
    for _ in range(2):  # warm, then profiled
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            token_logps(model, batch, vocab_size=v).sum().backward()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    mm = sum(e.self_cpu_time_total for e in events if e.key in MATMULS)
    print(f"scoring pass: {total / 1e6:.2f} s of self time, matrix products {mm / total:.0%}")
    print("| operation | self s | share |")
    print("|---|---|---|")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:12]:
        print(
            f"| {e.key} | {e.self_cpu_time_total / 1e6:.3f} | {e.self_cpu_time_total / total:.1%} |"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ops", action="store_true", help="the scoring pass's operations, profiled")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = json.loads((args.run / "config.json").read_text())
    model = json.loads((Path(config["model"]) / "config.json").read_text())
    tok = hf.load_tokenizer(config.get("tokenizer") or config["model"])
    prompts = [hf.encode_prompt(tok, r["prompt"]) for r in load_records(config["prompts"], "x")]
    rows = list(csv.DictReader((args.run / "metrics.csv").open()))
    u, g = config["prompts_per_batch"], config["group_size"]
    n, p = u * g, round(statistics.mean(len(x) for x in prompts))
    scored = [r for r in rows if float(r["time/score"]) > 0] or rows
    tokens = [
        float(b["tokens"]) - float(a["tokens"])
        for a, b in zip([{"tokens": 0}, *rows], rows, strict=False)
    ]
    c = round(statistics.median(tokens))  # completion tokens an update samples
    steps = config.get("max_completion_length") or 16
    dtype = torch.bfloat16 if config.get("dtype") == "bfloat16" else torch.float32
    floors = {}
    for name, prefix in (("shared", u * p), ("unshared", n * p)):  # each prompt once, or N
        sample = timed(products(model, prefix) + products(model, n) * steps, dtype, args.repeat)
        forward = products(model, prefix + c)
        floors[name] = (sample, timed(forward + backward(forward), dtype, args.repeat))
    ran = {k: statistics.median(float(r[f"time/{k}"]) for r in scored) for k in ("sample", "score")}
    print(
        f"model {config['model']}: d {model['hidden_size']}, {model['num_hidden_layers']} "
        f"layers, V {model['vocab_size']}; {config.get('dtype')}, {args.threads} threads; "
        f"U {u} prompts of {p} tokens (mean), N {n} rows, {c} completion tokens an update "
        f"(median), T_max {steps}; {len(scored)} of {len(rows)} updates scored"
    )
    print("| phase | products alone, s | the run's, s | run / floor | each prompt N times, s |")
    print("|---|---|---|---|---|")
    for i, k in enumerate(("sample", "score")):
        floor, unshared = floors["shared"][i], floors["unshared"][i]
        print(f"| {k} | {floor:.2f} | {ran[k]:.2f} | {ran[k] / floor:.2f} | {unshared:.2f} |")
    if args.ops:
        ops(args.run, prompts, u, g, steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
