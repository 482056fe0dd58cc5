"""Choosing ``finetune``'s defaults for a pretrained model (``lm.config.BY_MODEL``'s pretrained
column) on the real-model kit's tuning tasks, and validating the choice on its held-out tasks.

    make kit
    OMP_NUM_THREADS=2 python bench/lm/lm_real_defaults.py run --tasks add date capital --seeds 0 \
        --json bench/results/lm_real_defaults_tune.json
    OMP_NUM_THREADS=2 python bench/lm/lm_real_defaults.py run --tasks multiply json antonym \
        --seeds 0 1 2 --candidates CHOSEN --json bench/results/lm_real_defaults_validate.json
    python bench/lm/lm_real_defaults.py report bench/results/lm_real_defaults_tune.json

A candidate is ``LR:G:P``, ``LR:G:P:T`` or ``LR:G:P:T:τ``: Adam's rate, G completions per
prompt, P prompts an update, T_max (empty or absent: ``finetune``'s default for a JSONL task,
16 tokens) and the sampling temperature τ (absent: 1), every other option at ``finetune``'s
pretrained default. The grid spans the rate and, at an equal number of
completions an update (so about equal wall), G against P: a larger group is the lever for a
sparse reward (one right completion in a group is enough for a non-zero advantage). Each run is
``eligibility finetune`` on SmolLM2-135M-Instruct with the kit's partial-credit ``reward``, 30
updates, the held-out greedy exact match (``correct``) and mean reward every 10, in a process
of its own (``lm_real_race.ours``).

The rule (``choose``): a candidate whose run went past the divergence guard (KL to the initial
model above 1 nat per token) on any run is out; of the rest, the highest mean held-out exact
match at the last evaluation over the tuning runs, ties (equal to 1e-9) broken by the mean
held-out reward there, then by the smaller rate (the gentler step).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

GRID = ("1e-5:8:4", "3e-5:8:4", "1e-5:16:2", "3e-5:16:2")
MAX_KL = 1.0


def label(candidate: str, extra: list[str]) -> str:
    """A run's candidate as the reports name it: ``LR:G:P…`` and the ``--extra`` flags."""
    return " ".join([candidate, *extra])


def parse(candidate: str) -> tuple[float, int, int, int | None, float | None]:
    """``LR:G:P[:T[:τ]]`` (with any ``--extra`` flags after it) → (rate, G, P, T_max or None,
    temperature or None)."""
    lr, g, p, *rest = candidate.split()[0].split(":")
    t = int(rest[0]) if rest and rest[0] else None
    tau = float(rest[1]) if len(rest) > 1 else None
    return float(lr), int(g), int(p), t, tau


def run(args: argparse.Namespace) -> list[dict]:
    """Every (task, seed) × candidate, the candidates' order alternating; rows saved as they end."""
    import os

    from lm_real_race import ours
    from lm_trl import save_rows

    n = str(args.threads)
    env = {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}
    env["TOKENIZERS_PARALLELISM"] = "false"
    rows = []
    for k, (task, seed) in enumerate((t, s) for t in args.tasks for s in args.seeds):
        for candidate in args.candidates if k % 2 == 0 else args.candidates[::-1]:
            lr, g, p, t_max, tau = parse(candidate)
            settings = argparse.Namespace(
                model=args.model, lr=lr, g=g, prompts=p, t_max=t_max, temperature=tau,
                reward=args.reward, extra=args.extra,
                updates=args.updates, eval_every=args.eval_every, lora_r=16,
            )  # fmt: skip
            res = ours(settings, task, seed, False, env)
            rows.append({"candidate": label(candidate, args.extra), "task": task, "seed": seed})
            rows[-1].update(res)
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            save_rows(args.json, rows)
    return rows


def choose(rows: list[dict]) -> str:
    """The rule of the module docstring: the chosen candidate."""
    import numpy as np

    ok = [r for r in rows if "curve" in r]
    by: dict[str, list[dict]] = {}
    for r in ok:
        by.setdefault(r["candidate"], []).append(r)
    scores = {}
    for c, runs in by.items():
        if any(r["max_kl"] > MAX_KL for r in runs):
            continue
        exact = float(np.mean([r["curve"][-1][1] for r in runs]))
        reward = float(np.mean([r["eval_reward"][-1][1] for r in runs]))
        scores[c] = (round(exact, 9), round(reward, 9), -parse(c)[0])
    if not scores:
        raise ValueError("every candidate diverged: no choice")
    return max(scores, key=scores.__getitem__)


def first_right(row: dict) -> str:
    """The first update whose batch held an exactly right completion (R = 1)."""
    if "batches" not in row:
        return "not recorded"
    first = next((u for u, _, accuracy in row["batches"] if accuracy > 0), None)
    return f"update {first}" if first is not None else f"none in {row['updates']}"


def report(rows: list[dict]) -> None:
    """Markdown: per candidate and task, held-out exact match / mean reward at each evaluation,
    the first update that sampled a right completion, the largest KL, seconds per update."""
    ok = [r for r in rows if "curve" in r]
    at = sorted({u for r in ok for u, _, _ in r["curve"]})
    print("| candidate (lr:G:P) | task | seed | " + " | ".join(f"@{u}" for u in at)
          + " | first right sample | max KL | s/update |")  # fmt: skip
    print("|---" * (len(at) + 6) + "|")
    for r in sorted(ok, key=lambda r: (r["candidate"], r["task"], r["seed"])):
        acc = {u: a for u, a, _ in r["curve"]}
        rew = dict((u, x) for u, x in r["eval_reward"])
        cells = " | ".join(f"{acc[u]:.2f} / {rew[u]:.2f}" if u in acc else "–" for u in at)
        print(f"| {r['candidate']} | {r['task']} | {r['seed']} | {cells} | {first_right(r)} | "
              f"{r['max_kl']:.2f} | {r['train_s'] / r['updates']:.2f} |")  # fmt: skip
    for r in rows:
        if "error" in r:
            print(f"\n{r['candidate']} {r['task']} seed {r['seed']}: {r['error'][-300:]}")
    if ok:
        try:
            print(f"\nchosen by the rule: {choose(rows)}")
        except ValueError as e:  # every candidate past the guard's distance
            print(f"\nno choice: {e}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="every candidate on every (task, seed)")
    r.add_argument("--model", default="smollm2-135m-instruct")
    r.add_argument("--tasks", nargs="+", default=["add", "date", "capital"])
    r.add_argument("--seeds", nargs="+", type=int, default=[0])
    r.add_argument("--candidates", nargs="+", default=list(GRID))
    r.add_argument("--updates", type=int, default=30)
    r.add_argument("--eval-every", type=int, default=10)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--reward", default="reward", help="the training reward (rewards.py)")
    r.add_argument(
        "--extra",
        type=shlex.split,
        default=[],
        metavar="FLAGS",
        help="more finetune flags for every run, one string: --extra='--kl none'",
    )
    r.add_argument("--json", default=None)
    rep = sub.add_parser("report", help="print the table of result files and the choice")
    rep.add_argument("files", nargs="+")
    args = p.parse_args()
    if args.cmd == "report":
        report([row for f in args.files for row in json.loads(Path(f).read_text())["runs"]])
    else:
        report(run(args))


if __name__ == "__main__":
    main()
