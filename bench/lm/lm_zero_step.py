"""Race seeds of ``eligibility finetune`` under each rule for a batch of no signal: Adam
stepped on the zero gradient (``step``: as the Hugging Face ``Trainer`` under TRL steps every
batch) or no optimiser step at all (``skip``: Adam's t, m and v left as they were).

    make kit
    OMP_NUM_THREADS=2 python bench/lm/lm_zero_step.py --task json --seeds 62 \
        --json bench/results/lm_zero_step_json62.json

Each rule is the race's command (``lm_real_race.py``'s ``finetune_argv``: the kit's model and
files, ``correct``, rate 1e-5, G 8 × 4 prompts, float32, the task's T_max, budget, evaluation
spacing and target from :data:`TASKS`, stopping at the target), run in a process of its own;
each rule is set from outside (:func:`zero_rule`), so the installed library's own rule does not
decide it. Per update: the batch's mean reward, the share of groups tied, the held-out
accuracy, the gradient's norm.
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
# task: T_max, budget in updates, evaluation spacing, target (lm_race_as_run.sh's, fixed first)
TASKS = {"antonym": (16, 36, 3, 0.5), "json": (16, 20, 2, 0.95)}
RULES = ("step", "skip")


def zero_rule(rule: str) -> None:
    """``lm.update`` under ``rule`` where every gradient is exactly 0.

    A batch of no signal has every row scored (``live_rows`` answers None for it), so it reaches
    ``_step`` with its gradient of exactly 0 as the full path computes it; ``_step`` is wrapped
    to step Adam on it or not. A batch with a signal is scored as the library scores it.
    """
    import eligibility.lm.update as update

    step, live_rows = update._step, update.live_rows

    def scored(*a, **kw):
        live = live_rows(*a, **kw)
        return None if live is not None and not bool(live.any()) else live

    update.live_rows = scored

    def ruled(learner, value, config, where):
        if any(p.grad is not None and bool(p.grad.any()) for p in learner.params):
            return step(learner, value, config, where)
        if rule == "step":
            learner.optimizer.step()
            learner.steps += 1
        return 0.0

    update._step = ruled


def child(rule: str, argv: list[str]) -> int:
    """The command line ``argv`` under ``rule``, in this process."""
    zero_rule(rule)
    from eligibility.cli import main

    return main(argv)


def race_settings(task: str, model: str, lr: float, **more) -> argparse.Namespace:
    """``lm_real_race.finetune_argv``'s settings of the race on ``task`` (:data:`TASKS`)."""
    t_max, updates, every, target = TASKS[task]
    return argparse.Namespace(
        model=model,
        lr=lr,
        g=8,
        prompts=4,
        t_max=t_max,
        updates=updates,
        eval_every=every,
        lora_r=16,
        reward="correct",
        dtype="float32",
        stop_at=target,
        **more,
    )


def run(args: argparse.Namespace, rule: str, seed: int) -> list[dict]:
    """One run under ``rule``: its metrics rows, the columns of :data:`COLUMNS`."""
    from lm_real_race import finetune_argv

    race = race_settings(args.task, args.model, args.lr, threads=args.threads)
    threads = {"OMP_NUM_THREADS": str(args.threads)}
    with tempfile.TemporaryDirectory() as tmp:
        argv = finetune_argv(race, args.task, seed, False, Path(tmp) / "run")
        cli = argv[argv.index("eligibility.cli") + 1 :]
        cmd = [sys.executable, __file__, "child", rule, "--", *cli]
        done = subprocess.run(cmd, env={**os.environ, **threads})
        if done.returncode not in (0, 1):  # 1: the target not reached
            raise SystemExit(f"{rule}: finetune exited {done.returncode}")
        with open(Path(tmp) / "run" / "metrics.csv", newline="") as f:
            return [{k: r[k] for k in COLUMNS} for r in csv.DictReader(f)]


def reached(rows: list[dict], target: float) -> int | None:
    """The update of the first evaluation at or past ``target`` (None: not reached)."""
    hit = [r["update"] for r in rows if r["eval_accuracy"] and float(r["eval_accuracy"]) >= target]
    return int(hit[0]) if hit else None


def main() -> None:
    if sys.argv[1:2] == ["child"]:
        sys.exit(child(sys.argv[2], sys.argv[4:]))
    sys.path.insert(0, str(HERE))  # lm_real_race, beside this file
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="json", choices=sorted(TASKS))
    p.add_argument("--seeds", "--seed", type=int, nargs="+", default=[62])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rules", nargs="+", default=list(RULES), choices=RULES)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    target = TASKS[args.task][3]
    out = {"argv": ["bench/lm/lm_zero_step.py", *sys.argv[1:]], "task": args.task, "runs": []}
    for seed in args.seeds:
        for rule in args.rules:
            rows = run(args, rule, seed)
            right = sum(round(float(r["mean_reward"]) * 32) for r in rows)
            out["runs"].append({"seed": seed, "rule": rule, "rows": rows})
            print(seed, rule, "reached at", reached(rows, target), "right", right, flush=True)
            if args.json:  # after every run: a cut sweep keeps what it measured
                Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
