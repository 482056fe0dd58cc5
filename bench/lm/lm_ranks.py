"""Seconds per update of one `finetune` run on 2 ranks x 1 thread, 1 x 2 and 1 x 1, alternating.

    OMP_NUM_THREADS=1 python bench/lm/lm_ranks.py --rounds 5 --json bench/results/lm_ranks.json \
        -- reverse --max-updates 12 --eval-every 0 --seed 7

Each round runs the three layouts one after the other, in a rotated order, as the user runs them
(`eligibility finetune …` or `torchrun --standalone --nproc-per-node 2 -m eligibility finetune
…`, each with its own run directory); a layout's figure is its metrics.csv's wall time from the
first update to the last over the updates between (the start-up apart), and the report gives the
median over rounds of each layout's ratio to 1 x 1 in the same round. Where the time goes: each
layout's mean seconds per update in each phase of metrics.csv's ``time/*`` columns (sampling,
rewards, scoring, the all-reduce, the step, evaluation, writing rows and checkpoints: lm.phases)
over the same updates, the median over rounds. Time it on an idle machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent
LAYOUTS = {
    "1x1": (1, 1),
    "1x2": (1, 2),
    "2x1": (2, 1),
}


def per_update(run: Path) -> tuple[float, dict[str, float]]:
    """Wall seconds per update after the first (metrics.csv's wall_s), and each phase's."""
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    n = len(rows) - 1
    phases = {c: sum(float(r[c]) for r in rows[1:]) / n for c in rows[0] if c.startswith("time/")}
    return (float(rows[-1]["wall_s"]) - float(rows[0]["wall_s"])) / n, phases


def launch(layout: str, ranks: int, command: list[str], env: dict[str, str]) -> None:
    """Run ``command`` (what follows ``python``) as the user starts it: in one process, or on
    ``ranks`` ranks under ``torchrun --standalone``; a failure ends the bench with its stderr."""
    if ranks == 1:
        cmd = [sys.executable, *command]
    else:
        cmd = [str(BIN / "torchrun"), "--standalone", f"--nproc-per-node={ranks}", *command]
    done = subprocess.run(cmd, env={**env, "GLOO_SOCKET_IFNAME": "lo"}, capture_output=True,
                          text=True)  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"{layout} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def run_once(layout: str, args: list[str], out: Path) -> tuple[float, dict[str, float]]:
    ranks, threads = LAYOUTS[layout]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    launch(layout, ranks, ["-m", "eligibility", "finetune", *args, "--no-progress", "--out",
                           str(out)], env)  # fmt: skip
    return per_update(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("finetune", nargs=argparse.REMAINDER)
    a = parser.parse_args()
    args = [x for x in a.finetune if x != "--"]
    names = list(LAYOUTS)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    phases: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                s, p = run_once(name, args, Path(tmp) / f"{name}-{r}")
                seconds[name].append(s)
                phases[name].append(p)
    report = {
        "command": ["eligibility", "finetune", *args],
        "seconds_per_update": seconds,
        "median_ratio_to_1x1": {
            n: statistics.median(b / s for s, b in zip(seconds["1x1"], seconds[n], strict=True))
            for n in names
        },
        "median_phase_seconds_per_update": {
            n: {c: statistics.median(p[c] for p in phases[n]) for c in phases[n][0]} for n in names
        },
    }
    print(json.dumps(report, indent=2))
    if a.json:
        a.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
