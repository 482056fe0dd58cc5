"""Seconds per update of ``finetune``'s dtypes: float32 against bf16 (corrected, uncorrected).

    make kit
    OMP_NUM_THREADS=2 python bench/lm/lm_dtype_speed.py --pairs 4 --updates 4 \
        --json bench/results/lm_dtype_speed.json
    ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=2 python bench/lm/lm_dtype_speed.py --pairs 4 \
        --updates 4 --json bench/results/lm_dtype_speed_avx2.json

Each run is ``eligibility finetune rewards.py:correct --model KIT/models/MODEL`` on the kit's
``antonym`` files with ``--max-updates U --eval-every 0`` and one of the settings below, a
process of its own (``python -m eligibility``), as the user runs it. Per run:

- ``update_s``: the mean seconds of the updates after the first, from ``metrics.csv``'s
  ``wall_s`` (the first update holds the kernels' first calls);
- ``process_s``: the whole process, start to exit (set-up and the final write included);
- ``resolved``: the dtype and correction the run saved (``config.json``), so that ``auto`` is
  seen as this machine resolves it.

The settings alternate in order from one pair to the next (a rotation), after one unmeasured
run of each (files cached, bytecode written). Reported: per setting the median of each figure,
and the median of the pairwise ratios of ``update_s`` to float32's. Timings mean something only
on an idle machine: run it with nothing else running and say which machine it was.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from eligibility._io import atomic_write_json

KIT = Path(os.environ.get("KIT", Path.home() / ".cache" / "eligibility-kit"))

SETTINGS = {
    "float32": ["--dtype", "float32"],
    "bfloat16": ["--dtype", "bfloat16", "--importance-sampling", "none"],
    "bfloat16 corrected": ["--dtype", "bfloat16", "--importance-sampling", "sequence-mask"],
    "auto": [],  # the default: what this machine resolves it to is in ``resolved``
}


def command(args: argparse.Namespace, out: Path, flags: list[str]) -> list[str]:
    """The ``finetune`` command of one run (the kit's task, this script's budget)."""
    tasks = KIT / "tasks"
    return [
        sys.executable, "-m", "eligibility", "finetune", f"{tasks}/rewards.py:correct",
        "--model", str(KIT / "models" / args.model),
        "--prompts", str(tasks / args.task / "train.jsonl"),
        "--max-updates", str(args.updates), "--eval-every", "0", "--seed", str(args.seed),
        "--out", str(out), "--no-progress", *flags,
    ]  # fmt: skip


def one(args: argparse.Namespace, flags: list[str]) -> dict:
    """One run in a process of its own: its seconds per update, its whole time, what it chose."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        t0 = time.time()
        done = subprocess.run(command(args, out, flags), capture_output=True, text=True)
        process_s = time.time() - t0
        if done.returncode != 0:
            raise SystemExit(f"finetune failed ({done.returncode}): {done.stderr[-2000:]}")
        with open(out / "metrics.csv", newline="") as f:
            walls = [float(r["wall_s"]) for r in csv.DictReader(f)]
        config = json.loads((out / "config.json").read_text())
    later = [b - a for a, b in itertools.pairwise(walls)]
    return {
        "update_s": statistics.mean(later) if later else walls[0],
        "first_update_s": walls[0],
        "process_s": process_s,
        "resolved": [config["dtype"], config["importance_sampling"]],
        "warned": "π_score/π_sample" in done.stderr,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--task", default="antonym")
    p.add_argument("--seed", type=int, default=21)
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--updates", type=int, default=4)
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--json", default=None)
    args = p.parse_args()
    names = args.settings
    for name in names:  # unmeasured: files cached, bytecode written
        one(args, SETTINGS[name])
    rows = []
    for k in range(args.pairs):
        order = names[k % len(names) :] + names[: k % len(names)]
        rows.append({name: one(args, SETTINGS[name]) for name in order})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    summary = {}
    for name in names:
        summary[name] = {
            key: statistics.median(r[name][key] for r in rows)
            for key in ("update_s", "first_update_s", "process_s")
        }
        summary[name]["resolved"] = rows[0][name]["resolved"]
        summary[name]["warned"] = any(r[name]["warned"] for r in rows)
        if "float32" in names and name != "float32":
            ratios = [r[name]["update_s"] / r["float32"]["update_s"] for r in rows]
            summary[name]["update_s_over_float32"] = statistics.median(ratios)
    record = {
        "argv": sys.argv,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "commit": subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "machine": platform.machine(),
        "cpu": cpu_name(),
        "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY", ""),
        "threads": os.environ.get("OMP_NUM_THREADS", ""),
        "rows": rows,
        "summary": summary,
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        atomic_write_json(args.json, record)


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else the platform's word."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
