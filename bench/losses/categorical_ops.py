"""Benchmark: the two torch op choices inside ``reinforce_loss`` that its docstrings justify.

* ``index-writes``: writing one entry per row of a (1024, 50 000) bfloat16 buffer on the CPU,
  ``buf.scatter_add_(-1, a[:, None], c[:, None])`` (along the last axis) against
  ``buf.view(-1).index_add_(0, flat, c)`` (by flat index), at 2 threads. Why the loss's
  buffer steps (``eligibility/torch/_categorical_buffer.py``) read and write the taken entries
  by flat index.
* ``small-v``: ``torch.log_softmax(z, -1)`` against ``torch.logsumexp(z, -1)`` at (4096, 4),
  float32, 1 thread. Why the native path (``eligibility/torch/_categorical_native.py``) writes
  −ln π(a) with logsumexp below V = 16 from 4 096 rows on, at one thread.

Both sides back to back in one process, in alternating order round by round, on the same
inputs; the figure is the median time per side and the median over rounds of the pairwise
ratio (first side ÷ second side).

    python bench/losses/categorical_ops.py            # both, 20 rounds
    python bench/losses/categorical_ops.py --rounds 5 # a quicker look
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch


def paired(sides: dict[str, Callable[[], object]], rounds: int, reps: int) -> dict[str, float]:
    """Median seconds per call of each side, and the median ratio first ÷ second, alternating."""
    names = list(sides)

    def run(name: str) -> float:
        t0 = time.perf_counter()
        for _ in range(reps):
            sides[name]()
        return (time.perf_counter() - t0) / reps

    for name in names:  # warm-up: first-touch page faults, kernel selection
        run(name)
    times: dict[str, list[float]] = {n: [] for n in names}
    ratios = []
    for r in range(rounds):
        t = {n: run(n) for n in (names if r % 2 == 0 else names[::-1])}
        for n in names:
            times[n].append(t[n])
        ratios.append(t[names[0]] / t[names[1]])
    out = {f"{n}_ms": statistics.median(v) * 1e3 for n, v in times.items()}
    out[f"{names[0]}_over_{names[1]}"] = statistics.median(ratios)
    return out


def index_writes(rounds: int) -> dict[str, object]:
    """scatter_add_ along the last axis against index_add_ by flat index, bf16 (1024, 50 000)."""
    torch.set_num_threads(2)
    b, v = 1024, 50_000
    buf = torch.rand(b, v).to(torch.bfloat16)
    a = torch.randint(0, v, (b,))
    c = torch.randn(b).to(torch.bfloat16)
    flat = torch.arange(0, b * v, v) + a
    sides = {
        "scatter_add": lambda: buf.scatter_add_(-1, a[:, None], c[:, None]),
        "index_add": lambda: buf.view(-1).index_add_(0, flat, c),
    }
    return {"case": "index-writes", "size": [b, v], "dtype": "bfloat16", "threads": 2} | paired(
        sides, rounds, reps=3
    )


def small_v(rounds: int) -> dict[str, object]:
    """log_softmax against logsumexp at (4096, 4), float32, one thread."""
    torch.set_num_threads(1)
    z = torch.randn(4096, 4)
    sides = {
        "log_softmax": lambda: torch.log_softmax(z, -1),
        "logsumexp": lambda: torch.logsumexp(z, -1),
    }
    return {"case": "small-v", "size": [4096, 4], "dtype": "float32", "threads": 1} | paired(
        sides, rounds, reps=200
    )


def main(argv: list[str] | None = None) -> int:
    """Run both measurements and print one JSON line each."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=20, help="paired rounds per case (default 20)")
    args = p.parse_args(argv)
    print(f"# torch {torch.__version__}", flush=True)
    for case in (index_writes, small_v):
        print(json.dumps(case(args.rounds)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
