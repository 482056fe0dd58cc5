"""``eligibility finetune`` beside TRL's ``GRPOTrainer`` on the real-model kit: held-out accuracy
against updates, wall time to a target, seconds per update and peak memory, side by side.

    make kit
    OMP_NUM_THREADS=2 python bench/lm/lm_real_race.py run --tasks multiply --seeds 0 1 2 \
        --systems eligibility trl --json bench/results/lm_real_race.json
    python bench/lm/lm_real_race.py report bench/results/lm_real_race.json [--target 0.95]

The kit (``make kit``, ``bench/lm/lm_real_kit.py``) holds real pretrained instruct models as
Hugging Face directories and tasks in TRL's conventions: conversational JSONL prompts with
``answer`` and ``task`` columns, a partial-credit ``reward`` and an exact-match ``correct``
(``tasks/rewards.py``). Every system runs on the same model directory, files, reward, rate,
G completions of P prompts an update, T_max, temperature 1, gradient norm clipped at 1 and
``--threads`` CPU threads, in a process of its own, the systems alternating in order from one
(task, seed) to the next. Every ``--eval-every`` updates the held-out greedy exact match
(``correct`` on the task's held-out split, never trained on) is measured, for ``--updates``
updates.

Systems:

- ``eligibility``: ``eligibility finetune REWARD --model DIR`` with its defaults for a
  pretrained model (RLOO, a sum over each sequence's tokens, no KL term: β = 0, Adam; the
  races of docs/measurements/lm.md before the one at β = 0 ran with β = 0.02, a reward-to-go
  KL) at the shared rate; its own held-out evaluation
  (``--eval-prompts``, ``--eval-metric correct``); a checkpoint only at the end.
- ``trl``: ``GRPOTrainer`` with TRL 1.16's loss defaults (``loss_type="dapo"``,
  ``scale_rewards="group"``, β = 0, one iteration), AdamW at the shared rate, constant,
  gradient checkpointing off (faster here; TRL's default recomputes the forward). The held-out
  evaluation is a ``TrainerCallback`` calling ``lm_kit.greedy_accuracy`` (Hugging Face
  ``generate``, decoded as TRL decodes).
- ``eligibility-lora`` / ``trl-lora``: the same with LoRA adapters (``--lora-r R``; TRL:
  ``peft_config=LoraConfig(r=R)``), peft's defaults for α, dropout and target modules on both.

``--dtype bfloat16``: ours with ``--dtype bfloat16``, TRL with ``bf16=True`` (its default where
the hardware has bf16; mixed precision through ``accelerate``'s autocast); float32 otherwise.

Per run: the held-out accuracy at each evaluation and the training wall seconds at it (the
loop's, evaluations taken out: TRL's measured around each, ours the run's evaluation time
shared equally among its evaluations), seconds per update, the whole process's wall and CPU
seconds and its peak resident memory (``ru_maxrss`` of the child, from ``os.wait4``).
``report --target A`` adds, per (task, seed), the training seconds to the first evaluation at
or past A and TRL's over ours where both reach it (as finely told as ``--eval-every``).

**As the user runs it** (``run --stop-at A``): each system stops at its first evaluation at or
past A (ours with ``--target-accuracy A``, TRL's from the callback, ``should_training_stop``),
and each evaluation also records ``user_s``, the seconds since the command was started:
start-up, imports, loading, every evaluation and the run directory included (ours: the run
directory's config.json, written as the loop starts, plus the row's ``wall_s``; TRL's: the
clock at the end of the evaluation). ``report --target A`` then also sets those side by side.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
KIT = Path(os.environ.get("ELIGIBILITY_KIT", Path.home() / ".cache" / "eligibility-kit"))
SYSTEMS = ("eligibility", "trl", "eligibility-lora", "trl-lora")
PAIRS = (("eligibility", "trl"), ("eligibility-lora", "trl-lora"))
"""(ours, TRL's) of each mode: the runs the reports set side by side."""


def finetune_argv(args: argparse.Namespace, task: str, seed: int, lora: bool, out: Path):
    """The ``eligibility finetune`` command line of one run (its run directory ``out``)."""
    t, rewards = KIT / "tasks" / task, KIT / "tasks" / "rewards.py"
    reward = getattr(args, "reward", "reward")  # a function of the kit's rewards.py, both sides
    spec = getattr(args, "reward_spec", None) or f"{rewards}:{reward}"  # a file's function
    argv = [sys.executable, "-m", "eligibility.cli", "finetune", spec]
    argv += ["--model", str(KIT / "models" / args.model), "--prompts", str(t / "train.jsonl")]
    argv += ["--eval-prompts", str(t / "heldout.jsonl")]
    if not getattr(args, "episodes", False):  # an episode is judged by its return
        argv += ["--eval-metric", f"{rewards}:correct"]
    argv += ["--seed", str(seed), "--lr", str(args.lr), "--group-size", str(args.g)]
    argv += ["--prompts-per-batch", str(args.prompts)]
    if args.t_max is not None:  # None: finetune's own default
        argv += ["--max-completion-length", str(args.t_max)]
    if getattr(args, "temperature", None) is not None:  # None: finetune's own (1)
        argv += ["--temperature", str(args.temperature)]
    argv += ["--eval-every", str(args.eval_every), "--max-updates", str(args.updates)]
    stop = getattr(args, "stop_at", None)
    argv += ["--target-accuracy", "none" if stop is None else str(stop)]
    argv += ["--checkpoint-every", str(10**6), "--out", str(out)]
    argv += ["--no-progress", "--format", "json", "--dtype", getattr(args, "dtype", "float32")]
    argv += ["--eval-on-start"] if getattr(args, "eval_on_start", False) else []
    argv += getattr(args, "extra", [])
    return argv + (["--lora-r", str(args.lora_r)] if lora else [])


def trained(rows: list[dict], res: dict) -> list[tuple[dict, float]]:
    """Each evaluated row of metrics.csv and the training seconds at it (evaluations taken out).

    Each evaluation's own seconds (``time/eval``) up to that row; what ``eval_wall_s`` holds
    beyond them (``--eval-on-start``'s evaluation, before update 1) comes off every row. A file
    without the column: ``eval_wall_s`` shared evenly among the evaluations (with the one at
    the start). An even share is wrong where evaluations take different times (episodes of
    different lengths, a sampler process working beside them): a curve's seconds could fall.
    """
    evals = [r for r in rows if r["eval_accuracy"] not in ("", None)]
    if rows and "time/eval" in rows[0]:
        spent, out = 0.0, []
        for r in rows:
            spent += float(r["time/eval"] or 0.0)
            if r["eval_accuracy"] not in ("", None):
                out.append((r, spent))
        before = max(res["eval_wall_s"] - spent, 0.0)
        return [(r, float(r["wall_s"]) - s - before) for r, s in out]
    first = int(res.get("start_accuracy") is not None)  # --eval-on-start: one before update 1
    share = res["eval_wall_s"] / max(len(evals) + first, 1)
    return [(r, float(r["wall_s"]) - share * (i + 1 + first)) for i, r in enumerate(evals)]


def ours(args: argparse.Namespace, task: str, seed: int, lora: bool, env: dict) -> dict:
    """One ``finetune`` run in a child process: its evaluations and rusage."""
    from eligibility.lm.learner import drift
    from lm_trl import child

    with tempfile.TemporaryDirectory() as tmp:
        spawned = time.time()
        res, use = child(finetune_argv(args, task, seed, lora, Path(tmp) / "run"), env)
        if "error" in res:
            return res
        with open(Path(tmp) / "run" / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        loop = (Path(tmp) / "run" / "config.json").stat().st_mtime - spawned  # the loop's start
    evals = [r for r in rows if r["eval_accuracy"] not in ("", None)]
    curve = [(int(r["update"]), float(r["eval_accuracy"]), s) for r, s in trained(rows, res)]
    rewards = [(int(r["update"]), float(r["eval_reward"])) for r in evals]
    user_s = [(int(r["update"]), loop + float(r["wall_s"])) for r in evals]
    batches = [(int(r["update"]), float(r["mean_reward"]), float(r["accuracy"])) for r in rows]
    zero_std = [(int(r["update"]), float(r["frac_reward_zero_std"])) for r in rows]
    calls = [(int(r["update"]), float(r["tool_calls"])) for r in rows if r.get("tool_calls")]
    train_s = float(rows[-1]["wall_s"]) - res["eval_wall_s"]
    first = float(rows[0]["entropy"])  # the guard's measure (lm.learner.drift), its largest
    kl = max(drift(float(r["kl"]) if r["kl"] else None, float(r["entropy"]), first) for r in rows)
    return {
        "curve": curve, "eval_reward": rewards, "batches": batches, "zero_std": zero_std,
        "train_s": train_s, "user_s": user_s,
        "updates": len(rows), "max_kl": kl, **use, **({"tool_calls": calls} if calls else {}),
        **({"start": res["start_accuracy"]} if res.get("start_accuracy") is not None else {}),
    }  # fmt: skip


def trl_child(args: argparse.Namespace, task: str, seed: int, lora: bool) -> dict:
    """One ``GRPOTrainer`` run in this process (a child of ``run``)."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import lm_kit

    torch.set_num_threads(args.threads)
    t, rewards = KIT / "tasks" / task, KIT / "tasks" / "rewards.py"
    model = KIT / "models" / args.model
    tok = AutoTokenizer.from_pretrained(model, local_files_only=True)
    held = lm_kit.load_rows(t / "heldout.jsonl")
    correct = lm_kit.load_function(rewards, "correct")
    state = {"curve": [], "eval_s": 0.0, "t0": 0.0, "train_s": 0.0, "updates": 0, "user_s": []}
    spawned = float(os.environ["RACE_SPAWNED"])  # the parent's clock as it started this command

    class HeldOut(TrainerCallback):
        def on_train_begin(self, a, st, control, **kw):
            state["t0"] = time.perf_counter()

        def on_step_end(self, a, st, control, model=None, **kw):
            state["updates"] = st.global_step
            state["train_s"] = time.perf_counter() - state["t0"] - state["eval_s"]
            if st.global_step % args.eval_every == 0:
                t0 = time.perf_counter()
                acc = lm_kit.greedy_accuracy(model, tok, held, correct, args.t_max)
                state["eval_s"] += time.perf_counter() - t0
                state["curve"].append((st.global_step, acc, state["train_s"]))
                state["user_s"].append((st.global_step, time.time() - spawned))
                if args.stop_at is not None and acc >= args.stop_at:
                    control.should_training_stop = True

    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=args.lora_r, task_type="CAUSAL_LM")
    with tempfile.TemporaryDirectory() as tmp:
        config = GRPOConfig(
            output_dir=tmp, use_cpu=True, seed=seed, bf16=args.dtype == "bfloat16",
            **lm_kit.trl_settings(args.lr, args.g, args.prompts, args.t_max, args.updates),
        )  # fmt: skip
        trainer = GRPOTrainer(
            model=str(model),
            reward_funcs=lm_kit.load_function(rewards, args.reward),
            args=config,
            train_dataset=Dataset.from_list(lm_kit.load_rows(t / "train.jsonl")),
            processing_class=tok,
            callbacks=[HeldOut()],
            peft_config=peft_config,
        )
        trainer.train()
    keep = ("curve", "train_s", "updates", "user_s")
    return {k: state[k] for k in keep}


def one(args: argparse.Namespace, system: str, task: str, seed: int) -> dict:
    """One run of ``system`` in a child process: a row."""
    from lm_trl import child

    n = str(args.threads)
    env = {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}
    env["TOKENIZERS_PARALLELISM"] = "false"
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    lora = system.endswith("-lora")
    if system.startswith("trl"):
        argv = [sys.executable, __file__, "trl-child", task, str(seed), *passed(args)]
        env["RACE_SPAWNED"] = repr(time.time())
        res, use = child(argv + (["--lora"] if lora else []), env)
        res = {**res, **use}
    else:
        res = ours(args, task, seed, lora, env)
    if "train_s" in res:
        res["s_per_update"] = res["train_s"] / max(res["updates"], 1)
    return {"system": system, "task": task, "seed": seed, **res}


def passed(args: argparse.Namespace) -> list[str]:
    """The shared settings, as a child's arguments."""
    keys = ("model", "lr", "g", "prompts", "t_max", "updates", "eval_every", "threads", "lora_r")
    keys += ("reward", "dtype")
    out = [x for k in keys for x in (f"--{k.replace('_', '-')}", str(getattr(args, k)))]
    return out + ([] if args.stop_at is None else ["--stop-at", str(args.stop_at)])


def run(args: argparse.Namespace) -> list[dict]:
    """Every (task, seed) × system, the systems' order alternating; rows saved as they end."""
    from lm_trl import save_rows

    rows = []
    for k, (task, seed) in enumerate((t, s) for t in args.tasks for s in args.seeds):
        for system in args.systems if k % 2 == 0 else args.systems[::-1]:
            rows.append(one(args, system, task, seed))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            save_rows(args.json, rows)
    return rows


def to_target(rows: list[dict], target: float) -> None:
    """Training seconds to the first evaluation at or past ``target``, per (task, seed).

    With TRL's over ours where both reach it (an evaluation every ``--eval-every`` updates bounds
    how finely this is told).
    """
    first = {}
    for r in (r for r in rows if "curve" in r):
        hit = next(((u, s) for u, a, s in r["curve"] if a >= target), None)
        first[r["task"], r["seed"], r["system"]] = hit
    user = {(r["task"], r["seed"], r["system"]): dict(r["user_s"]) for r in rows if r.get("user_s")}
    print(f"\n| task | seed | system | update, training s to held-out >= {target} | over ours "
          "| as run: s from the command's start | over ours |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    ours_of = {theirs: mine for mine, theirs in PAIRS}
    for (task, seed, system), hit in sorted(first.items()):
        key = (task, seed, ours_of.get(system))
        mine = first.get(key)
        ratio = f"{hit[1] / mine[1]:.2f}" if hit and mine else ""
        cell = f"{hit[0]}, {hit[1]:.0f}" if hit else "not reached"
        run_s = user.get((task, seed, system), {}).get(hit[0]) if hit else None
        mine_s = user.get(key, {}).get(mine[0]) if mine else None
        as_run = "" if run_s is None else f"{run_s:.0f}"
        over = f"{run_s / mine_s:.2f}" if run_s is not None and mine_s else ""
        print(f"| {task} | {seed} | {system} | {cell} | {ratio} | {as_run} | {over} |")


def report(rows: list[dict]) -> None:
    """Markdown: held-out accuracy at each evaluation per run; medians of speed and memory."""
    import numpy as np

    ok = [r for r in rows if "curve" in r]
    at = sorted({u for r in ok for u, _, _ in r["curve"]})
    at = [0, *at] if any("start" in r for r in ok) else at  # before the first update
    print("| task | system | seed | " + " | ".join(f"acc @{u}" for u in at) + " | s/update |"
          " peak MiB |")  # fmt: skip
    print("|---" * (len(at) + 5) + "|")
    for r in sorted(ok, key=lambda r: (r["task"], r["system"], r["seed"])):
        acc = {u: a for u, a, _ in r["curve"]} | ({0: r["start"]} if "start" in r else {})
        cells = " | ".join(f"{acc[u]:.2f}" if u in acc else "–" for u in at)
        print(f"| {r['task']} | {r['system']} | {r['seed']} | {cells} | "
              f"{r['s_per_update']:.2f} | {r.get('peak_mib', float('nan')):.0f} |")  # fmt: skip
    for r in rows:
        if "error" in r:
            print(f"\n{r['system']} {r['task']} seed {r['seed']}: {r['error'][-300:]}")
    by = {(r["task"], r["seed"], r["system"]): r for r in ok}
    for mine, theirs in PAIRS:
        pairs = [(by[k], by[(k[0], k[1], theirs)]) for k in by
                 if k[2] == mine and (k[0], k[1], theirs) in by]  # fmt: skip
        if pairs:
            s = [b["s_per_update"] / a["s_per_update"] for a, b in pairs]
            m = [b["peak_mib"] / a["peak_mib"] for a, b in pairs]
            print(f"\n{theirs} over {mine}, per (task, seed): s/update "
                  f"{', '.join(f'{x:.2f}' for x in s)} (median {np.median(s):.2f}×); "
                  f"peak memory {', '.join(f'{x:.2f}' for x in m)} "
                  f"(median {np.median(m):.2f}×)")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="the side-by-side comparison")
    c = sub.add_parser("trl-child", help=argparse.SUPPRESS)
    for q in (r, c):
        q.add_argument("--model", default="smollm2-135m-instruct")
        q.add_argument("--lr", type=float, default=1e-5)
        q.add_argument("--g", type=int, default=8)
        q.add_argument("--prompts", type=int, default=4)
        q.add_argument("--t-max", type=int, default=8)
        q.add_argument("--updates", type=int, default=30)
        q.add_argument("--eval-every", type=int, default=10)
        q.add_argument("--threads", type=int, default=2)
        q.add_argument("--lora-r", type=int, default=16)
        q.add_argument("--reward", default="reward", help="the training reward (rewards.py)")
        q.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                       help="both systems': our --dtype, TRL's bf16 (mixed precision)")  # fmt: skip
        q.add_argument("--stop-at", type=float, default=None,
                       help="each system stops at its first held-out accuracy >= this")  # fmt: skip
    r.add_argument("--tasks", nargs="+", default=["multiply"])
    r.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    r.add_argument("--systems", nargs="+", default=["eligibility", "trl"], choices=SYSTEMS)
    r.add_argument("--json", default=None)
    c.add_argument("task")
    c.add_argument("seed", type=int)
    c.add_argument("--lora", action="store_true")
    rep = sub.add_parser("report", help="print the tables of result files")
    rep.add_argument("files", nargs="+")
    rep.add_argument("--target", type=float, default=None, help="also the time to this accuracy")
    args = p.parse_args()
    if args.cmd == "trl-child":
        print(json.dumps(trl_child(args, args.task, args.seed, args.lora)))
    elif args.cmd == "report":
        rows = [row for f in args.files for row in json.loads(Path(f).read_text())["runs"]]
        report(rows)
        if args.target is not None:
            to_target(rows, args.target)
    else:
        report(run(args))


if __name__ == "__main__":
    main()
