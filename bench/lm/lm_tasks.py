"""The defaults of ``eligibility finetune`` on each built-in task, on seeds not used for tuning.

    OMP_NUM_THREADS=1 python bench/lm/lm_tasks.py --tasks repeat reverse sum --seeds 1 2 3 \
        --json bench/results/lm_tasks.json

The game of several turns, on 2 threads (its wall to a greedy success rate ≥ 0.9: all 5 games
won, accuracy steps by 0.2):

    OMP_NUM_THREADS=2 python bench/lm/lm_tasks.py --tasks guess --seeds 1 2 3 --threads 2 \
        --json bench/results/lm_guess.json

Each run is ``finetune(FinetuneConfig(task, seed=s))`` with every other setting at its default
(stop at greedy accuracy ≥ 0.95, at most ``--max-updates`` updates), one after another in this
process, one thread. The defaults were tuned on seed 0 only. Prints a markdown table; the JSON
holds every run's outcome, updates, wall time (evaluation included) and final greedy accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

from eligibility.lm import FinetuneConfig, finetune


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tasks", nargs="+", default=["repeat", "reverse", "sum"])
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--max-updates", type=int, default=600)
    p.add_argument("--json", default=None)
    p.add_argument("--lrs", nargs="+", type=float, default=[None], help="rates (default: lr's)")
    p.add_argument("--report", nargs="+", metavar="JSON", help="print the table of these files")
    p.add_argument("--threads", type=int, default=1, help="torch's CPU threads")
    args = p.parse_args()
    if args.report:
        report([r for f in args.report for r in json.load(open(f))["runs"]])
        return
    torch.set_num_threads(args.threads)
    runs = []
    for task, lr in [(t, lr) for t in args.tasks for lr in args.lrs]:
        for seed in args.seeds:
            t0 = time.perf_counter()
            rate = {} if lr is None else {"lr": lr}
            config = FinetuneConfig(
                task, seed=seed, max_updates=args.max_updates, progress=False, **rate
            )
            r = finetune(config)
            run = {
                "task": task if lr is None else f"{task} lr={lr:g}",
                "lr": config.lr,
                "seed": seed,
                "solved": r.solved,
                "updates": r.updates,
                "completions": r.episodes,
                "wall_s": time.perf_counter() - t0,
                "eval_wall_s": r.eval_wall_s,
                "greedy_accuracy": r.final_eval_return,
            }
            runs.append(run)
            print(json.dumps(run), file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "machine": platform.platform(),
                    "cpus": os.cpu_count(),
                    "threads": args.threads,
                    "runs": runs,
                },
                f,
                indent=1,
            )
    report(runs)


def report(runs: list[dict]) -> None:
    """The markdown table: per task, seeds, how many reached 0.95, updates and wall time."""
    print("| task | seeds | reached ≥ 0.95 | updates (median, max) | wall s (median, max) |")
    print("|---|---|---|---|---|")
    for task in dict.fromkeys(r["task"] for r in runs):
        rs = [r for r in runs if r["task"] == task]
        walls, ups = [r["wall_s"] for r in rs], [r["updates"] for r in rs]
        print(
            f"| {task} | {', '.join(str(r['seed']) for r in rs)} | "
            f"{sum(r['solved'] for r in rs)}/{len(rs)} | "
            f"{np.median(ups):.0f}, {max(ups)} | {np.median(walls):.0f}, {max(walls):.0f} |"
        )


if __name__ == "__main__":
    main()
