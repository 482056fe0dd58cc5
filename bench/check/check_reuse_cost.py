"""What naming data reuse costs the episodic check: its variants against the calls they serve.

    python bench/check/check_reuse_cost.py [--pairs 5]

Per problem, at an N chosen by the check's own rule (``choose_samples`` on a seed-0 pilot;
within 10 % of the command's), one in-process pass is: draw N batches
(the references, and the data-reuse variants of ``eligibility.check.reuse`` or not), then N
calls of ``examples/check/correct.py:loss`` (the worker of the real command left out). The two
passes alternate, the order flipped each pair; printed is the median over pairs of the ratio
with/without, so a load that drifts during the run cancels out of each pair.
"""

from __future__ import annotations

# First: common (bench/classic/) pins the BLAS/OpenMP pools to one thread before numpy or torch
# loads.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "classic"))

import common  # noqa: F401

# isort: split
import argparse
import statistics
import time

import numpy as np

from eligibility.check import problems as P
from eligibility.check.run import CheckConfig, choose_samples
from eligibility.check.user import load_function

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "check" / "correct.py"


def one_pass(name: str, fn, n: int, with_variants: bool) -> float:
    """Seconds for the draw of n batches and the n calls, with or without the variants."""
    original = P.reuse_variants
    if not with_variants:
        P.reuse_variants = lambda *args: []
    try:
        t0 = time.perf_counter()
        trial = P.trial(P.PROBLEMS[name](), fn, CheckConfig(problem=name), seed=0)
        draw = trial.draw(n)
        draw.setup()
        np.stack([draw.step(k) for k in range(n)])
        return time.perf_counter() - t0
    finally:
        P.reuse_variants = original


def main() -> None:
    """Print, per problem, N and the median paired ratio of the pass's time with/without."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    fn = load_function(f"{EXAMPLE}:loss")
    config = CheckConfig()
    for name in P.PROBLEMS:
        trial = P.trial(P.PROBLEMS[name](), fn, config, seed=0)
        n = choose_samples(
            trial.sigma,
            trial.exact,
            config.alpha,
            trial.sizing or trial.expectations,
            minimum=P.FAMILY.min_samples,
        )
        ratios = []
        for i in range(args.pairs):
            order = (True, False) if i % 2 == 0 else (False, True)
            t = {w: one_pass(name, fn, n, w) for w in order}
            ratios.append(t[True] / t[False])
        ratio = statistics.median(ratios)
        print(f"{name}: N = {n}, with/without variants: {ratio:.2f}", flush=True)


if __name__ == "__main__":
    main()
