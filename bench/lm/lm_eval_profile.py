"""Where one held-out evaluation of ``finetune`` spends its time: the matrix products and the rest.

    make kit
    OMP_NUM_THREADS=2 python bench/lm/lm_eval_profile.py --tasks json antonym \
        --json bench/results/lm_eval_profile.json

Per kit task: the run's set-up as ``finetune`` makes it (``lm.build.task_and_policy`` on the
kit's SmolLM2-135M-Instruct, the task's files and reward, ``--dtype auto``, T_max the kit's), then
the greedy evaluation of the held-out split as the trainer runs it (``evaluate_policy`` under the
policy's precision, as many rows at once as ``evaluation_rows`` allows), ``--warm`` times
unprofiled, then ``--repeats`` times under ``torch.profiler``; printed per task: the median wall
seconds of an evaluation, the CPU seconds the profiler gives ``aten::mm``/``aten::addmm``/
``aten::bmm`` (the products, the prompts' pass and every decoding step's), the attention kernel
and everything else, each a share of the profiled total.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

KIT = Path(os.environ.get("KIT", Path.home() / ".cache" / "eligibility-kit"))
T_MAX = {"json": 24, "antonym": 8, "multiply": 8, "plural": 16, "compare": 8}
PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm")
ATTENTION = "aten::_scaled_dot_product_flash_attention_for_cpu"


def profile(task_name: str, warm: int, repeats: int) -> dict:
    import torch
    from torch.profiler import profile as torch_profile

    from eligibility.lm.build import evaluation_rows, task_and_policy
    from eligibility.lm.config import FinetuneConfig
    from eligibility.lm.evaluation import evaluate_policy

    t, rewards = KIT / "tasks" / task_name, KIT / "tasks" / "rewards.py"
    config = FinetuneConfig(
        task=f"{rewards}:correct",
        model=str(KIT / "models" / "smollm2-135m-instruct"),
        prompts=str(t / "train.jsonl"),
        eval_prompts=str(t / "heldout.jsonl"),
        eval_metric=f"{rewards}:correct",
        max_completion_length=T_MAX[task_name],
        seed=3,
        progress=False,
    )
    config, task, policy, t_max = task_and_policy(config)
    chunk = evaluation_rows(config, task, policy, t_max)
    walls, shares = [], []
    with policy.precision(), torch.no_grad():
        for _ in range(warm):
            result = evaluate_policy(policy, task, t_max, chunk)
        for _ in range(repeats):
            with torch_profile() as prof:
                t0 = time.perf_counter()
                result = evaluate_policy(policy, task, t_max, chunk)
                walls.append(time.perf_counter() - t0)
            own = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
            total = sum(own.values())
            products = sum(own.get(k, 0.0) for k in PRODUCTS)
            shares.append((total, products, own.get(ATTENTION, 0.0)))
    total, products, attention = (statistics.median(x) for x in zip(*shares, strict=True))
    return {
        "task": task_name,
        "t_max": t_max,
        "dtype": policy.dtype,
        "rows_at_once": chunk,
        "prompts": len(task.evaluation.prompts),
        "accuracy": result.accuracy,
        "mean_length": result.mean_length,
        "wall_s": statistics.median(walls),
        "profiled_cpu_s": total,
        "products_s": products,
        "attention_s": attention,
        "rest_s": total - products - attention,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="+", default=["json", "antonym"])
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = [profile(name, args.warm, args.repeats) for name in args.tasks]
    for r in rows:
        print(
            f"{r['task']}: {r['wall_s']:.2f} s an evaluation ({r['prompts']} prompts, "
            f"{r['rows_at_once']} at once, {r['dtype']}); of {r['profiled_cpu_s']:.2f} s "
            f"profiled: products {r['products_s']:.2f} s "
            f"({r['products_s'] / r['profiled_cpu_s']:.0%}), attention {r['attention_s']:.2f} s, "
            f"the rest {r['rest_s']:.2f} s"
        )
    if args.json:
        meta = {"argv": sys.argv, "threads": os.environ.get("OMP_NUM_THREADS")}
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
