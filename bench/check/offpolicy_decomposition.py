"""The bias of the frameworks' default off-policy GRPO losses, split into its parts, measured.

On the check's exact off-policy problems ``near`` and ``far`` (``eligibility check --sequence
--off-policy``: the lab's ``length`` problem at θ_old, θ two or four exact gradient steps later,
completions drawn by a sampler μ ≠ π_old), each framework's default estimator is computed on
the same ``--batches`` batches of 2 prompts × 8 completions as every step of its path from the
unbiased product weight (advantage, aggregation, ratio, clip, sampler correction, switched on in
that order; :func:`eligibility.check.offpolicy.decompose`). The bias of the default, E[ĝ] − ∇J
(∇J exact), is then the sum of

* the sampling noise (the unbiased reference's mean on these batches minus ∇J: it bounds the
  resolution of the table);
* one part per switch: the difference of the means before and after it;

each reported with its norm and its share ⟨part, bias⟩ / ‖bias‖² (the shares sum to 1).

The defaults, as read from the frameworks' sources (TRL 1.16 ``GRPOConfig``; verl
``actor`` config and ``core_algos``; OpenRLHF ``PolicyLoss``):

* TRL: ``loss_type="dapo"`` (token mean over the batch), ``scale_rewards="group"`` (1/σ),
  ``importance_sampling_level="token"``, ``epsilon`` = 0.2 = ``epsilon_high``, and with vLLM
  ``vllm_importance_sampling_mode="sequence_mask"`` with C = 3;
* verl: token ratio, ``clip_ratio_low`` = ``clip_ratio_high`` = 0.2, dual clip ``clip_ratio_c``
  = 3, ``loss_agg_mode="token-mean"``, GRPO's std-normalised advantage, no rollout correction;
* OpenRLHF: token ratio, ``clip_eps_low`` = ``clip_eps_high`` = 0.2, token-level mean,
  std-normalised group advantage, no vLLM correction.

    python bench/check/offpolicy_decomposition.py --batches 20000 \\
        --json bench/results/offpolicy_decomposition.json --figure docs/offpolicy_decomposition.png
    python bench/check/offpolicy_decomposition.py --report \\
        --json bench/results/offpolicy_decomposition.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

FRAMEWORKS = {
    "TRL 1.16": ("token", "ppo", "mis-3", "token-mean", "group-std"),
    "verl": ("token", "dual", "none", "token-mean", "group-std"),
    "OpenRLHF": ("token", "ppo", "none", "token-mean", "group-std"),
}
"""Each framework's default as (ratio, clip, sampler, aggregation, advantage)."""


def _path(target):
    from eligibility.check.offpolicy import PATH, REFERENCE, Variant

    steps, current = [REFERENCE], REFERENCE
    for name in PATH:
        step = Variant(**{**current.__dict__, name: getattr(target, name)})
        if step != current:
            steps.append(step)
            current = step
    return steps


def measure(problem_name: str, batches: int, seed: int) -> dict:
    """Each framework's decomposition on one problem (a dict ready for JSON)."""
    from eligibility.check import offpolicy as off

    problem = off._problem(problem_name)
    targets = {k: off.Variant(*v) for k, v in FRAMEWORKS.items()}
    chosen = list(dict.fromkeys(v for t in targets.values() for v in _path(t)))
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    rows = np.stack([d.rows for d in off._draws(problem, batches, rng)])
    every = off.estimates(problem, rows, chosen)
    means = {v: every[j].mean(axis=0) for j, v in enumerate(chosen)}
    noise_se = float(np.linalg.norm(every[0].std(axis=0, ddof=1)) / np.sqrt(batches))
    out = {
        "problem": problem_name,
        "kl_old": problem.kl_old(),
        "clipped_share": problem.clipped_share(0.2, 0.2),
        "exact_norm": float(np.linalg.norm(problem.exact)),
        "reference_noise_se": noise_se,
        "batches": batches,
        "seconds": time.perf_counter() - t0,
        "frameworks": {},
    }
    for name, target in targets.items():
        split = off.decompose(means[target], problem.exact, means, target)
        split["relative_bias"] = split["bias_norm"] / out["exact_norm"]
        split["cosine"] = float(
            means[target]
            @ problem.exact
            / (np.linalg.norm(means[target]) * np.linalg.norm(problem.exact))
        )
        out["frameworks"][name] = split
    return out


def report(results: list[dict]) -> str:
    """The markdown table of the decompositions."""
    lines = [
        "| problem (KL, clipped) | framework | ‖bias‖/‖∇J‖ | cos | part: norm (share) |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        where = f"{r['problem']} ({r['kl_old']:.3f} nats, {r['clipped_share']:.0%})"
        for name, s in r["frameworks"].items():
            parts = "; ".join(
                f"{p['part']}: {p['norm']:.3g} ({p['share']:+.0%})" for p in s["parts"]
            )
            row = f"| {where} | {name} | {s['relative_bias']:.2f} | {s['cosine']:.2f} | {parts} |"
            lines.append(row)
    return "\n".join(lines)


def figure(results: list[dict], path: str) -> None:
    """Stacked bars of the parts' shares, one bar per framework and problem."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, stacks = [], []
    for r in results:
        for name, s in r["frameworks"].items():
            labels.append(f"{name}\n{r['problem']}")
            stacks.append({p["part"].split(":")[0]: p["share"] for p in s["parts"]})
    kinds = list(dict.fromkeys(k for s in stacks for k in s))
    fig, ax = plt.subplots(figsize=(10.5, 4.2))
    x = np.arange(len(labels))
    pos, neg = np.zeros(len(labels)), np.zeros(len(labels))
    for kind in kinds:
        v = np.array([s.get(kind, 0.0) for s in stacks])
        base = np.where(v >= 0, pos, neg)
        ax.bar(x, v, bottom=base, label=kind)
        pos, neg = pos + np.maximum(v, 0), neg + np.minimum(v, 0)
    ax.set_xticks(x, labels, fontsize=8)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_ylabel("share of the bias  ⟨part, bias⟩ / ‖bias‖²")
    ax.set_title("Framework defaults off-policy: where the bias of E[ĝ] comes from (exact ∇J)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    """Measure (or report from ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--figure", default=None)
    parser.add_argument("--report", action="store_true", help="print the table from --json")
    args = parser.parse_args()
    if args.report:
        results = json.loads(Path(args.json).read_text())["results"]
        if args.figure:
            figure(results, args.figure)
        print(report(results))
        return
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    results = [measure(name, args.batches, args.seed + k) for k, name in enumerate(("near", "far"))]
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results}, indent=1))
    if args.figure:
        figure(results, args.figure)
    print(report(results))


if __name__ == "__main__":
    main()
