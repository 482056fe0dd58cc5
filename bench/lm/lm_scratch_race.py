"""A TRL user's from-scratch kit: ``eligibility finetune`` as the user runs it, beside TRL.

    python bench/lm_kit.py /tmp/kit --seeds 0 1 2
    OMP_NUM_THREADS=1 python bench/lm/lm_scratch_race.py run --kit /tmp/kit --tasks copy reverse \
        --seeds 0 1 2 --trl-lr 5e-4 --json bench/results/lm_scratch_race.json
    python bench/lm/lm_scratch_race.py report bench/results/lm_scratch_race.json

The kit (``bench/lm_kit.py``) holds, per task and seed, a random-init Llama directory with its own
tokenizer, JSONL train and held-out splits and a reward in TRL's convention. Two systems, each
run in a process of its own on one CPU thread, alternating in order from one (task, seed) to the
next:

- ``eligibility defaults``: the command a user types, nothing tuned::

      eligibility finetune KIT/TASK/reward.py:reward --model KIT/TASK/model-SEED \
          --prompts KIT/TASK/train.jsonl --eval-prompts KIT/TASK/heldout.jsonl \
          --eval-metric KIT/TASK/reward.py:correct --max-completion-length 8 --seed SEED \
          --target-accuracy 0.95 --max-updates N

  Every other setting is the default: ``--defaults auto`` measures the model at load and takes
  the column it finds (for these random-init models, ``scratch``: lr 1e-3, G 16 × 8 prompts,
  β 0.02; each row records the column, the measured entropy and the rate from the run's
  config.json), ``--eval-every`` 10, checkpoints at the column's cadence.
- ``trl``: ``GRPOTrainer`` as ``bench/lm_trl.py`` runs it (TRL 1.16's loss defaults, AdamW at
  ``--trl-lr``, its rate tuned there with ``lm_trl.py tune``, G = 8 × 16 prompts, T_max 8, its
  held-out accuracy every 10 updates through a callback that stops it at 0.95).

Reported per run: reached, updates, the training loop's wall seconds to the target (the
evaluations' time taken out on both sides; imports, loading and start-up not counted), the
process's wall and CPU seconds and peak memory; then, per (task, seed) both reached, TRL's wall
over ours. The goal it is held to: 5× or more on every seed.

Time it on an idle machine only: on a loaded one the figures are off by several times.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import lm_trl  # noqa: E402

OURS, THEIRS, GOAL = "eligibility defaults", "trl", 5.0


def user_argv(kit: Path, task: str, seed: int, max_updates: int, out: Path) -> list[str]:
    """``eligibility finetune`` as the user types it: the files, the target, nothing tuned."""
    return [
        *lm_trl.kit_argv(kit, task, seed),
        "--max-completion-length",
        str(lm_trl.T_MAX),
        "--seed",
        str(seed),
        "--target-accuracy",
        str(lm_trl.TARGET),
        "--max-updates",
        str(max_updates),
        "--out",
        str(out),
        "--no-progress",
        "--format",
        "json",
    ]


def env() -> dict[str, str]:
    """The children's environment: one thread, this directory importable (``lm_kit``)."""
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }


def ours(kit: Path, task: str, seed: int, max_updates: int) -> dict:
    """One ``eligibility finetune`` run: its result, its column and its loop's wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        res, use = lm_trl.child(user_argv(kit, task, seed, max_updates, run), env())
        if "error" in res:
            return {**res, **use}
        with open(run / "metrics.csv", newline="") as f:
            loop_s = float(list(csv.DictReader(f))[-1]["wall_s"])
        saved = json.loads((run / "config.json").read_text())
    return {
        "solved": res["solved"],
        "updates": res["updates"],
        "wall_s": loop_s - res["eval_wall_s"],
        "eval_s": res["eval_wall_s"],
        "final_accuracy": res["greedy_accuracy"],
        "column": saved["defaults"],
        "model_entropy": saved["model_entropy"],
        "lr": saved["lr"],
        **use,
    }


def theirs(kit: Path, task: str, seed: int, max_updates: int, lr: float) -> dict:
    """One ``GRPOTrainer`` run, in ``lm_trl.py``'s child."""
    argv = [sys.executable, lm_trl.__file__, "trl-child", str(kit), task, str(seed)]
    argv += ["--max-updates", str(max_updates), "--trl-lr", str(lr), "--k", "1"]
    res, use = lm_trl.child(argv, env())
    return {**res, **use}


def run(args: argparse.Namespace) -> list[dict]:
    """Every (task, seed), both systems, alternating their order; rows saved as they finish."""
    rows: list[dict] = []
    pairs = [(task, seed) for task in args.tasks for seed in args.seeds]
    for k, (task, seed) in enumerate(pairs):
        for system in (OURS, THEIRS) if k % 2 == 0 else (THEIRS, OURS):
            kit, n = Path(args.kit), args.max_updates
            if system == OURS:
                res = ours(kit, task, seed, n)
            else:
                res = theirs(kit, task, seed, n, args.trl_lr)
            rows.append({"system": system, "task": task, "seed": seed, **res})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            lm_trl.save_rows(args.json, rows)
    return rows


def report(rows: list[dict]) -> None:
    """``lm_trl``'s table and ratios, the column each run took, and the goal per seed."""
    lm_trl.report(rows)
    by = {(r["task"], r["seed"], r["system"]): r for r in rows if "error" not in r}
    print("\n| task | seed | column (entropy / ln V) | TRL's wall over ours | 5× or more |")
    print("|---|---|---|---|---|")
    for (task, seed, system), r in by.items():
        if system != OURS:
            continue
        m, t = r["model_entropy"], by.get((task, seed, THEIRS))
        column = f"{r['column']} ({m['entropy']:.2f} / {m['ln_v']:.2f})" if m else r["column"]
        if t is None or not (t["solved"] and r["solved"]):
            ratio, held = "–", "no (a side did not reach the target)"
        else:
            x = t["wall_s"] / r["wall_s"]
            ratio, held = f"{x:.1f}", "yes" if x >= GOAL else "no"
        print(f"| {task} | {seed} | {column} | {ratio} | {held} |")
    errors = [r for r in rows if "error" in r]
    for r in errors:
        print(f"\n{r['system']} {r['task']} seed {r['seed']}: {r['error'][:300]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="the race")
    r.add_argument("--kit", required=True)
    r.add_argument("--tasks", nargs="+", default=["copy", "reverse"])
    r.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    r.add_argument("--max-updates", type=int, default=400)
    r.add_argument("--trl-lr", type=float, required=True, help="TRL's tuned rate (lm_trl tune)")
    r.add_argument("--json", default=None)
    rep = sub.add_parser("report", help="print the tables of result files")
    rep.add_argument("files", nargs="+")
    args = p.parse_args()
    if args.cmd == "report":
        report([row for f in args.files for row in json.loads(Path(f).read_text())["runs"]])
    else:
        report(run(args))


if __name__ == "__main__":
    main()
