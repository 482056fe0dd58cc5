"""Benchmark: eligibility.torch's sequence losses against what a user would write instead.

Two sections, forward + backward, every side computing the same number:

``loss``: ``sequence_reinforce_loss(logps, A, mask, …)`` on given per-token log-probs (N, T), for
three configurations (the default ``sequence-sum``; GRPO's ``sequence-mean`` with k3 in the
loss; Dr. GRPO's ``constant`` with the KL as a reward-to-go), against

* ``eager``: the same formula written straightforwardly in torch ops (``eager_loss`` below);
* ``compiled``: ``torch.compile`` of that (default mode, a fresh compile per configuration).

``fused``: per-token log-probs of a linear LM head + the loss, the TRL/Liger GRPO configuration
``loss_type="dr_grpo"`` (our ``aggregation="constant"``) with β = 0.04 and k3 in the loss, the
ratio form against fixed old log-probs, at (N·T, H, V); sides:

* ``ours``: ``fused_linear_logprobs(h, W, ids)`` then ``sequence_reinforce_loss``;
* ``materialised``: ``F.linear`` → ``log_softmax`` (float32) → ``gather`` (the selective
  log-softmax) then the same loss;
* ``chunked``: that selective log-softmax over chunks of rows, each under
  ``torch.utils.checkpoint`` (the logits of one chunk live at a time), then the same loss;
* ``liger``: Liger-Kernel's ``LigerFusedLinearGRPOLoss(loss_type="dr_grpo", beta=0.04)`` (on the
  CPU its loss math runs through ``torch.compile``; the ``bench`` extra installs it).

Before timing, every side's loss value is held against ours (``value_rel_diff`` in the JSON).

Time and memory are measured as in ``bench/losses/reinforce_loss.py`` (its helpers are used): all
sides back to back in one process, alternating order round by round, the median over rounds of the
pairwise ratio side ÷ ours (above 1: ours faster); memory is the peak added by one forward +
backward (gradients included), each side in its own subprocess on the CPU, reported ours ÷ side
(below 1: ours smaller).

    python bench/losses/sequence_loss.py --only loss --json bench/results/sequence_loss.json \\
        --markdown
    python bench/losses/sequence_loss.py --only fused --sizes 4096,1024,32000 --json … --markdown
    python bench/losses/sequence_loss.py --quick --markdown               # small sizes, a smoke run
    python bench/losses/sequence_loss.py --report --json bench/results/sequence_loss.json
    python bench/losses/sequence_loss.py --device cuda --json out.json    # on a GPU machine
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from eligibility._io import atomic_write_json
from eligibility.torch import fused_linear_logprobs, sequence_reinforce_loss
from eligibility.torch.fused_logprobs import LOGPROBS_CHUNK_ENTRIES
from reinforce_loss import MIB, _size, alternate, cpu_peak

BETA = 0.04
T_COMPLETION = 256  # completion width T; N·T sizes are N = rows // T sequences
LOSS_SIZES = [(16, 256), (64, 256)]
FUSED_SIZES = [
    (4096, 1024, 32_000),
    (4096, 1024, 128_256),
    (16_384, 1024, 32_000),
    (4096, 4096, 32_000),
    (16_384, 1024, 128_256),
    (4096, 4096, 128_256),
    (16_384, 4096, 32_000),
    (16_384, 4096, 128_256),
]
QUICK_LOSS = [(8, 32)]
QUICK_FUSED = [(256, 64, 5000)]

# The loss configurations: our keyword arguments, and what the eager formula needs to know.
CONFIGS = {
    "sequence-sum": dict(aggregation="sequence-sum"),
    "grpo k3": dict(aggregation="sequence-mean", kl="k3", beta=BETA),
    "dr-grpo rtg": dict(aggregation="constant", kl="reward-to-go", beta=BETA),
}

Inputs = dict[str, torch.Tensor]


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# --- the loss on given log-probs ------------------------------------------------------------


def eager_loss(lp, adv, mask, ref, aggregation, kl=None, beta=0.0):
    """The formula of sequence_reinforce_loss for these options, as a user would write it."""
    m = mask.to(lp.dtype)
    a = adv.unsqueeze(-1)
    if kl == "reward-to-go":
        penalty = ((lp.detach() - ref) * m).flip(-1).cumsum(-1).flip(-1)
        a = a - beta * penalty
    per_token = -a * lp
    if kl == "k3":
        d = ref - lp
        per_token = per_token + beta * (torch.exp(d) - d - 1)
    per_token = per_token * m
    n, t = lp.shape
    if aggregation == "sequence-sum":
        return per_token.sum() / n
    if aggregation == "constant":
        return per_token.sum() / (n * t)
    return (per_token.sum(-1) / m.sum(-1).clamp(min=1)).mean()


def loss_inputs(n: int, t: int, dtype: torch.dtype, device: str) -> Inputs:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, t + 1, (n, 1), generator=g)
    return {
        "lp": (-3 * torch.rand(n, t, generator=g)).to(device=device, dtype=dtype).requires_grad_(),
        "adv": torch.randn(n, generator=g).to(device=device, dtype=dtype),
        "mask": (torch.arange(t) < lengths).to(device),
        "ref": (-3 * torch.rand(n, t, generator=g)).to(device=device, dtype=dtype),
    }


def loss_sides(config: str) -> dict[str, Callable[[Inputs], torch.Tensor]]:
    kw = CONFIGS[config]

    def ours(x: Inputs) -> torch.Tensor:
        extra = (
            {"max_completion_length": x["lp"].shape[1]} if kw["aggregation"] == "constant" else {}
        )
        return sequence_reinforce_loss(
            x["lp"], x["adv"], x["mask"], ref_logps=x["ref"], **kw, **extra
        )

    def eager(x: Inputs) -> torch.Tensor:
        return eager_loss(x["lp"], x["adv"], x["mask"], x["ref"], **kw)

    return {"ours": ours, "eager": eager, "compiled": torch.compile(eager)}


# --- per-token log-probs of a linear head + the loss -------------------------------------------


def fused_inputs(rows: int, h: int, v: int, dtype: torch.dtype, device: str) -> Inputs:
    g = torch.Generator().manual_seed(0)
    t = min(T_COMPLETION, rows)
    n = rows // t
    hid = torch.randn(n, t, h, generator=g).to(device=device, dtype=dtype)
    w = (torch.randn(v, h, generator=g) / h**0.5).to(device=device, dtype=dtype)
    ids = torch.randint(0, v, (n, t), generator=g).to(device)
    lengths = torch.randint(t // 4, t + 1, (n, 1), generator=g)
    x = {
        "h": hid.requires_grad_(),
        "w": w.requires_grad_(),
        "ids": ids,
        "mask": (torch.arange(t) < lengths).to(device),
        "adv": torch.randn(n, generator=g).to(device=device, dtype=torch.float32),
    }
    with torch.no_grad():  # the old policy's log-probs: the current ones (ratio 1, on-policy)
        x["old"] = fused_linear_logprobs(hid, w, ids).float()
        x["ref"] = x["old"] + 0.1 * torch.randn(n, t, generator=g).to(device)
    return x


def _loss_on(lp: torch.Tensor, x: Inputs) -> torch.Tensor:
    return sequence_reinforce_loss(
        lp.float(), x["adv"], x["mask"], aggregation="constant",
        max_completion_length=lp.shape[1], kl="k3", beta=BETA, ref_logps=x["ref"],
        old_logps=x["old"],
    )  # fmt: skip


def _selective(h: torch.Tensor, w: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    lp = F.linear(h, w).float().log_softmax(-1)
    return lp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def logprob_chunk(v: int) -> int:
    """The rows per chunk both chunked sides use: ours' default."""
    return max(1, LOGPROBS_CHUNK_ENTRIES // v)


def _chunked(x: Inputs) -> torch.Tensor:
    h, ids = x["h"].flatten(0, 1), x["ids"].flatten()
    c = logprob_chunk(x["w"].shape[0])
    parts = [
        checkpoint(_selective, h[i : i + c], x["w"], ids[i : i + c], use_reentrant=False)
        for i in range(0, h.shape[0], c)
    ]
    return _loss_on(torch.cat(parts).view(x["ids"].shape), x)


_LIGER: dict[str, object] = {}


def _liger(x: Inputs) -> torch.Tensor:
    if "loss" not in _LIGER:
        from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

        _LIGER["loss"] = LigerFusedLinearGRPOLoss(
            beta=BETA, loss_type="dr_grpo", max_completion_length=x["ids"].shape[1],
            use_ref_model=True,
        )  # fmt: skip
    out = _LIGER["loss"](  # type: ignore[operator]
        x["h"], x["w"], x["ids"], x["mask"].float(), x["adv"],
        ref_per_token_logps=x["ref"], old_per_token_logps=x["old"],
    )  # fmt: skip
    return out[0] if isinstance(out, tuple) else out


FUSED_SIDES: dict[str, Callable[[Inputs], torch.Tensor]] = {
    "ours": lambda x: _loss_on(fused_linear_logprobs(x["h"], x["w"], x["ids"]), x),
    "materialised": lambda x: _loss_on(_selective(x["h"], x["w"], x["ids"]), x),
    "chunked": _chunked,
    "liger": _liger,
}


def fused_names() -> list[str]:
    try:
        import liger_kernel  # noqa: F401
    except ImportError:
        return [n for n in FUSED_SIDES if n != "liger"]
    return list(FUSED_SIDES)


def fused_step(side: str, x: Inputs) -> torch.Tensor:
    for t in (x["h"], x["w"]):
        t.grad = None
    loss = FUSED_SIDES[side](x)
    loss.backward()
    return loss.detach()


# --- runs -------------------------------------------------------------------------------------


def run_loss(sizes, device: str, threads: tuple[int, ...], rounds: int) -> list[dict]:
    rows = []
    for t in threads:
        torch.set_num_threads(t)
        for n, width in sizes:
            for config in CONFIGS:
                torch._dynamo.reset()  # a fresh compile per configuration
                x = loss_inputs(n, width, torch.float32, device)
                sides = loss_sides(config)

                def run(side: str, x=x, sides=sides) -> float:
                    x["lp"].grad = None
                    _sync(device)
                    t0 = time.perf_counter()
                    sides[side](x).backward()
                    _sync(device)
                    return time.perf_counter() - t0

                ref = sides["eager"](x).item()
                diff = {s: abs(f(x).item() - ref) / max(abs(ref), 1e-30) for s, f in sides.items()}
                ours_s, ratios = alternate(run, list(sides), rounds)
                row = {
                    "kind": "loss", "config": config, "size": [n, width], "threads": t,
                    "rounds": rounds, "ours_ms": 1e3 * ours_s, "time_ratio": ratios,
                    "value_rel_diff": diff,
                }  # fmt: skip
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def peak_child(side: str, size: tuple[int, ...], device: str) -> int:
    """In this process: bytes added at the peak of one forward + backward of ``side``."""
    x = fused_inputs(min(size[0], 256), size[1], min(size[2], 1000), torch.float32, device)
    fused_step(side, x)  # warm-up: kernels, thread pools, Liger's compile
    x = fused_inputs(*size, torch.float32, device)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fused_step(side, x)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    return cpu_peak(lambda: fused_step(side, x))


def measure_peak(side: str, size: tuple[int, ...], device: str, threads: int) -> int:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="4096")
    cmd = [sys.executable, __file__, "--child", side, ",".join(map(str, size))]
    cmd += ["--threads", str(threads), "--device", device]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def run_fused(
    sizes, device: str, threads: int, rounds: int, memory: str, only_sides: list[str] | None
) -> list[dict]:
    torch.set_num_threads(threads)
    rows = []
    for size in sizes:
        names = [n for n in fused_names() if only_sides is None or n in only_sides or n == "ours"]
        row: dict = {"kind": "fused", "size": list(size), "threads": threads}
        if memory != "only":
            x = fused_inputs(*size, torch.float32, device)
            ref = float(fused_step("ours", x))
            row["value_rel_diff"] = {
                n: abs(float(fused_step(n, x)) - ref) / abs(ref) for n in names if n != "ours"
            }

            def run(side: str, x=x) -> float:
                _sync(device)
                t0 = time.perf_counter()
                fused_step(side, x)
                _sync(device)
                return time.perf_counter() - t0

            ours_s, ratios = alternate(run, names, rounds, warmup=0)  # the value check warmed up
            row.update(rounds=rounds, ours_ms=1e3 * ours_s, time_ratio=ratios)
            del x
        if memory != "no":
            peaks = {n: measure_peak(n, size, device, threads) for n in names}
            row["ours_peak_mib"] = peaks["ours"] / MIB
            row["peak_mib"] = {n: p / MIB for n, p in peaks.items()}
            row["memory_ratio"] = {n: peaks["ours"] / peaks[n] for n in names if n != "ours"}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


# --- report -----------------------------------------------------------------------------------

LABELS = {
    "eager": "eager",
    "compiled": "compiled",
    "materialised": "materialised",
    "chunked": "chunked",
    "liger": "Liger GRPO",
}


def _ratio_table(rows, key: str, head: str, label: str, first) -> list[str]:
    """A markdown table of the rows that have ``key``: one column per side, ``first`` first."""
    rows = [r for r in rows if key in r]
    if not rows:
        return []
    sides = list(dict.fromkeys(n for r in rows for n in r[key]))
    lines = [
        head + " | ".join(label.format(LABELS[n]) for n in sides) + " |",
        "|---|--:|" + "--:|" * len(sides),
    ]
    for r in rows:
        cells = [f"{r[key][n]:.2f}" if n in r[key] else "–" for n in sides]
        lines.append(f"| {_size(r['size'])} | {first(r):.3g} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def to_markdown(results: dict) -> str:
    m = results["machine"]
    lines = []
    loss = [r for r in results["rows"] if r["kind"] == "loss"]
    if loss:
        lines += [
            "| `sequence_reinforce_loss` (N, T) | configuration | threads | ours ms | "
            "eager ÷ ours | compiled ÷ ours |",
            "|---|---|--:|--:|--:|--:|",
        ]
        for r in loss:
            tr = r["time_ratio"]
            lines.append(
                f"| {_size(r['size'])} | {r['config']} | {r['threads']} | {r['ours_ms']:.3g} | "
                f"{tr['eager']:.2f} | {tr['compiled']:.2f} |"
            )
        lines.append("")
    fused = [r for r in results["rows"] if r["kind"] == "fused"]
    head = "| `fused_linear_logprobs` + loss (N·T, H, V), float32 | ours s | "
    lines += _ratio_table(fused, "time_ratio", head, "{} ÷ ours", lambda r: r["ours_ms"] / 1e3)
    head = "| peak memory (N·T, H, V), float32 | ours MiB | "
    lines += _ratio_table(fused, "memory_ratio", head, "ours ÷ {}", lambda r: r["ours_peak_mib"])
    lines.append(
        f"torch {m['torch']} on {m['device']} ({m.get('gpu') or str(m['cpu_count']) + ' CPUs'}); "
        "time: median over rounds of the pairwise ratio side ÷ ours (above 1: ours faster), "
        "sides alternating, forward + backward; memory: peak added by one forward + backward, "
        "gradients included, ours ÷ side (below 1: ours smaller)."
    )
    return "\n".join(lines)


def _parse_sizes(text: str | None, default):
    if not text:
        return default
    return [tuple(int(v) for v in s.split(",")) for s in text.split(";")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, 3 rounds: a smoke test")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--only", choices=("loss", "fused"), default=None)
    p.add_argument("--sizes", default=None, help="fused sizes 'rows,H,V;rows,H,V' (default: all)")
    p.add_argument("--rounds", type=int, default=None, help="rounds per configuration")
    p.add_argument("--memory", choices=("yes", "no", "only"), default="yes",
                   help="measure the fused sides' peak memory (each in a subprocess)")  # fmt: skip
    p.add_argument(
        "--sides", default=None, help="fused sides besides ours, e.g. materialised,liger"
    )
    p.add_argument("--json", type=Path, default=None, help="write the results here (merged)")
    p.add_argument("--markdown", action="store_true", help="print the markdown tables")
    p.add_argument(
        "--report",
        action="store_true",
        help="only print the tables of the --json file, run nothing",
    )
    p.add_argument("--threads", type=int, default=2, help="threads for the fused section")
    p.add_argument("--loss-threads", default="1,2", help="thread counts of the loss section")
    p.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        torch.set_num_threads(args.threads)
        side, size = args.child
        print(peak_child(side, tuple(int(n) for n in size.split(",")), args.device))
        return 0
    if args.report:
        print(to_markdown(json.loads(args.json.read_text())))
        return 0
    rows = []
    if args.only in (None, "loss"):
        sizes = QUICK_LOSS if args.quick else LOSS_SIZES
        threads = tuple(int(t) for t in args.loss_threads.split(","))
        rows += run_loss(sizes, args.device, threads, args.rounds or (3 if args.quick else 200))
    if args.only in (None, "fused"):
        sizes = _parse_sizes(args.sizes, QUICK_FUSED if args.quick else FUSED_SIZES)
        sides = args.sides.split(",") if args.sides else None
        rows += run_fused(sizes, args.device, args.threads, args.rounds or 3, args.memory, sides)
    machine = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": args.device,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    if args.device == "cuda":
        machine["gpu"] = torch.cuda.get_device_name()
    results = {"machine": machine, "rows": rows}
    if args.json:
        if args.json.exists():  # merge: a new row updates the old one of the same configuration
            key = lambda r: (r["kind"], r.get("config"), tuple(r["size"]), r["threads"])  # noqa: E731
            merged = {key(r): r for r in json.loads(args.json.read_text())["rows"]}
            for r in rows:
                was = merged.get(key(r), {})
                merged[key(r)] = {**was, **r}
                for field in ("peak_mib", "memory_ratio", "time_ratio", "value_rel_diff"):
                    if field in was and field in r:  # a run of fewer sides adds to the others
                        merged[key(r)][field] = {**was[field], **r[field]}
            results["rows"] = list(merged.values())
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.json, results)
    if args.markdown:
        print(to_markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
