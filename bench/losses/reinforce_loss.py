"""Benchmark: eligibility.torch's REINFORCE losses against what a user would write instead.

Forward + backward, every side written as the same REINFORCE loss ``mean(−A · ln π(a))``:

``reinforce_loss(z, a, A)`` at (B, V) = (64, 2) … (1024, 50 000), float32 and bfloat16, 1 and
2 threads (CPU), against

* ``cross_entropy``: ``(A * F.cross_entropy(z, a, reduction="none")).mean()``, what TRL-style
  trainers write;
* ``compiled``: that under ``torch.compile`` (default mode, compiled before timing);
* ``categorical``: ``-(A * Categorical(logits=z).log_prob(a)).mean()``, kept for reference.

``fused_linear_reinforce_loss(h, W, a, A, bias=b)`` at (B, H, V) = (4096, 1024, 50 000) against

* ``materialised``: ``z = F.linear(h, W, b)`` then the cross_entropy form above;
* ``chunked``: the cross_entropy form over chunks of rows, each under
  ``torch.utils.checkpoint`` (the logits of one chunk live at a time; the backward recomputes
  them), with the same chunk rows as ours;
* ``liger``: Liger-Kernel's ``liger_fused_linear_cross_entropy(…, reduction="none")`` weighted by
  A (CUDA only, where the package is installed).

Time: all sides run back to back in one process, in alternating order (forward, then reverse)
round by round, each from fresh gradients on the same inputs, allocated once, so that every side
pays the first-touch page faults of its own buffers alike; the figure is the median over rounds of
the pairwise ratio (side's time ÷ ours): above 1, ours is faster. On CUDA each run is bracketed
by ``torch.cuda.synchronize()``.

Memory: the peak added by one forward + backward on top of the inputs, gradients included. On
CUDA: ``torch.cuda.max_memory_allocated`` after a reset. On the CPU: each side in its own
subprocess, peak RSS (VmHWM after ``echo 5 > /proc/self/clear_refs``) minus the RSS before, with
glibc's ``MALLOC_MMAP_THRESHOLD_=4096`` so that every buffer is its own mapping, given back on
free. Reported as ours ÷ side: below 1, ours uses less.

    python bench/losses/reinforce_loss.py --json bench/results/reinforce_loss.json --markdown
    python bench/losses/reinforce_loss.py --quick --markdown          # small sizes, a smoke run
    python bench/losses/reinforce_loss.py --device cuda --json out.json   # on a GPU machine
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.distributions import Categorical
from torch.utils.checkpoint import checkpoint

from eligibility._io import atomic_write_json
from eligibility.torch import fused_linear_reinforce_loss, reinforce_loss
from eligibility.torch.fused import DEFAULT_CHUNK_ENTRIES

MIB = 1 << 20
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
CATEGORICAL = [(64, 2), (4096, 4), (4096, 1000), (1024, 50_000)]
FUSED = [(4096, 1024, 50_000)]
QUICK_CATEGORICAL = [(64, 2), (256, 1000)]
QUICK_FUSED = [(256, 64, 5000)]
CUDA_EXTRA_CATEGORICAL = [(8192, 128_256)]
CUDA_EXTRA_FUSED = [(8192, 4096, 128_256)]

Inputs = dict[str, torch.Tensor]


# --- the sides ------------------------------------------------------------------------------


def _ce(z: torch.Tensor, a: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
    return (adv * F.cross_entropy(z, a, reduction="none")).mean()


@functools.cache
def _compiled_ce() -> Callable[..., torch.Tensor]:
    """``torch.compile(_ce)``, made at its first use: it imports dynamo and inductor (seconds),
    which rendering the tables (``run_all.py --render-only``, and its test) never needs."""
    return torch.compile(_ce)


def _chunk_ce(h, w, b, a, adv):  # a checkpointed function: plain tensors in, a sum out
    return (adv * F.cross_entropy(F.linear(h, w, b), a, reduction="none")).sum()


def fused_chunk(v: int) -> int:
    """The chunk rows both fused sides use: ours' default, max(1, 2²³ // V)."""
    return max(1, DEFAULT_CHUNK_ENTRIES // v)


def _chunked(x: Inputs) -> torch.Tensor:
    c = fused_chunk(x["w"].shape[0])
    total = x["h"].new_zeros((), dtype=torch.float32)
    for i in range(0, x["h"].shape[0], c):
        part = checkpoint(
            _chunk_ce, x["h"][i : i + c], x["w"], x["bias"], x["a"][i : i + c],
            x["adv"][i : i + c], use_reentrant=False,
        )  # fmt: skip
        total = total + part.float()
    return total / x["h"].shape[0]


def _liger(x: Inputs) -> torch.Tensor:
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    ell = liger_fused_linear_cross_entropy(x["h"], x["w"], x["a"], bias=x["bias"], reduction="none")
    return (x["adv"] * ell).mean()


CATEGORICAL_SIDES: dict[str, Callable[[Inputs], torch.Tensor]] = {
    "ours": lambda x: reinforce_loss(x["z"], x["a"], x["adv"]),
    "cross_entropy": lambda x: _ce(x["z"], x["a"], x["adv"]),
    "compiled": lambda x: _compiled_ce()(x["z"], x["a"], x["adv"]),
    "categorical": lambda x: -(x["adv"] * Categorical(logits=x["z"]).log_prob(x["a"])).mean(),
}
FUSED_SIDES: dict[str, Callable[[Inputs], torch.Tensor]] = {
    "ours": lambda x: fused_linear_reinforce_loss(x["h"], x["w"], x["a"], x["adv"], bias=x["bias"]),
    "materialised": lambda x: _ce(F.linear(x["h"], x["w"], x["bias"]), x["a"], x["adv"]),
    "chunked": _chunked,
    "liger": _liger,
}
SIDES = {"categorical": CATEGORICAL_SIDES, "fused": FUSED_SIDES}


def sides_for(kind: str, device: str) -> list[str]:
    """The sides run on this device (Liger is a CUDA kernel, and only where it is installed)."""
    names = list(SIDES[kind])
    if kind == "fused":
        try:
            import liger_kernel  # noqa: F401
        except ImportError:
            names.remove("liger")
        else:
            if device != "cuda":
                names.remove("liger")
    return names


def make_inputs(kind: str, size: tuple[int, ...], dtype: torch.dtype, device: str) -> Inputs:
    """The inputs, the gradient-carrying ones as leaves with requires_grad."""
    g = torch.Generator().manual_seed(0)

    def leaf(t: torch.Tensor) -> torch.Tensor:
        return t.to(device=device, dtype=dtype).requires_grad_(True)

    if kind == "categorical":
        b, v = size
        return {
            "z": leaf(torch.randn(b, v, generator=g)),
            "a": torch.randint(0, v, (b,), generator=g).to(device),
            "adv": torch.randn(b, generator=g).to(device=device, dtype=dtype),
        }
    b, h, v = size
    return {
        "h": leaf(torch.randn(b, h, generator=g)),
        "w": leaf(torch.randn(v, h, generator=g) / h**0.5),
        "bias": leaf(torch.zeros(v)),
        "a": torch.randint(0, v, (b,), generator=g).to(device),
        "adv": torch.randn(b, generator=g).to(device=device, dtype=dtype),
    }


def step(kind: str, side: str, x: Inputs) -> None:
    """One forward + backward of one side, from fresh gradients."""
    for t in x.values():
        t.grad = None
    SIDES[kind][side](x).backward()


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# --- time -----------------------------------------------------------------------------------


def rounds_for(size: tuple[int, ...], device: str) -> int:
    """Enough rounds for a stable median, within seconds per size."""
    n = size[0] * size[-1] * (size[1] if len(size) == 3 else 1)
    if device == "cuda":
        return 200 if n < 1e9 else 20
    return 300 if n < 1e5 else 40 if n < 1e7 else 12 if n < 1e9 else 3


def paired(
    kind: str, size: tuple[int, ...], dtype: torch.dtype, device: str, rounds: int
) -> tuple[float, dict[str, float]]:
    """(ours' median seconds, median over rounds of side ÷ ours per side), alternating order."""
    x = make_inputs(kind, size, dtype, device)
    names = sides_for(kind, device)
    # A fresh compile per configuration: past dynamo's recompile limit (8) the compiled side
    # would silently run eager.
    torch._dynamo.reset()

    def run(side: str) -> float:
        _sync(device)
        t0 = time.perf_counter()
        step(kind, side, x)
        _sync(device)
        return time.perf_counter() - t0

    return alternate(run, names, rounds)


def alternate(
    run: Callable[[str], float], names: list[str], rounds: int, warmup: int = 2
) -> tuple[float, dict[str, float]]:
    """(ours' median seconds, median over rounds of side ÷ ours per side).

    ``run(side)`` times one forward + backward of a side; the sides run back to back in each
    round, in alternating order (forward, then reverse), after ``warmup`` calls each.
    """
    for side in names:  # warm-up, and the compile
        for _ in range(warmup):
            run(side)
    ours: list[float] = []
    ratio: dict[str, list[float]] = {n: [] for n in names if n != "ours"}
    for r in range(rounds):
        t = {n: run(n) for n in (names if r % 2 == 0 else names[::-1])}
        ours.append(t["ours"])
        for n in ratio:
            ratio[n].append(t[n] / t["ours"])
    return statistics.median(ours), {n: statistics.median(v) for n, v in ratio.items()}


# --- memory ---------------------------------------------------------------------------------


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_here(kind: str, side: str, size: tuple[int, ...], dtype: torch.dtype, device: str) -> int:
    """In this process: bytes added at the peak of one forward + backward (gradients included)."""
    tiny = (8, *size[1:-1], size[-1])
    step(kind, side, make_inputs(kind, tiny, dtype, device))  # warm-up: kernels, thread pools
    x = make_inputs(kind, size, dtype, device)
    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step(kind, side, x)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    return cpu_peak(lambda: step(kind, side, x))


def cpu_peak(fn: Callable[[], object]) -> int:
    """Bytes of resident memory added at the peak of ``fn()`` in this process (Linux)."""
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = _status_kib("VmRSS")
    fn()
    return (_status_kib("VmHWM") - before) * 1024


def measure_peak(
    kind: str, side: str, size: tuple[int, ...], dtype: str, device: str, threads: int
) -> int:
    """Peak extra bytes of one side, in a fresh subprocess (see the module docstring)."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="4096")
    cmd = [sys.executable, __file__, "--child", kind, side, ",".join(map(str, size)), dtype]
    cmd += ["--threads", str(threads), "--device", device]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


# --- the run --------------------------------------------------------------------------------


def plan(device: str, quick: bool) -> list[dict]:
    """One entry per (kind, size, dtype, threads), with whether its memory is measured."""
    cat = QUICK_CATEGORICAL if quick else CATEGORICAL
    fused = QUICK_FUSED if quick else FUSED
    if device == "cuda" and not quick:
        cat, fused = cat + CUDA_EXTRA_CATEGORICAL, fused + CUDA_EXTRA_FUSED
    threads = (1, 2) if device == "cpu" else (0,)
    out = []
    for kind, sizes in (("categorical", cat), ("fused", fused)):
        for t in threads:
            for dtype in DTYPES:
                if kind == "fused" and device == "cpu" and (t == 1 or dtype == "bfloat16"):
                    continue  # seconds per step on 2 cores: float32 at 2 threads only
                for size in sizes:
                    out.append({"kind": kind, "size": size, "dtype": dtype, "threads": t})
    return out


def run(device: str, quick: bool, only: str | None) -> dict:
    rows = []
    for p in plan(device, quick):
        if only and p["kind"] != only:
            continue
        kind, size, dtype, threads = p["kind"], p["size"], p["dtype"], p["threads"]
        if threads:
            torch.set_num_threads(threads)
        rounds = 3 if quick else rounds_for(size, device)
        ours_s, ratios = paired(kind, size, DTYPES[dtype], device, rounds)
        row = {
            "kind": kind,
            "size": list(size),
            "dtype": dtype,
            "threads": threads or None,
            "rounds": rounds,
            "ours_ms": 1e3 * ours_s,
            "time_ratio": ratios,
        }
        # Memory once per size: float32, the highest thread count (it does not depend on it);
        # below ~10⁵ entries the figures are page-granularity noise.
        if dtype == "float32" and threads in (0, 2) and size[0] * size[-1] >= 100_000:
            names = [n for n in sides_for(kind, device) if n != "compiled"]
            peaks = {
                n: (
                    peak_here(kind, n, size, DTYPES[dtype], device)
                    if device == "cuda"
                    else measure_peak(kind, n, size, dtype, device, threads)
                )
                for n in names
            }
            row["ours_peak_mib"] = peaks["ours"] / MIB
            row["memory_ratio"] = {
                n: peaks["ours"] / peaks[n] if peaks[n] else float("nan")
                for n in names
                if n != "ours"
            }
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    machine = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    if device == "cuda":
        machine["gpu"] = torch.cuda.get_device_name()
    return {"machine": machine, "rows": rows}


# --- report ---------------------------------------------------------------------------------

LABELS = {
    "cross_entropy": "cross_entropy",
    "compiled": "compiled CE",
    "categorical": "Categorical",
    "materialised": "F.linear + CE",
    "chunked": "chunked CE",
    "liger": "Liger FLCE",
}


def _size(size: list[int]) -> str:
    return "(" + ", ".join(f"{n:,}".replace(",", " ") for n in size) + ")"


def to_markdown(results: dict) -> str:
    """Two tables: time ratios (side ÷ ours, above 1 ours is faster) and memory ratios."""
    m = results["machine"]
    where = m.get("gpu") or f"{m['cpu_count']} CPUs"
    lines = []
    for kind, ours, dims in (
        ("categorical", "reinforce_loss", "(B, V)"),
        ("fused", "fused_linear_reinforce_loss", "(B, H, V)"),
    ):
        rows = [r for r in results["rows"] if r["kind"] == kind]
        if not rows:
            continue
        sides = list(dict.fromkeys(n for r in rows for n in r["time_ratio"]))
        head = f"| `{ours}` {dims} | dtype | threads | ours ms | "
        head += " | ".join(f"{LABELS[n]} ÷ ours" for n in sides) + " |"
        lines += [head, "|---|---|--:|--:|" + "--:|" * len(sides)]
        for r in rows:
            cells = [f"{r['time_ratio'][n]:.2f}" if n in r["time_ratio"] else "–" for n in sides]
            lines.append(
                f"| {_size(r['size'])} | {r['dtype']} | {r['threads'] or '–'} | "
                f"{r['ours_ms']:.3g} | " + " | ".join(cells) + " |"
            )
        lines.append("")
        mem = [r for r in rows if "memory_ratio" in r]
        if mem:
            msides = list(dict.fromkeys(n for r in mem for n in r["memory_ratio"]))
            lines += [
                f"| `{ours}` {dims}, float32 | ours peak MiB | "
                + " | ".join(f"ours ÷ {LABELS[n]}" for n in msides)
                + " |",
                "|---|--:|" + "--:|" * len(msides),
            ]
            for r in mem:
                cells = [f"{r['memory_ratio'].get(n, float('nan')):.2f}" for n in msides]
                lines.append(
                    f"| {_size(r['size'])} | {r['ours_peak_mib']:.1f} | " + " | ".join(cells) + " |"
                )
            lines.append("")
    lines.append(
        f"torch {m['torch']} on {m['device']} ({where}); time: median over rounds of the "
        "pairwise ratio side ÷ ours (above 1: ours faster), sides alternating, forward + "
        "backward; memory: peak added by one forward + backward, gradients included, ours ÷ "
        "side (below 1: ours smaller)."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, 3 rounds: a smoke test")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--only", choices=("categorical", "fused"), default=None)
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--markdown", action="store_true", help="print the markdown tables")
    p.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)
    p.add_argument("--child", nargs=4, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        kind, side, size, dtype = args.child
        torch.set_num_threads(args.threads)
        shape = tuple(int(n) for n in size.split(","))
        print(peak_here(kind, side, shape, DTYPES[dtype], args.device))
        return 0
    results = run(args.device, args.quick, args.only)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.json, results)
    if args.markdown:
        print(to_markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
