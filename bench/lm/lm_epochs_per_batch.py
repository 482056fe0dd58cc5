"""Race seeds of ``eligibility finetune`` with K optimiser steps on each batch
(``--epochs-per-batch K``), each seed's runs side by side: the updates and seconds to the target.

    make kit
    OMP_NUM_THREADS=1 python bench/lm/lm_epochs_per_batch.py --task json --seeds 51 52 53 54 55 \
        --ks 1 2 --json bench/results/lm_epochs_per_batch_json.json

Each run is the race's command (``lm_real_race.py``'s ``finetune_argv``: the kit's model and
files, ``correct``, rate 1e-5, G 8 × 4 prompts, float32, the task's T_max, budget, evaluation
spacing and target from ``lm_zero_step.TASKS``, stopping at the target) with
``--epochs-per-batch K`` (and ``--flags``, say ``"--scale group-std"``, on every run). A seed's
runs, one per K, start together, one thread each, so they share the machine's load alike; run
it on an otherwise idle machine. Read from each run's
``metrics.csv``: per evaluation the update, held-out accuracy and the run's clock; per batch
its mean reward and share of tied groups; ``train_s`` the seconds of sampling, rewarding,
scoring and stepping (the evaluations' left out).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAINING = ("time/sample", "time/reward", "time/score", "time/all_reduce", "time/step")


def argv_of(args: argparse.Namespace, seed: int, k: int, out: Path) -> list[str]:
    """The ``finetune`` command of one run (its run directory ``out``)."""
    from lm_real_race import finetune_argv
    from lm_zero_step import race_settings

    extra = [*shlex.split(args.flags), "--epochs-per-batch", str(k)]
    race = race_settings(args.task, args.model, args.lr, extra=extra)
    return finetune_argv(race, args.task, seed, False, out)


def summary(rows: list[dict], task: str, seed: int, k: int, target: float) -> dict:
    """One run's record from its metrics rows."""
    curve = [
        [int(r["update"]), float(r["eval_accuracy"]), float(r["wall_s"])]
        for r in rows
        if r["eval_accuracy"] not in ("", None)
    ]
    hit = [c for c in curve if c[1] >= target]
    train = sum(float(r[c] or 0) for r in rows for c in TRAINING)
    return {
        "task": task,
        "epochs_per_batch": k,
        "seed": seed,
        "target": target,
        "curve": curve,
        "reached": [hit[0][0], hit[0][2]] if hit else None,
        "updates": len(rows),
        "train_s": train,
        "s_per_update": train / max(len(rows), 1),
        "wall_s": float(rows[-1]["wall_s"]) if rows else 0.0,
        "batches": [
            [int(r["update"]), float(r["mean_reward"]), float(r["frac_reward_zero_std"])]
            for r in rows
        ],
    }


def pair(args: argparse.Namespace, seed: int) -> list[dict]:
    """A seed's runs, one per K, at once: their records."""
    from lm_trl import parent_death_signal
    from lm_zero_step import TASKS

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        outs = [Path(tmp) / f"k{k}" for k in args.ks]
        procs = [  # each ends with this script (lm_trl's parent-death signal, and on Ctrl-C)
            subprocess.Popen(
                argv_of(args, seed, k, out),
                env=env,
                stdout=subprocess.DEVNULL,
                preexec_fn=parent_death_signal(),
            )
            for k, out in zip(args.ks, outs, strict=True)
        ]
        try:
            codes = [p.wait() for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                    p.wait()
        for k, code in zip(args.ks, codes, strict=True):
            if code not in (0, 1):  # 1: the target not reached
                raise SystemExit(f"seed {seed}, K {k}: finetune exited {code}")
        records = []
        for k, out in zip(args.ks, outs, strict=True):
            with open(out / "metrics.csv", newline="") as f:
                rows = list(csv.DictReader(f))
            records.append(summary(rows, args.task, seed, k, TASKS[args.task][3]))
        return records


def main() -> None:
    sys.path.insert(0, str(HERE))  # lm_real_race and lm_zero_step, beside this file
    from lm_zero_step import TASKS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="json", choices=sorted(TASKS))
    p.add_argument("--seeds", "--seed", type=int, nargs="+", default=[51])
    p.add_argument("--ks", type=int, nargs="+", default=[1, 2])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--flags", default="", help="more finetune flags, the same for every run")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    t_max, updates, every, target = TASKS[args.task]
    out = {
        "argv": ["bench/lm/lm_epochs_per_batch.py", *sys.argv[1:]],
        "note": f"{args.task}: E {every}, U {updates}, T {target}, T_max {t_max}; each seed's "
        "runs at once, one thread each (OMP_NUM_THREADS=1); read from each run's metrics.csv; "
        "wall_s is the run's own clock from its start",
        "flags": args.flags,
        "runs": [],
    }
    for seed in args.seeds:
        for r in pair(args, seed):
            out["runs"].append(r)
            print(seed, "K", r["epochs_per_batch"], "reached", r["reached"], flush=True)
        if args.json:  # after every seed: a cut sweep keeps what it measured
            Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
