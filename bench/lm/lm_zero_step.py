"""One race seed of ``eligibility finetune`` under each rule for a batch of no signal: Adam
stepped on the zero gradient (``step``: the library's rule, as the Hugging Face ``Trainer``
under TRL steps every batch) or no optimiser step at all (``skip``: Adam's t, m and v left as
they were, the rule of *A sparse reward's wait* taken back after its races).

    make kit
    OMP_NUM_THREADS=2 python bench/lm/lm_zero_step.py --task json --seed 62 \
        --json bench/results/lm_zero_step_json62.json

Each rule is the race's command (``lm_real_race.py``'s ``finetune_argv``: the kit's model and
files, ``correct``, rate 1e-5, G 8 × 4 prompts, T_max 16, float32, an evaluation every 2
updates, stopping at the target), run in a process of its own; ``skip`` wraps
``eligibility.lm.update._step`` from outside (no library code is edited). Per update: the batch's
mean reward, the share of groups tied, the held-out accuracy, the gradient's norm.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLUMNS = ("update", "mean_reward", "frac_reward_zero_std", "eval_accuracy", "grad_norm")


def skip_zero_steps() -> None:
    """``lm.update._step`` without the step where every gradient is exactly 0."""
    import eligibility.lm.update as update

    step = update._step

    def skipping(learner, value, config, where):
        if all(p.grad is None or not bool(p.grad.any()) for p in learner.params):
            return 0.0
        return step(learner, value, config, where)

    update._step = skipping


def child(rule: str, argv: list[str]) -> int:
    """The command line ``argv`` under ``rule``, in this process."""
    if rule == "skip":
        skip_zero_steps()
    from eligibility.cli import main

    return main(argv)


def run(args: argparse.Namespace, rule: str) -> list[dict]:
    """One run under ``rule``: its metrics rows, the columns of :data:`COLUMNS`."""
    from lm_real_race import finetune_argv

    race = argparse.Namespace(
        model=args.model,
        lr=args.lr,
        g=8,
        prompts=4,
        t_max=16,
        updates=args.updates,
        eval_every=2,
        threads=2,
        lora_r=16,
        reward="correct",
        dtype="float32",
        stop_at=args.target,
    )
    with tempfile.TemporaryDirectory() as tmp:
        argv = finetune_argv(race, args.task, args.seed, False, Path(tmp) / "run")
        cli = argv[argv.index("eligibility.cli") + 1 :]
        cmd = [sys.executable, __file__, "child", rule, "--", *cli]
        done = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "2"})
        if done.returncode not in (0, 1):  # 1: the target not reached
            raise SystemExit(f"{rule}: finetune exited {done.returncode}")
        with open(Path(tmp) / "run" / "metrics.csv", newline="") as f:
            return [{k: r[k] for k in COLUMNS} for r in csv.DictReader(f)]


def main() -> None:
    if sys.argv[1:2] == ["child"]:
        sys.exit(child(sys.argv[2], sys.argv[4:]))
    sys.path.insert(0, str(HERE))  # lm_real_race, beside this file
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="json")
    p.add_argument("--seed", type=int, default=62)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--updates", type=int, default=20)
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--rules", nargs="+", default=["step", "skip"], choices=("step", "skip"))
    p.add_argument("--json", default=None)
    args = p.parse_args()
    out = {
        "argv": ["bench/lm/lm_zero_step.py", *sys.argv[1:]],
        "task": args.task,
        "seed": args.seed,
        "rules": {r: run(args, r) for r in args.rules},
    }
    for rule, rows in out["rules"].items():
        reached = [
            r["update"]
            for r in rows
            if r["eval_accuracy"] and float(r["eval_accuracy"]) >= args.target
        ]
        print(rule, "reached at", reached[0] if reached else "not reached", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
