"""bfloat16 against float32 for one ``finetune`` update, paired, on a small random Llama.

    OMP_NUM_THREADS=2 python bench/lm/lm_bf16.py --pairs 5
    OMP_NUM_THREADS=2 python bench/lm/lm_bf16.py --ratios
    OMP_NUM_THREADS=2 python bench/lm/lm_bf16.py --pairs 1 --micro 8
    OMP_NUM_THREADS=1 python bench/lm/lm_bf16.py --interleaved 20

Default: each mode's update (the scoring forward of N sequences with gradients, the backward
pass, one Adam step) timed in its own subprocess, modes alternating ``--pairs`` times; printed
per mode: the median seconds per update, the median of the pairwise ratios to float32, and
the peak resident memory the updates added over the built model (``ru_maxrss``). The modes:

- ``float32``: everything float32 (``--dtype float32``).
- ``autocast``: ``torch.autocast(bfloat16)`` over the float32 model: what ``--dtype bfloat16``
  runs (weights, gradients and Adam's moments stay float32).
- ``bf16-weights``: the model cast to bfloat16, its forward and backward in bf16 (no master
  copy counted): a floor on what bf16 weights beside float32 masters could cost per update,
  the alternative to autocast.
- ``float32-micro`` (with ``--micro M``): float32, scored and backpropagated M sequences at a
  time (``--micro-batch-size M``, ``lm.micro``).

``--interleaved R``: the three modes' updates alternating in one process, R rounds, each
timed in wall seconds and in the CPU seconds the process was given (``process_time``, which a
shared machine's load moves less); printed: medians and the median per-round ratio.

``--ratios``: the log-probs the sampler records and those the trainer recomputes on the same
tokens (one forward, no cache), in float32 and under autocast; printed: the statistics of
r = exp(ℓ_trainer − ℓ_sampler) over the completion tokens, what an off-policy correction
would see at θ = θ_old.

The model: a random ``LlamaForCausalLM`` of width 256, 4 layers, 8 heads, MLP 688, vocabulary
8192 (≈ 7.5 M parameters), or with ``--model DIR`` a Hugging Face directory (the real-model
kit's SmolLM2-135M-Instruct: ``--model ~/.cache/eligibility-kit/models/smollm2-135m-instruct``);
N = 32 sequences of a 16-token prompt and 16 completion tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")
SRC = str(Path(__file__).resolve().parents[2] / "src")
sys.path.insert(0, SRC)

MODES = ("float32", "autocast", "bf16-weights")
MICRO = "float32-micro"  # --micro M: float32, scored and backpropagated M sequences at a time


MODEL_DIR: str | None = None
"""``--model DIR``: a Hugging Face directory (the real-model kit's) in place of the random Llama."""


def _model():
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    if MODEL_DIR is not None:
        return AutoModelForCausalLM.from_pretrained(
            MODEL_DIR, local_files_only=True, dtype=torch.float32
        ).eval()
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=8192, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=64,
        eos_token_id=0, bos_token_id=1,
    )  # fmt: skip
    return LlamaForCausalLM(cfg).eval()


def _batch(model, n: int, seed: int = 0):
    import numpy as np

    from eligibility.lm.sample import sample

    rng = np.random.default_rng(seed)
    v = model.config.vocab_size
    prompts = [list(rng.integers(2, v, 16)) for _ in range(n // 8)]
    return sample(model, [p for p in prompts for _ in range(8)], vocab_size=v,
                  max_new_tokens=16, rng=rng, eos_id=0)  # fmt: skip


def one_mode(mode: str, updates: int, n: int, m: int | None = None) -> dict[str, float]:
    """Seconds per update and the peak memory it added, in this process."""
    import contextlib

    import torch

    from eligibility.lm import micro
    from eligibility.lm.sample import token_logps

    model = _model()
    batch = _batch(model, n)
    if mode == "bf16-weights":
        model = model.to(torch.bfloat16)
    params = [p for p in model.parameters()]
    opt = torch.optim.Adam(params, lr=1e-4, fused=True)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if mode == "autocast" else None
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for k in range(updates + 2):  # two to warm up
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast or contextlib.nullcontext():
            micro.backward(
                lambda rows: token_logps(model, rows, vocab_size=model.config.vocab_size),
                lambda ell: -(ell * batch.completion_mask).sum() / n,
                batch,
                size=m if mode == MICRO else None,
            )
        opt.step()
        if k >= 2:
            times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"s_per_update": statistics.median(times), "added_mib": (peak - base) / 1024}


def interleaved(rounds: int, n: int) -> None:
    """The three modes' updates alternating in one process, timed in wall and CPU seconds.

    Under a shared machine's load the CPU seconds a process was given (``process_time``) move
    less than its wall time; each round runs the modes once each, in alternating order, and the
    ratio to float32 is taken per round.
    """
    import contextlib

    import torch

    from eligibility.lm.sample import token_logps

    model = _model()
    batch = _batch(model, n)
    models = {"float32": model, "autocast": model, "bf16-weights": _model().to(torch.bfloat16)}
    opts = {m: torch.optim.Adam(list(models[m].parameters()), lr=1e-9, fused=True) for m in MODES}
    wall: dict[str, list[float]] = {m: [] for m in MODES}
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    for k in range(rounds + 1):  # round 0 warms up
        for mode in MODES if k % 2 else MODES[::-1]:
            ctx = torch.autocast("cpu", dtype=torch.bfloat16) if mode == "autocast" else None
            t0, c0 = time.perf_counter(), time.process_time()
            opts[mode].zero_grad(set_to_none=True)
            with ctx or contextlib.nullcontext():
                logps = token_logps(models[mode], batch, vocab_size=model.config.vocab_size)
            (-(logps * batch.completion_mask).sum() / n).backward()
            opts[mode].step()
            if k:
                wall[mode].append(time.perf_counter() - t0)
                cpu[mode].append(time.process_time() - c0)
    print(f"interleaved, {rounds} rounds, N = {n}, threads {os.environ['OMP_NUM_THREADS']}, "
          f"load {os.getloadavg()[0]:.2f} (1-min, at the end)")  # fmt: skip
    for mode in MODES:
        rw = statistics.median(x / b for x, b in zip(wall[mode], wall["float32"], strict=True))
        rc = statistics.median(x / b for x, b in zip(cpu[mode], cpu["float32"], strict=True))
        print(f"{mode:13s} wall {statistics.median(wall[mode]):.3f} s (×{rw:.2f})  "
              f"cpu {statistics.median(cpu[mode]):.3f} s (×{rc:.2f})")  # fmt: skip


def ratios() -> None:
    """Statistics of exp(ℓ_trainer − ℓ_sampler) in float32 and under autocast bf16."""
    import contextlib

    import torch

    from eligibility.lm.sample import token_logps

    model = _model()
    for mode in ("float32", "autocast"):
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if mode == "autocast" else None
        with ctx or contextlib.nullcontext(), torch.no_grad():
            batch = _batch(model, 64, seed=1)
            again = token_logps(model, batch, vocab_size=model.config.vocab_size)
        m = batch.completion_mask.bool()
        d = (again - batch.logps)[m].double()
        r = d.exp()
        print(
            f"{mode:9s} tokens {int(m.sum())}: r mean {float(r.mean()):.6f} std "
            f"{float(r.std()):.2e} min {float(r.min()):.4f} max {float(r.max()):.4f}, "
            f"|ℓ − ℓ_old| median {float(d.abs().median()):.2e} max {float(d.abs().max()):.2e}; "
            f"sequence ratio exp(Σₜ) range [{_seq(again, batch)}]"
        )


def _seq(again, batch) -> str:
    s = ((again - batch.logps) * batch.completion_mask).sum(1).double().exp()
    return f"{float(s.min()):.4f}, {float(s.max()):.4f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--updates", type=int, default=5)
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--ratios", action="store_true")
    p.add_argument("--interleaved", type=int, default=0, metavar="ROUNDS")
    p.add_argument("--micro", type=int, default=None, metavar="M",
                   help="also float32 scored and backpropagated M sequences at a time")  # fmt: skip
    p.add_argument("--model", default=None, metavar="DIR",
                   help="a Hugging Face directory in place of the random Llama")  # fmt: skip
    p.add_argument("--one", choices=(*MODES, MICRO), help=argparse.SUPPRESS)
    a = p.parse_args()
    global MODEL_DIR
    MODEL_DIR = a.model
    if a.ratios:
        ratios()
        return
    if a.interleaved:
        interleaved(a.interleaved, a.n)
        return
    if a.one:
        print(json.dumps(one_mode(a.one, a.updates, a.n, a.micro)))
        return
    modes = MODES if a.micro is None else (*MODES, MICRO)
    got: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for k in range(a.pairs):
        order = modes if k % 2 == 0 else modes[::-1]
        for mode in order:
            cmd = [sys.executable, __file__, "--one", mode, "--updates", str(a.updates),
                   "--n", str(a.n), *(["--micro", str(a.micro)] if a.micro else []),
                   *(["--model", a.model] if a.model else [])]  # fmt: skip
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            got[mode].append(json.loads(out.strip().splitlines()[-1]))
    base = [r["s_per_update"] for r in got["float32"]]
    print(f"load {os.getloadavg()[0]:.2f} (1-min, at the end); N = {a.n}, threads "
          f"{os.environ['OMP_NUM_THREADS']}, {a.pairs} pairs")  # fmt: skip
    for mode in modes:
        s = [r["s_per_update"] for r in got[mode]]
        ratio = statistics.median(x / b for x, b in zip(s, base, strict=True))
        mib = statistics.median(r["added_mib"] for r in got[mode])
        print(f"{mode:13s} {statistics.median(s):.3f} s/update  ×{ratio:.2f} of float32  "
              f"peak +{mib:.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
