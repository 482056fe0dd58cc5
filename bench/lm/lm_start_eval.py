"""``finetune``'s start and held-out evaluation on the real-model kit, two checkouts side by side.

    make kit
    git worktree add /tmp/before <commit>          # the checkout to compare against
    OMP_NUM_THREADS=2 python bench/lm/lm_start_eval.py --before /tmp/before --after . \
        --tasks json antonym --pairs 3 --json bench/results/lm_start_eval.json

Each run is ``eligibility finetune rewards.py:correct --model KIT/models/MODEL`` on a kit task's
files, as the user types it (a process of its own, its imports included), for one update and
one evaluation of the held-out split; the checkouts alternate in order from one pair to the
next (before/after, then after/before). Per run:

- ``start_s``: from the process's first line to the loop's first update (the run layer's
  ``Bookkeeping.start``, which both checkouts call just before the loop): imports, the task, the
  model and tokenizer loaded, whatever the start measures or probes;
- ``eval_s``: the held-out evaluation's seconds (``time/eval`` of metrics.csv's row);
- ``eval_accuracy``: its greedy accuracy (the same weights on both sides after the same update);
- ``sample_s``, ``step_s``: the first update's sampling and optimiser step (``time/sample``,
  ``time/step``);
- ``whole_s``: the process's wall, from its launch to its exit (the command as the user waits);

and, alternating with them, ``load_s``: a process that imports transformers and loads the
model and tokenizer alone (``AutoTokenizer``/``AutoModelForCausalLM.from_pretrained``), the floor
a start is held against. Reported: medians per side and the medians of the pairwise ratios.

The defaults' measurement that a start keeps (``ELIGIBILITY_CACHE_DIR``, read by a checkout that
keeps one): by default one directory of this script's for all the runs, which the warm-up run
fills, so each measured run is a user's second start on the same model, prompts and seed;
``--fresh-cache``: an empty one for every run, so each measures (a user's first start).
``--seed-per-run``: each run its own ``--seed`` (3, 4, 5, …, the same for both sides of a
pair), the kept measurements shared: a user's next run on another seed.
``--dtype float32``: every run in float32, whose rounding is fine enough that the greedy tokens
stay where the products are batched otherwise (in bfloat16 a near-tie can fall either way).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KIT = Path(os.environ.get("KIT", Path.home() / ".cache" / "eligibility-kit"))
T_MAX = {"add": 8, "date": 12, "capital": 8, "multiply": 8, "json": 24, "antonym": 8,
         "plural": 16, "compare": 8}  # fmt: skip

# The child: the loop's start time kept when the run layer starts the loop, then the CLI.
CHILD = """
import sys, time
t0 = time.perf_counter()
from eligibility.runs import bookkeeping
started = bookkeeping.Bookkeeping.start
def start(self, *a, **k):
    if not hasattr(sys, "_loop_at"):
        sys._loop_at = time.perf_counter()
    return started(self, *a, **k)
bookkeeping.Bookkeeping.start = start
from eligibility.cli import main
status = main(sys.argv[1:])
print("START_S", sys._loop_at - t0, file=sys.stderr)
sys.exit(status)
"""

LOAD = """
import sys, time
t0 = time.perf_counter()
from transformers import AutoModelForCausalLM, AutoTokenizer
AutoTokenizer.from_pretrained(sys.argv[1]); AutoModelForCausalLM.from_pretrained(sys.argv[1])
print("LOAD_S", time.perf_counter() - t0, file=sys.stderr)
"""


EXTRA: list[str] = []
"""Options every run is given besides (``--dtype float32``: an accuracy held exactly)."""


def argv(task: str, model: str, out: Path, seed: int) -> list[str]:
    """The command line of one run."""
    t, rewards = KIT / "tasks" / task, KIT / "tasks" / "rewards.py"
    return [
        "finetune",
        f"{rewards}:correct",
        "--model", str(KIT / "models" / model),
        "--prompts", str(t / "train.jsonl"),
        "--eval-prompts", str(t / "heldout.jsonl"),
        "--eval-metric", f"{rewards}:correct",
        "--max-completion-length", str(T_MAX[task]),
        "--max-updates", "1", "--eval-every", "1", "--target-accuracy", "none",
        "--checkpoint-every", str(10**6), "--seed", str(seed),
        "--out", str(out), "--no-progress", "--format", "json", *EXTRA,
    ]  # fmt: skip


CACHE: str | None = None
"""The measurements' directory every run shares (None: an empty one for each run)."""


def run(src: Path, task: str, model: str, seed: int = 3) -> dict[str, float]:
    """One ``finetune`` process of the checkout at ``src``: its start, evaluation and accuracy."""
    env = {**os.environ, "PYTHONPATH": str(src / "src")}
    with tempfile.TemporaryDirectory() as tmp:
        env["ELIGIBILITY_CACHE_DIR"] = CACHE or str(Path(tmp) / "cache")
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-c", CHILD, *argv(task, model, out, seed)]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        whole = time.perf_counter() - t0
        if p.returncode != 0:
            raise SystemExit(f"{src}: exit {p.returncode}: {p.stderr[-2000:]}")
        start = float(p.stderr.split("START_S")[-1].split()[0])
        with open(out / "metrics.csv", encoding="utf-8") as f:
            row = next(iter(csv.DictReader(f)))
    return {
        "start_s": start,
        "eval_s": float(row["time/eval"]),
        "eval_accuracy": float(row["eval_accuracy"]),
        "sample_s": float(row["time/sample"]),
        "step_s": float(row["time/step"]),
        "whole_s": whole,
    }


def load(model: str) -> float:
    """Seconds to import transformers and load the model and tokenizer alone."""
    cmd = [sys.executable, "-c", LOAD, str(KIT / "models" / model)]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return float(p.stderr.split("LOAD_S")[-1].split()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="the checkout compared against")
    ap.add_argument("--after", type=Path, required=True, help="the checkout measured")
    ap.add_argument("--tasks", nargs="+", default=["json", "antonym"])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--fresh-cache",
        action="store_true",
        help="an empty measurements' directory for every run (each start measures)",
    )
    ap.add_argument(
        "--seed-per-run",
        action="store_true",
        help="each pair a --seed of its own (3, 4, ...), the kept measurements shared",
    )
    ap.add_argument("--dtype", help="every run's --dtype (default: finetune's own)")
    args = ap.parse_args()
    global CACHE
    EXTRA[:] = [] if args.dtype is None else ["--dtype", args.dtype]
    kept = None if args.fresh_cache else tempfile.TemporaryDirectory(prefix="lm-start-cache-")
    CACHE = kept and kept.name
    rows = []
    for task in args.tasks:
        run(args.after, task, args.model)  # warm: the files cached, bytecode written
        run(args.before, task, args.model)
        for i in range(args.pairs):
            order = ("before", "after") if i % 2 == 0 else ("after", "before")
            seed = 3 + (i + 1 if args.seed_per_run else 0)  # the warm-up runs took 3
            got = {side: run(getattr(args, side), task, args.model, seed) for side in order}
            got["load_s"] = load(args.model)
            rows.append({"task": task, "pair": i, **got})
            print(json.dumps(rows[-1]), file=sys.stderr)
    summary = {}
    for task in args.tasks:
        mine = [r for r in rows if r["task"] == task]
        s = {}
        for key in ("start_s", "eval_s", "sample_s", "step_s", "whole_s"):
            for side in ("before", "after"):
                s[f"{side}_{key}"] = statistics.median(r[side][key] for r in mine)
            s[f"{key}_after_over_before"] = statistics.median(
                r["after"][key] / r["before"][key] for r in mine
            )
        s["load_s"] = statistics.median(r["load_s"] for r in mine)
        s["start_over_load"] = statistics.median(r["after"]["start_s"] / r["load_s"] for r in mine)
        s["same_accuracy"] = all(
            r["after"]["eval_accuracy"] == r["before"]["eval_accuracy"] for r in mine
        )
        summary[task] = s
    result = {
        "argv": sys.argv,
        "date": time.strftime("%Y-%m-%d"),
        "threads": os.environ.get("OMP_NUM_THREADS"),
        "measurements": "fresh" if args.fresh_cache else "kept",
        "seed_per_run": args.seed_per_run,
        "dtype": args.dtype,
        "rows": rows,
        "summary": summary,
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
