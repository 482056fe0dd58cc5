"""Dr. GRPO in miniature: per-sequence mean (GRPO) against a constant normaliser (Dr. GRPO).

    OMP_NUM_THREADS=1 python bench/lm/lm_dr_grpo.py run --arm sequence-mean --seeds 0-9 \
        --json bench/results/lm_dr_grpo_sequence-mean.json
    OMP_NUM_THREADS=1 python bench/lm/lm_dr_grpo.py run --arm constant --seeds 0-9 \
        --json bench/results/lm_dr_grpo_constant.json
    python bench/lm/lm_dr_grpo.py plot bench/results/lm_dr_grpo_*.json --out docs/lm_dr_grpo.png

Liu et al. (2025, arXiv:2503.20783) show that GRPO's 1/Lᵢ per sequence makes incorrect
completions grow longer (a long wrong answer's tokens are each penalised less), and that a
constant normaliser does not. Here the two arms differ in ``--aggregation`` alone
(``sequence-mean`` against ``constant``, 1/(N·T_max)); both use the group-mean baseline of
GRPO and Dr. GRPO, no std scaling, and every other default of ``eligibility finetune``, on the
``sum`` task (many correct answers, of different lengths), a fixed budget and no early stop.
``plot`` draws, per update, the mean over seeds of the mean length of the incorrect sampled
completions and of the sampled accuracy, with 95% t-intervals over seeds, and prints the
late-training averages.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

LABELS = {
    "sequence-mean": "GRPO: per-sequence mean 1/Lᵢ",
    "constant": "Dr. GRPO: constant 1/(N·T_max)",
}


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def run(args: argparse.Namespace) -> None:
    import torch

    from eligibility.lm import FinetuneConfig, finetune

    torch.set_num_threads(1)
    runs = []
    for seed in _seeds(args.seeds):
        t0 = time.perf_counter()
        r = finetune(
            FinetuneConfig(
                args.task,
                seed=seed,
                aggregation=args.arm,
                baseline="mean",
                max_updates=args.updates,
                target_accuracy=None,
                eval_every=0,
                progress=False,
            )
        )
        keep = ("update", "accuracy", "incorrect_length", "mean_length", "mean_reward")
        runs.append(
            {
                "seed": seed,
                "wall_s": time.perf_counter() - t0,
                "history": [{k: h[k] for k in keep} for h in r.history],
            }
        )
        print(f"{args.arm} seed {seed}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        with open(args.json, "w") as f:  # after every seed: a cut-short run keeps what it has
            json.dump(
                {"arm": args.arm, "task": args.task, "updates": args.updates, "runs": runs}, f
            )


def _curve(runs: list[dict], key: str, smooth: int) -> tuple[np.ndarray, np.ndarray]:
    """Per update: mean over seeds and the 95% t half-width (each seed smoothed over a window)."""
    from scipy import stats

    n = min(len(r["history"]) for r in runs)
    x = np.array([[np.nan if h[key] is None else h[key] for h in r["history"][:n]] for r in runs])
    k = np.ones(smooth)
    sm = np.array(
        [
            np.convolve(np.nan_to_num(row, nan=0.0), k, "valid")
            / np.maximum(np.convolve(~np.isnan(row), k, "valid"), 1)
            for row in x
        ]
    )
    half = stats.t.ppf(0.975, len(runs) - 1) * sm.std(0, ddof=1) / np.sqrt(len(runs))
    return sm.mean(0), half


def plot(args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from eligibility._io import save_figure

    arms = [json.load(open(p)) for p in args.files]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for arm in arms:
        label = LABELS.get(arm["arm"], arm["arm"])
        for ax, key in zip(axes, ("incorrect_length", "accuracy"), strict=True):
            m, h = _curve(arm["runs"], key, args.smooth)
            x = np.arange(len(m)) + args.smooth
            (line,) = ax.plot(x, m, label=f"{label} ({len(arm['runs'])} seeds)")
            ax.fill_between(x, m - h, m + h, color=line.get_color(), alpha=0.25)
        late = slice(-args.late, None)
        for key in ("incorrect_length", "accuracy"):
            per_seed = [
                np.nanmean([np.nan if h[key] is None else h[key] for h in r["history"][late]])
                for r in arm["runs"]
            ]
            from scipy import stats

            hw = (
                stats.t.ppf(0.975, len(per_seed) - 1)
                * np.std(per_seed, ddof=1)
                / np.sqrt(len(per_seed))
            )
            print(
                f"{arm['arm']}: {key} over the last {args.late} updates: "
                f"{np.mean(per_seed):.2f} ± {hw:.2f} (95% t, {len(per_seed)} seeds)"
            )
    axes[0].set_ylabel("mean length of incorrect completions (tokens)")
    axes[1].set_ylabel("accuracy of sampled completions")
    for ax in axes:
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle(
        f"{arms[0]['task']} task, tiny transformer; shaded: 95% interval over seeds",
        fontsize="medium",
    )
    fig.tight_layout()
    save_figure(fig, args.out, dpi=110)
    print(args.out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--arm", choices=["sequence-mean", "constant"], required=True)
    r.add_argument("--seeds", default="0-9")
    r.add_argument("--task", default="sum")
    r.add_argument("--updates", type=int, default=150)
    r.add_argument("--json", required=True)
    r.set_defaults(fn=run)
    q = sub.add_parser("plot")
    q.add_argument("files", nargs="+")
    q.add_argument("--out", default="docs/lm_dr_grpo.png")
    q.add_argument("--smooth", type=int, default=10)
    q.add_argument("--late", type=int, default=50)
    q.set_defaults(fn=plot)
    args = p.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
