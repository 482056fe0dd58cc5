"""Benchmark: eligibility.torch REINFORCE losses against autograd through torch.distributions.

Time of forward + backward and peak extra memory, for

* ``reinforce_loss(z, a, A)`` against ``-(A * Categorical(logits=z).log_prob(a)).mean()`` at
  (B, V) = (4096, 4), (4096, 1000), (1024, 50 000);
* ``fused_linear_reinforce_loss(h, W, a, A, bias=b)`` against materialising the logits
  ``z = h @ W.T + b`` and the same autograd loss, at (B, H, V) = (4096, 1024, 50 000).

Time: both sides in this one process, alternating run by run (so that a noisy, shared machine
slows both alike), median of ``--repeats`` runs after warm-up, at ``--threads`` torch threads
for both. Each run starts from fresh gradients (``.grad = None``).

Peak extra memory: each side in its own subprocess, on Linux. The child warms the code path up on 8
rows of the same V, allocates the inputs, resets the kernel's peak-RSS counter (``echo 5 >
/proc/self/clear_refs``), reads VmRSS, runs one forward + backward, and reports VmHWM − VmRSS:
everything the step added on top of its inputs, gradients included. glibc's malloc is pinned to
``MALLOC_MMAP_THRESHOLD_=4096`` in the child, so that every buffer of a page or more is its own
mapping, given back on free: RSS then follows live tensors instead of heap pages kept for reuse.

    python bench/reinforce_loss.py --json runs/bench-reinforce-loss.json --markdown
    python bench/reinforce_loss.py --quick --markdown    # small sizes, a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.distributions import Categorical

from eligibility._io import atomic_write_json
from eligibility.torch import fused_linear_reinforce_loss, reinforce_loss

FULL = {
    "categorical": [(4096, 4), (4096, 1000), (1024, 50_000)],
    "fused": [(4096, 1024, 50_000)],
}
QUICK = {
    "categorical": [(256, 4), (256, 1000), (64, 5000)],
    "fused": [(256, 64, 5000)],
}
MIB = 1 << 20


# --- the two sides of each comparison ----------------------------------------------------


def make_inputs(kind: str, size: tuple[int, ...], seed: int = 0) -> dict[str, torch.Tensor]:
    """Inputs in float32, the gradient-carrying ones as leaves with requires_grad."""
    g = torch.Generator().manual_seed(seed)
    if kind == "categorical":
        b, v = size
        return {
            "z": torch.randn(b, v, generator=g).requires_grad_(True),
            "a": torch.randint(0, v, (b,), generator=g),
            "adv": torch.randn(b, generator=g),
        }
    b, h, v = size
    return {
        "h": torch.randn(b, h, generator=g).requires_grad_(True),
        "w": (torch.randn(v, h, generator=g) / h**0.5).requires_grad_(True),
        "bias": torch.zeros(v).requires_grad_(True),
        "a": torch.randint(0, v, (b,), generator=g),
        "adv": torch.randn(b, generator=g),
    }


def step(kind: str, side: str, x: dict[str, torch.Tensor]) -> None:
    """One forward + backward of one side, from fresh gradients."""
    for t in x.values():
        t.grad = None
    if kind == "categorical":
        if side == "ours":
            loss = reinforce_loss(x["z"], x["a"], x["adv"])
        else:
            loss = -(x["adv"] * Categorical(logits=x["z"]).log_prob(x["a"])).mean()
    elif side == "ours":
        loss = fused_linear_reinforce_loss(x["h"], x["w"], x["a"], x["adv"], bias=x["bias"])
    else:
        z = torch.addmm(x["bias"], x["h"], x["w"].t())
        loss = -(x["adv"] * Categorical(logits=z).log_prob(x["a"])).mean()
    loss.backward()


# --- time ---------------------------------------------------------------------------------


def time_both(kind: str, size: tuple[int, ...], repeats: int, warmup: int) -> dict[str, float]:
    """Median seconds of ours and autograd, measured alternately in this process."""
    x = make_inputs(kind, size)
    runs: dict[str, list[float]] = {"ours": [], "autograd": []}
    for i in range(warmup + repeats):
        for side in ("ours", "autograd") if i % 2 == 0 else ("autograd", "ours"):
            t0 = time.perf_counter()
            step(kind, side, x)
            dt = time.perf_counter() - t0
            if i >= warmup:
                runs[side].append(dt)
    return {side: statistics.median(ts) for side, ts in runs.items()}


# --- memory (in a child process) ------------------------------------------------------------


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def child_peak(kind: str, side: str, size: tuple[int, ...], threads: int) -> int:
    """In this process: peak RSS added by one forward + backward, in bytes."""
    torch.set_num_threads(threads)
    # Warm up on a few rows of the same V (the code path can depend on V): kernels, thread pools.
    tiny = (8, size[-1]) if kind == "categorical" else (8, 4, size[-1])
    step(kind, side, make_inputs(kind, tiny))
    x = make_inputs(kind, size)
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = _status_kib("VmRSS")
    step(kind, side, x)
    return (_status_kib("VmHWM") - before) * 1024


def measure_peak(kind: str, side: str, size: tuple[int, ...], threads: int) -> int:
    """Peak extra bytes of one side, in a fresh subprocess (see the module docstring)."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="4096")
    cmd = [sys.executable, __file__, "--child", kind, side, ",".join(map(str, size))]
    cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


# --- report ---------------------------------------------------------------------------------


def run(sizes: dict, repeats: int, warmup: int, threads: int) -> dict:
    """Every comparison: times (this process) and peaks (one subprocess per side)."""
    torch.set_num_threads(threads)
    results = []
    for kind, cases in sizes.items():
        for size in cases:
            t = time_both(kind, size, repeats, warmup)
            mem = {side: measure_peak(kind, side, size, threads) for side in ("ours", "autograd")}
            row = {
                "kind": kind,
                "size": list(size),
                "ours_ms": 1e3 * t["ours"],
                "autograd_ms": 1e3 * t["autograd"],
                "speedup": t["autograd"] / t["ours"],
                "ours_peak_mib": mem["ours"] / MIB,
                "autograd_peak_mib": mem["autograd"] / MIB,
                "memory_ratio": mem["ours"] / mem["autograd"] if mem["autograd"] else float("nan"),
            }
            results.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return {
        "machine": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "threads": threads,
        },
        "repeats": repeats,
        "warmup": warmup,
        "dtype": "float32",
        "results": results,
    }


def to_markdown(results: dict) -> str:
    """The results as a markdown table, one row per comparison."""
    names = {
        "categorical": ("reinforce_loss", "Categorical autograd", "(B, V)"),
        "fused": (
            "fused_linear_reinforce_loss",
            "h Wᵀ + b, then Categorical autograd",
            "(B, H, V)",
        ),
    }
    lines = [
        "| ours | against | size | ours ms | autograd ms | speed-up | ours peak MiB "
        "| autograd peak MiB | memory ratio |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for r in results["results"]:
        ours, ref, dims = names[r["kind"]]
        size = ", ".join(f"{n:,}".replace(",", " ") for n in r["size"])
        lines.append(
            f"| `{ours}` | {ref} | {dims} = ({size}) | {r['ours_ms']:.1f} | "
            f"{r['autograd_ms']:.1f} | {r['speedup']:.1f}× | {r['ours_peak_mib']:.1f} | "
            f"{r['autograd_peak_mib']:.1f} | {r['memory_ratio']:.2f} |"
        )
    m = results["machine"]
    lines.append("")
    lines.append(
        f"torch {m['torch']}, {results['dtype']}, {m['threads']} threads on {m['cpu_count']} CPUs; "
        f"time: median of {results['repeats']} runs after {results['warmup']} warm-up, forward + "
        "backward; memory: peak RSS added by one forward + backward, own process."
    )
    return "\n".join(lines)


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, data)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, 3 runs: a smoke test")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per side (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs per side first")
    p.add_argument("--threads", type=int, default=2, help="torch threads, for both sides")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--markdown", action="store_true", help="print a markdown table")
    p.add_argument("--only", choices=("categorical", "fused"), default=None)
    p.add_argument("--child", nargs=3, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        kind, side, size = args.child
        print(child_peak(kind, side, tuple(int(n) for n in size.split(",")), args.threads))
        return 0
    sizes = QUICK if args.quick else FULL
    if args.only:
        sizes = {args.only: sizes[args.only]}
    repeats = args.repeats or (3 if args.quick else 10)
    results = run(sizes, repeats, 1 if args.quick else args.warmup, args.threads)
    if args.json:
        _write_json(args.json, results)
    if args.markdown:
        print(to_markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
