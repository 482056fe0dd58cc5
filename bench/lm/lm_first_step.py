"""What one signal after a wait does to a pretrained policy, at its default rate and above.

    OMP_NUM_THREADS=1 python bench/lm/lm_first_step.py --json bench/results/lm_first_step.json \
        antonym:1e-5:0 antonym:1e-4:0 antonym:1e-3:0

Each RUN is ``TASK:LR:SEED``: SmolLM2-135M-Instruct from the kit (``make kit``) on the task's
train prompts with the kit's exact-match reward (``rewards.py:correct``), every other option at
finetune's default (the dtype, G, the prompts a batch, T_max and K as the defaults give them), no
evaluation, the guard off (``--max-kl inf --target-accuracy none``). On a sparse reward the first
updates tie every group and take no optimiser step, so every rate draws the same batches up to
the first update with a right answer (the signal); the run stops one update after it. Recorded
per run: the update of the signal and its right answers, each optimiser step's exact KL(π_θ ‖ π₀)
per token on 16 held-out prompts (``lm_sparse_drift.HeldOutKL``: the full next-token
distributions along the initial model's own samples) and its size ‖Δθ‖, and the sampled tokens'
surprisal (the ``entropy`` column), mean length and reward of the batch of the signal (drawn
before its step) and of the batch after it (drawn from the weights the signal left). Each run is
a process of its own (torch's optimiser hooks are global); results are appended to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
KIT = Path(os.environ.get("ELIGIBILITY_KIT", Path.home() / ".cache" / "eligibility-kit"))
MODEL = "smollm2-135m-instruct"


def one(spec: str, updates: int) -> dict:
    """One RUN in this process (see the module)."""
    import torch
    from transformers import AutoTokenizer

    import eligibility.lm.trainer as trainer
    from eligibility.lm import FinetuneConfig, finetune
    from lm_sparse_drift import HeldOutKL, Recorder

    task, lr, seed = spec.split(":")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    t = KIT / "tasks" / task
    state: dict = {}
    real_update = trainer.update

    def update(run, batch, rewards, loss_args):  # the model, and the probe on its initial weights
        state["model"] = run.learner.model
        if "probe" not in state:
            rows = [json.loads(x) for x in (t / "heldout.jsonl").read_text().splitlines()]
            tok = AutoTokenizer.from_pretrained(KIT / "models" / MODEL, local_files_only=True)
            state["probe"] = HeldOutKL(state["model"], tok, rows, run.t_max)
        state["steps_before"] = len(rec.steps)
        return real_update(run, batch, rewards, loss_args)

    trainer.update = update
    rec = Recorder(lambda: state["model"], lambda: state["probe"])
    seen: list[dict] = []

    def callback(row):
        seen.append(dict(row))
        signal = [r for r in seen if float(r["grad_norm"]) > 0]
        return False if signal and seen[-1]["update"] > signal[0]["update"] else None

    with tempfile.TemporaryDirectory() as tmp:
        config = FinetuneConfig(
            f"{KIT / 'tasks' / 'rewards.py'}:correct", model=str(KIT / "models" / MODEL),
            prompts=str(t / "train.jsonl"), eval_every=0, max_updates=updates, seed=int(seed),
            lr=float(lr), max_kl=float("inf"), target_accuracy=None, progress=False,
            checkpoint_every=10**6, out=str(Path(tmp) / "run"),
        )  # fmt: skip
        result = finetune(config, callback=callback)
        result.task.close()
        saved = json.loads((Path(tmp) / "run" / "config.json").read_text())
    signal = next((r for r in seen if float(r["grad_norm"]) > 0), None)
    after = seen[-1] if signal is not None and seen[-1] is not signal else None
    keep = ("update", "mean_reward", "accuracy", "entropy", "mean_length", "grad_norm")
    return {
        "spec": spec,
        "dtype": saved.get("dtype"),
        "epochs_per_batch": saved.get("epochs_per_batch"),
        "group_size": saved.get("group_size"),
        "prompts_per_batch": saved.get("prompts_per_batch"),
        "signal": None if signal is None else {k: signal[k] for k in keep},
        "after": None if after is None else {k: after[k] for k in keep},
        "steps": [
            {k: s[k] for k in ("adam_t", "grad_zero", "dtheta", "kl_heldout")} for s in rec.steps
        ],
        "rows": [{k: r[k] for k in keep} for r in seen],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("runs", nargs="+", help="TASK:LR:SEED")
    p.add_argument("--updates", type=int, default=20, help="the most updates a run waits")
    p.add_argument("--json", required=True)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:  # one run, its result on stdout
        print(json.dumps(one(args.runs[0], args.updates)))
        return
    out = Path(args.json)
    data = json.loads(out.read_text()) if out.exists() else {"runs": []}
    data["argv"] = ["bench/lm/lm_first_step.py", *sys.argv[1:]]  # the last command that added
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[1] / "src")}
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
    ).stdout.strip()
    for spec in args.runs:
        cmd = [sys.executable, __file__, spec, "--child", "--updates", str(args.updates)]
        cmd += ["--json", args.json]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(spec, "failed:", done.stderr[-2000:], file=sys.stderr)
            continue
        res = json.loads(done.stdout.strip().splitlines()[-1])
        res.update(commit=commit, date=time.strftime("%Y-%m-%d", time.gmtime()))
        data["runs"].append(res)
        out.write_text(json.dumps(data, indent=1) + "\n")
        s, a = res["signal"], res["after"]
        kl = res["steps"][-1]["kl_heldout"] if res["steps"] else None
        print(spec, "signal", s and s["update"], "kl", kl, "entropy", s and s["entropy"],
              "->", a and a["entropy"], file=sys.stderr)  # fmt: skip


if __name__ == "__main__":
    main()
