"""Benchmark: ``reinforce_loss`` against what a user would write instead, forward + backward.

The competitors, each as ``-(A · ln π(a)).mean()`` in its own form:

* ``cross_entropy``: ``(A * F.cross_entropy(z, a, reduction="none")).mean()``, what TRL-style
  trainers write;
* ``compiled``: that, under ``torch.compile`` (default backend, compiled once before timing);
* ``categorical``: ``-(A * Categorical(logits=z).log_prob(a)).mean()``, for reference.

Timing: the sides run back to back in alternating order, each from fresh gradients on the same
inputs (allocated once: every side pays its own first-touch page faults on its own buffers
alike); the figure is the median over rounds of (competitor time ÷ ours): above 1, ours is
faster. Every size in float32 and bfloat16, at 1 and 2 threads.

    python bench/loss_vs_cross_entropy.py --json bench/results/loss_vs_cross_entropy.json
    python bench/loss_vs_cross_entropy.py --quick
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.distributions import Categorical

from eligibility._io import atomic_write_json
from eligibility.torch import reinforce_loss

SIZES = [(64, 2), (4096, 4), (4096, 1000), (1024, 50_000)]
QUICK = [(64, 2), (256, 1000)]


def _ce(z: torch.Tensor, a: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
    return (adv * F.cross_entropy(z, a, reduction="none")).mean()


SIDES: dict[str, Callable[..., torch.Tensor]] = {
    "ours": lambda z, a, adv: reinforce_loss(z, a, adv),
    "cross_entropy": _ce,
    "categorical": lambda z, a, adv: -(adv * Categorical(logits=z).log_prob(a)).mean(),
}


def rounds_for(b: int, v: int) -> int:
    """Enough rounds for a stable median, within a few seconds per size."""
    n = b * v
    return 300 if n < 1e5 else (40 if n < 1e7 else 12)


def ratios(size: tuple[int, int], dtype: torch.dtype, compiled: Callable) -> dict[str, float]:
    """Median over rounds of (side's time ÷ ours), the sides in alternating order."""
    b, v = size
    g = torch.Generator().manual_seed(0)
    z = torch.randn(b, v, generator=g).to(dtype).requires_grad_()
    a = torch.randint(0, v, (b,), generator=g)
    adv = torch.randn(b, generator=g).to(dtype)
    sides = dict(SIDES, compiled=compiled)

    def run(f: Callable) -> float:
        z.grad = None
        t0 = time.perf_counter()
        f(z, a, adv).backward()
        return time.perf_counter() - t0

    for f in sides.values():  # warm-up (and the compile)
        run(f)
        run(f)
    names = list(sides)
    out: dict[str, list[float]] = {n: [] for n in names if n != "ours"}
    for r in range(rounds_for(b, v)):
        order = names if r % 2 == 0 else names[::-1]
        t = {n: run(sides[n]) for n in order}
        for n in out:
            out[n].append(t[n] / t["ours"])
    return {n: statistics.median(x) for n, x in out.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="two small sizes: a smoke run")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    args = p.parse_args(argv)
    compiled = torch.compile(_ce)
    rows = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for dtype in (torch.float32, torch.bfloat16):
            for size in QUICK if args.quick else SIZES:
                r = ratios(size, dtype, compiled)
                row = {"size": list(size), "dtype": str(dtype)[6:], "threads": threads, **r}
                rows.append(row)
                print(
                    f"{size!s:>14} {row['dtype']:9} {threads} thr: "
                    + ", ".join(f"{k} ÷ ours {v:.2f}" for k, v in r.items()),
                    file=sys.stderr,
                    flush=True,
                )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.json, {"torch": torch.__version__, "rows": rows})
    print(
        "| (B, V) | dtype | threads | cross_entropy ÷ ours | compiled ÷ ours | Categorical ÷ ours |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {tuple(r['size'])} | {r['dtype']} | {r['threads']} | {r['cross_entropy']:.2f} "
            f"| {r['compiled']:.2f} | {r['categorical']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
