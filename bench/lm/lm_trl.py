"""``eligibility finetune`` beside TRL's ``GRPOTrainer`` on a TRL user's kit, side by side.

    python bench/lm/lm_kit.py /tmp/kit --seeds 0 1 2 3 4 9
    OMP_NUM_THREADS=1 python bench/lm/lm_trl.py tune --kit /tmp/kit --tasks copy reverse \
        --seeds 9 --max-updates 300 --systems eligibility trl \
        --lrs 3e-4 5e-4 1e-3 2e-3 3e-3 --json bench/results/lm_trl_tune.json
    OMP_NUM_THREADS=1 python bench/lm/lm_trl.py run --kit /tmp/kit --tasks copy \
        --seeds 0 1 2 3 4 --trl-lr 5e-4 --lr 3e-3 \
        --systems eligibility eligibility-lr trl eligibility-trl-loss \
        --json bench/results/lm_trl_copy.json
    python bench/lm/lm_trl.py report bench/results/lm_trl_copy.json
    OMP_NUM_THREADS=1 python bench/lm/lm_trl.py run --kit /tmp/kit --tasks copy --seeds 0 1 2 \
        --trl-lr 5e-4 --systems eligibility trl --epochs-per-batch 1 2 4 \
        --json bench/results/lm_trl_epochs.json

The kit (``bench/lm/lm_kit.py``) holds, per task and seed, what a TRL user brings: a random-init
Llama directory with its own tokenizer and chat template, JSONL train and held-out splits and a
reward module in TRL's convention. Every system runs on those same files, with the same
settings: G = 8 completions of 16 prompts an update, T_max = 8, temperature 1, gradient norm
clipped at 1, one CPU thread each (``OMP_NUM_THREADS=1`` and ``torch.set_num_threads(1)``), in a
process of its own, the systems alternating in order from one (task, seed) to the next. Every
10 updates the held-out greedy accuracy (the kit's ``correct`` metric on the 32 unseen
prompts) is measured and the run stops when it reaches 0.95 (or at ``--max-updates``).

Systems:

- ``trl``: ``GRPOTrainer`` with TRL 1.16's loss defaults (``loss_type="dapo"``,
  ``scale_rewards="group"``, β = 0, one iteration) and AdamW at ``--trl-lr`` (constant; TRL's
  default 1e-6 learns nothing in such a budget: the rate is tuned with ``tune``, on a seed
  apart from the table's, by the rule used for ours: the rate that reaches the target on the
  most tasks, then in the fewest updates), gradient checkpointing off (TRL's default turns it
  on, which recomputes the forward pass: off is TRL's faster setting). The held-out evaluation is a
  ``TrainerCallback`` that calls :func:`lm_kit.greedy_accuracy` (Hugging Face ``generate``)
  and stops training at the target.
- ``eligibility``: ``eligibility finetune`` on the command line with its defaults (RLOO, a sum
  over each sequence's tokens, the KL to the initial policy as a reward-to-go, β = 0.02, Adam at
  1e-3), its own held-out evaluation (``--eval-prompts``, ``--eval-metric correct``), a
  checkpoint only at the end (``--checkpoint-every 1000000``: TRL saves nothing here either).
- ``eligibility-lr``: ``eligibility`` at the rate ``--lr`` (its rate tuned as TRL's is, with
  ``tune --systems eligibility``; the library's default stays what the built-in tasks chose).
- ``eligibility-trl-loss``: the same command with TRL's loss (``--baseline mean --scale
  group-std --aggregation token-mean --kl none --beta 0``) and TRL's tuned rate.

``--epochs-per-batch K`` (several may be given) takes K optimiser steps on each generation
batch: TRL's ``num_iterations = K`` (its default surrogate: the token ratio clipped at ε = 0.2),
``finetune --epochs-per-batch K`` (its default: the sequence ratio, no clip) and, for
``eligibility-trl-loss``, ``--ratio token --clip 0.2`` as TRL. Updates are counted in
generation batches on every side (TRL's optimiser steps / K) and the held-out accuracy is
measured every 10 batches.

Reported per run: reached, updates, training wall seconds to the target (the training loop's:
the evaluations' time taken out on both sides, imports, loading and start-up not counted), the
whole process's wall and CPU seconds (start-up included), and its peak resident memory
(``ru_maxrss`` of the child, from ``os.wait4``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
G, PROMPTS, T_MAX, EVAL_EVERY, TARGET = 8, 16, 8, 10, 0.95
TRL_LOSS = ["--baseline", "mean", "--scale", "group-std", "--aggregation", "token-mean"]
TRL_LOSS += ["--kl", "none", "--beta", "0"]


def kit_argv(kit: Path, task: str, seed: int) -> list[str]:
    """``eligibility finetune`` on a kit's task and seed: its reward, model and data files."""
    d = kit / task
    return [
        sys.executable,
        "-m",
        "eligibility.cli",
        "finetune",
        f"{d / 'reward.py'}:reward",
        "--model",
        str(d / f"model-{seed}"),
        "--prompts",
        str(d / "train.jsonl"),
        "--eval-prompts",
        str(d / "heldout.jsonl"),
        "--eval-metric",
        f"{d / 'reward.py'}:correct",
    ]


def finetune_argv(
    kit: Path, task: str, seed: int, max_updates: int, extra: list[str], out: Path
) -> list[str]:
    """The ``eligibility finetune`` command line of one run (its run directory ``out``)."""
    return [
        *kit_argv(kit, task, seed),
        "--seed",
        str(seed),
        "--group-size",
        str(G),
        "--prompts-per-batch",
        str(PROMPTS),
        "--max-completion-length",
        str(T_MAX),
        "--eval-every",
        str(EVAL_EVERY),
        "--target-accuracy",
        str(TARGET),
        "--max-updates",
        str(max_updates),
        "--checkpoint-every",
        str(10**6),
        # the kit's models are random-init: the from-scratch column's rate and drift bound
        # (which --defaults auto measures them to take), given as every figure of this bench
        # was measured with; an --lr in ``extra`` comes later and wins
        "--lr",
        "1e-3",
        "--max-kl",
        "inf",
        "--out",
        str(out),
        "--no-progress",
        "--format",
        "json",
        *extra,
    ]


def run_trl(kit: Path, task: str, seed: int, max_updates: int, lr: float, k: int = 1) -> dict:
    """One ``GRPOTrainer`` run in this process (a child), K = ``k`` iterations a batch."""
    import tempfile

    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import lm_kit

    torch.set_num_threads(1)
    d = kit / task
    tok = AutoTokenizer.from_pretrained(d / f"model-{seed}", local_files_only=True)
    train = lm_kit.load_rows(d / "train.jsonl")
    held = lm_kit.load_rows(d / "heldout.jsonl")
    reward = lm_kit.load_function(d / "reward.py", "reward")
    correct = lm_kit.load_function(d / "reward.py", "correct")
    state = {"solved": False, "acc": None, "eval_s": 0.0, "updates": 0, "t0": 0.0, "wall": 0.0}

    class HeldOut(TrainerCallback):
        def on_train_begin(self, args, st, control, **kw):
            state["t0"] = time.perf_counter()

        def on_step_end(self, args, st, control, model=None, **kw):
            state["updates"] = st.global_step // k  # generation batches
            if st.global_step % (EVAL_EVERY * k) == 0:
                t = time.perf_counter()
                state["acc"] = lm_kit.greedy_accuracy(model, tok, held, correct, T_MAX)
                state["eval_s"] += time.perf_counter() - t
                if state["acc"] >= TARGET:
                    state["solved"] = True
                    control.should_training_stop = True
            state["wall"] = time.perf_counter() - state["t0"] - state["eval_s"]

    with tempfile.TemporaryDirectory() as tmp:
        settings = lm_kit.trl_settings(lr, G, PROMPTS, T_MAX, max_updates * k)
        args = GRPOConfig(
            output_dir=tmp, use_cpu=True, seed=seed, bf16=False, num_iterations=k, **settings
        )
        trainer = GRPOTrainer(
            model=str(d / f"model-{seed}"),
            reward_funcs=reward,
            args=args,
            train_dataset=Dataset.from_list(train),
            processing_class=tok,
            callbacks=[HeldOut()],
        )
        trainer.train()
    return {
        "solved": state["solved"],
        "updates": state["updates"],
        "wall_s": state["wall"],
        "eval_s": state["eval_s"],
        "final_accuracy": state["acc"],
    }


def parent_death_signal() -> Callable[[], None]:
    """What a child runs before its program: SIGTERM it when the process that started it ends
    (Linux's ``PR_SET_PDEATHSIG``), so a stopped comparison leaves no run going on beside the
    next one. ``prctl`` is looked up here, in the parent: between fork and exec the child only
    calls it (no library loaded in a forked copy of a process with threads)."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def child(argv: list[str], env: dict) -> tuple[dict, dict]:
    """Run ``argv``; its JSON result (ending stdout) and its rusage (CPU, peak memory).

    The child ends with this process (:func:`parent_death_signal`, and on Ctrl-C here).
    """
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            argv, env=env, stdout=out, stderr=err, text=True, preexec_fn=parent_death_signal()
        )
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.terminate()
            proc.wait()
            raise
        process_s = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, error = out.read(), err.read()
    # the result is the JSON document that ends stdout (finetune's is indented); exit 1 is
    # finetune's "target not reached", still a result
    start = text.rfind("\n{")
    if proc.returncode not in (0, 1) or "{" not in text:
        return {"error": f"exit {proc.returncode}: " + (error or text)[-1500:]}, {}
    return json.loads(text[start + 1 if start >= 0 else text.index("{") :]), {
        "process_s": process_s,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_mib": usage.ru_maxrss / 1024,
    }


def one(
    kit: Path,
    system: str,
    task: str,
    seed: int,
    max_updates: int,
    trl_lr: float,
    k: int = 1,
    lr: float | None = None,
) -> dict:
    """One run of ``system`` in a child process, K = ``k`` optimiser steps a batch: a row.

    ``lr``: the learning rate of ``eligibility-lr`` (``eligibility`` with its defaults but
    this rate).
    """
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    if system == "trl":
        argv = [sys.executable, __file__, "trl-child", str(kit), task, str(seed)]
        argv += ["--max-updates", str(max_updates), "--trl-lr", str(trl_lr), "--k", str(k)]
        res, use = child(argv, env)
    else:
        extra = {
            "eligibility": [],
            "eligibility-lr": ["--lr", str(lr)],
            "eligibility-trl-loss": [*TRL_LOSS, "--lr", str(trl_lr)],
        }[system]
        if k > 1:
            extra += ["--epochs-per-batch", str(k)]
            extra += ["--ratio", "token", "--clip", "0.2"] if system.endswith("trl-loss") else []
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            argv = finetune_argv(kit, task, seed, max_updates, extra, Path(tmp) / "run")
            res, use = child(argv, env)
            if "error" not in res:  # the loop's wall time: the last row of metrics.csv
                with open(Path(tmp) / "run" / "metrics.csv", newline="") as f:
                    loop_s = float(list(csv.DictReader(f))[-1]["wall_s"])
                res = {
                    "solved": res["solved"],
                    "updates": res["updates"],
                    "wall_s": loop_s - res["eval_wall_s"],
                    "eval_s": res["eval_wall_s"],
                    "final_accuracy": res["greedy_accuracy"],
                }
    name = f"eligibility lr={lr:g}" if system == "eligibility-lr" else system
    name = name if k == 1 else f"{name} K={k}"
    return {"system": name, "task": task, "seed": seed, "epochs_per_batch": k, **res, **use}


def run(args: argparse.Namespace, systems: list[str]) -> list[dict]:
    """Every (task, seed, K) × system, alternating the systems' order; rows as they finish."""
    rows = []
    runs = [(task, seed, e) for task in args.tasks for seed in args.seeds for e in args.epochs]
    for k, (task, seed, epochs) in enumerate(runs):
        for system in systems if k % 2 == 0 else systems[::-1]:
            kit, n, lr = Path(args.kit), args.max_updates, args.trl_lr
            row = one(kit, system, task, seed, n, lr, epochs, args.lr)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            save_rows(args.json, rows)
    return rows


def save_rows(path: str | None, rows: list[dict]) -> None:
    """The runs so far, written whole to ``path`` (None: nowhere) after each run."""
    if path:
        tmp = Path(path).with_suffix(".tmp")
        tmp.write_text(json.dumps({"argv": sys.argv, "runs": rows}, indent=1))
        os.replace(tmp, path)


def report(rows: list[dict]) -> None:
    """The markdown table: per task and system, seeds reached, medians, and speed-ups."""
    import numpy as np

    print(
        "| task | system | reached 0.95 | updates (median) | wall s to target (median) "
        "| s per update | CPU s | peak MiB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    systems = list(dict.fromkeys(r["system"] for r in rows))
    for task in dict.fromkeys(r["task"] for r in rows):
        for s in systems:
            rs = [r for r in rows if r["task"] == task and r["system"] == s and "error" not in r]
            ok = [r for r in rs if r["solved"]]
            if not rs:
                continue

            def med(key: str, xs: list[dict], fmt: str = ".1f") -> str:
                return format(float(np.median([x[key] for x in xs])), fmt) if xs else "–"

            spu = float(np.median([r["wall_s"] / max(r["updates"], 1) for r in rs]))
            print(
                f"| {task} | {s} | {len(ok)}/{len(rs)} | {med('updates', ok, '.0f')} | "
                f"{med('wall_s', ok)} | {spu:.3f} | {med('cpu_s', rs)} | "
                f"{med('peak_mib', rs, '.0f')} |"
            )
    by = {(r["task"], r["seed"], r["system"]): r for r in rows if "error" not in r}
    for ours in [s for s in systems if not s.startswith("trl")]:
        theirs = "trl" + (f" K={ours.split(' K=')[1]}" if " K=" in ours else "")  # the same K
        ratios = [
            by[(t, s, theirs)]["wall_s"] / by[(t, s, ours)]["wall_s"]
            for (t, s, name) in by
            if name == ours
            and (t, s, theirs) in by
            and by[(t, s, theirs)]["solved"]
            and by[(t, s, ours)]["solved"]
        ]
        if ratios:
            print(
                f"\n{theirs}'s wall to target over {ours}'s, per (task, seed) both reached: "
                f"{', '.join(f'{x:.1f}' for x in ratios)} (median {np.median(ratios):.1f}×)"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="the side-by-side comparison")
    t = sub.add_parser("tune", help="each of --systems at each of --lrs (pick the rates)")
    for q in (r, t):
        q.add_argument("--kit", required=True)
        q.add_argument("--tasks", nargs="+", default=["copy", "reverse"])
        q.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
        q.add_argument("--max-updates", type=int, default=400)
        q.add_argument("--json", default=None)
    t.set_defaults(epochs=[1])
    r.add_argument("--trl-lr", type=float, required=True)
    r.add_argument(
        "--systems",
        nargs="+",
        default=["eligibility", "trl", "eligibility-trl-loss"],
        choices=["eligibility", "eligibility-lr", "trl", "eligibility-trl-loss"],
    )
    r.add_argument("--epochs-per-batch", dest="epochs", nargs="+", type=int, default=[1])
    r.add_argument("--lr", type=float, default=None, help="the rate of eligibility-lr")
    t.add_argument("--lrs", nargs="+", type=float, default=[3e-4, 1e-3, 3e-3, 1e-2])
    t.add_argument("--systems", nargs="+", default=["trl"], choices=["trl", "eligibility"])
    c = sub.add_parser("trl-child", help=argparse.SUPPRESS)
    c.add_argument("kit")
    c.add_argument("task")
    c.add_argument("seed", type=int)
    c.add_argument("--max-updates", type=int)
    c.add_argument("--trl-lr", type=float)
    c.add_argument("--k", type=int, default=1)
    rep = sub.add_parser("report", help="print the table of result files")
    rep.add_argument("files", nargs="+")
    args = p.parse_args()
    if args.cmd == "run" and "eligibility-lr" in args.systems and args.lr is None:
        p.error("eligibility-lr needs --lr (the rate tuned with tune)")
    if args.cmd == "trl-child":
        res = run_trl(Path(args.kit), args.task, args.seed, args.max_updates, args.trl_lr, args.k)
        print(json.dumps(res))
    elif args.cmd == "report":
        report([row for f in args.files for row in json.loads(Path(f).read_text())["runs"]])
    elif args.cmd == "tune":
        rows, out, args.json = [], args.json, None
        for lr in args.lrs:
            args.trl_lr, args.lr = lr, lr
            for system in args.systems:
                which = "eligibility-lr" if system == "eligibility" else system
                rows += [{**row, "system": f"{system} lr={lr:g}"} for row in run(args, [which])]
                if out:  # the runs so far, after each (rate, system)
                    tmp = Path(out).with_suffix(".tmp")
                    tmp.write_text(json.dumps({"argv": sys.argv, "runs": rows}, indent=1))
                    os.replace(tmp, out)
        report(rows)
    else:
        report(run(args, args.systems))


if __name__ == "__main__":
    main()
