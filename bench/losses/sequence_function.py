"""Benchmark: the custom autograd Function of sequence_reinforce_loss against the plain formula.

Until this benchmark, ``sequence_reinforce_loss`` had two code paths for one formula: a custom
``torch.autograd.Function`` whose forward formed the closed form ∂loss/∂ℓ = w ⊙ ∂l/∂ℓ, and the
plain differentiable formula (used under ``torch.compile``, ``torch.func`` and double backward).
The rule: the second path stays only if it is faster at every size. This script times both,
each with its input checks, forward + backward: the Function from the version before its
removal (read with ``git show``), the plain formula from the working tree; in one process,
alternating which runs first every round; the median over rounds of the pairwise ratio
Function ÷ plain (below 1: the Function faster). The values are held equal before timing.

    python bench/losses/sequence_function.py --rounds 200        # from the repository root, in git
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from eligibility.torch import sequence as plain

BEFORE = "f5ba1cc"
"""The last commit with the custom Function."""

SIZES = [(16, 256), (64, 256), (256, 1024)]
CONFIGS = {
    "sequence-sum": dict(aggregation="sequence-sum"),
    "grpo k3": dict(aggregation="sequence-mean", kl="k3", beta=0.04),
    "dr-grpo rtg": dict(aggregation="constant", kl="reward-to-go", beta=0.04),
}


def _function_module():
    source = subprocess.run(
        ["git", "show", f"{BEFORE}:src/eligibility/torch/sequence.py"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp()) / "sequence_function.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("sequence_function", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _inputs(n: int, t: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, t + 1, (n, 1), generator=g)
    return {
        "lp": (-3 * torch.rand(n, t, generator=g)).requires_grad_(),
        "adv": torch.randn(n, generator=g),
        "mask": torch.arange(t) < lengths,
        "ref": -3 * torch.rand(n, t, generator=g),
    }


def _step(module, x, kw) -> tuple[float, float]:
    t0 = time.perf_counter()
    loss = module.sequence_reinforce_loss(x["lp"], x["adv"], x["mask"], ref_logps=x["ref"], **kw)
    loss.backward()
    x["lp"].grad = None
    return time.perf_counter() - t0, float(loss)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    function = _function_module()
    print("| (N, T) | configuration | plain ms | Function ÷ plain |")
    print("|---|---|--:|--:|")
    for n, t in SIZES:
        x = _inputs(n, t)
        for name, kw in CONFIGS.items():
            kw = {**kw, "max_completion_length": t} if kw["aggregation"] == "constant" else kw
            old = {**kw, "kl": None} if kw.get("kl") == "reward-to-go" else kw  # its spelling
            (_, a), (_, b) = _step(function, x, old), _step(plain, x, kw)
            assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (name, a, b)
            ratios, times = [], []
            for r in range(args.rounds):
                if r % 2:
                    f, _ = _step(function, x, old)
                    p, _ = _step(plain, x, kw)
                else:
                    p, _ = _step(plain, x, kw)
                    f, _ = _step(function, x, old)
                ratios.append(f / p)
                times.append(p)
            median_ms = 1e3 * statistics.median(times)
            print(f"| ({n}, {t}) | {name} | {median_ms:.3g} | {statistics.median(ratios):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
