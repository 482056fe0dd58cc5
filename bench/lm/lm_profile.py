"""Where one update of ``finetune`` spends its time (cProfile), on a kit-sized Llama.

    OMP_NUM_THREADS=1 python bench/lm/lm_profile.py --updates 30
    OMP_NUM_THREADS=1 python bench/lm/lm_profile.py --paired 10
    OMP_NUM_THREADS=1 python bench/lm/lm_profile.py --overhead

``--overhead``: no training loop; each phase of one update's model work timed alone at 16
prompts and at 2 (:func:`overhead`): how much of it is arithmetic and how much is the cost of
calling each operation.

``--paired N``: no profiler; each phase wrapped in a wall-clock timer, and the model's own
``transformers`` decoder (``ELIGIBILITY_DIRECT_FORWARD=0`` and ``ELIGIBILITY_SHARE_PROMPTS=0``:
every prompt of a group computed anew) against the direct forward of ``lm/llama.py`` (each
distinct prompt once), N pairs of
10-update runs in one process, alternating which goes first; printed per phase: each side's
median ms per update and the median of the pairwise ratios own/direct.

The run: the kit's ``copy`` task (``bench/lm/lm_kit.py``: its random-init Llama, 2 layers, width
64, 4 heads, its tokenizer, JSONL prompts and TRL-convention reward), G = 8, 16 prompts a
batch, T_max = 8, evaluation off, one thread, ``finetune`` from Python. Five updates warm up,
then ``--updates`` updates run under cProfile; printed: the seconds per update spent in each
phase (sampling, the scoring forward, backward, the optimiser step, the rest: the reward
call, the KL's reference pass, bookkeeping) and the functions with the most own time.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

sys.path.insert(0, str(Path(__file__).parent))
import lm_kit
from eligibility.lm import FinetuneConfig, finetune

TIMED = {
    "sample": ("eligibility.lm.trainer", "sample"),
    "scoring passes": ("eligibility.lm.trainer", "token_logps"),
    "backward + Adam": ("eligibility.lm.trainer", "_step"),
    "rewards": ("eligibility.lm.tasks", "Task.rewards"),
}
"""The phases ``--paired`` times: (module, attribute) of each function wrapped in a timer."""

PHASES = {
    "sample": "sample.py:.*\\(sample\\)",
    "score forward": "sample.py:.*\\(token_logps\\)",
    "backward": "_tensor.py:.*\\(backward\\)",
    "optimiser step": "optimizer.py:.*\\(wrapper\\)",
    "rewards (worker)": "rewards.py:.*\\(__call__\\)|usertask.py:.*\\(score.*\\)",
}


def paired(cfg, pairs: int, n: int = 10) -> None:
    """Per-phase ms per update, own forward against direct, ``pairs`` alternating pairs."""
    import importlib

    import numpy as np

    spent: dict[str, float] = {}

    def timed(name, f):
        def g(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t

        return g

    for name, (module, attr) in TIMED.items():
        owner = importlib.import_module(module)
        if "." in attr:  # a method: wrap it on its class
            owner, attr = getattr(owner, attr.split(".")[0]), attr.split(".")[1]
        setattr(owner, attr, timed(name, getattr(owner, attr)))

    def one(direct: bool) -> dict[str, float]:
        os.environ["ELIGIBILITY_DIRECT_FORWARD"] = "1" if direct else "0"
        os.environ["ELIGIBILITY_SHARE_PROMPTS"] = "1" if direct else "0"
        spent.clear()
        row: dict[str, float] = {}
        finetune(cfg(n), callback=lambda r: row.setdefault("t0", time.perf_counter()) and None)
        out = {k: v / n * 1e3 for k, v in spent.items()}
        out["update (after the first)"] = (time.perf_counter() - row["t0"]) / (n - 1) * 1e3
        return out

    one(True), one(False)  # warm-up
    rows: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for k in range(pairs):
        for direct in (True, False) if k % 2 == 0 else (False, True):
            rows[direct].append(one(direct))
    print(f"load average: {os.getloadavg()[0]:.1f} (2 cores); {pairs} pairs of {n} updates")
    print("| phase | own forward, ms per update | direct, ms per update | own/direct (median) |")
    print("|---|---|---|---|")
    for key in [*TIMED, "update (after the first)"]:
        own = [r.get(key, 0.0) for r in rows[False]]
        fast = [r.get(key, 0.0) for r in rows[True]]
        ratio = np.median([a / b for a, b in zip(own, fast, strict=True) if b > 0])
        print(f"| {key} | {np.median(own):.1f} | {np.median(fast):.1f} | {ratio:.2f} |")


def overhead(kit: Path, repeats: int = 30) -> None:
    """Each phase of one update's model work at 16 prompts and at 2 (G = 8, the same T = 8).

    The operations are the same at both sizes; only their data is 8 times smaller. What a
    phase still costs at 2 prompts is, to first order, its per-operation overhead (Python,
    dispatch, kernel set-up); what it loses is the arithmetic. Printed: per phase, the median ms
    of ``repeats`` calls at each size, the sizes alternating, and the median of the pairwise
    ratios small/big.
    """
    import json

    import numpy as np
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from eligibility.lm.sample import sample, token_logps

    policy, ref = (AutoModelForCausalLM.from_pretrained(kit / "model-0").eval() for _ in "ab")
    ref.requires_grad_(False)
    tok = AutoTokenizer.from_pretrained(kit / "model-0")
    rows = [json.loads(line) for line in open(kit / "train.jsonl")]
    v, eos = len(tok), tok.eos_token_id

    def phases(n: int) -> list[float]:
        prompts = [tok(r["prompt"])["input_ids"] for r in rows[:n] for _ in range(8)]
        t = [time.perf_counter()]
        batch = sample(policy, prompts, vocab_size=v, max_new_tokens=8, rng=rng, eos_id=eos)
        t.append(time.perf_counter())
        logps = token_logps(policy, batch, vocab_size=v)
        t.append(time.perf_counter())
        logps.sum().backward()
        t.append(time.perf_counter())
        with torch.no_grad():
            token_logps(ref, batch, vocab_size=v)
        t.append(time.perf_counter())
        return [(b - a) * 1e3 for a, b in itertools.pairwise(t)]

    rng = np.random.default_rng(0)
    print("| phase | 16 prompts × 8, ms | 2 prompts × 8, ms | share left at 2 prompts |")
    print("|---|---|---|---|")
    [phases(n) for n in (16, 2, 16, 2)]  # warm-up
    runs: dict[int, list[list[float]]] = {16: [], 2: []}
    for k in range(repeats):  # alternating which size goes first
        for n in (16, 2) if k % 2 == 0 else (2, 16):
            runs[n].append(phases(n))
    big, small = np.array(runs[16]), np.array(runs[2])
    names = ["sample", "policy scoring forward", "backward", "reference scoring forward"]
    for k, name in enumerate(names):
        share = np.median(small[:, k] / big[:, k])  # the median of the pairwise ratios
        print(
            f"| {name} | {np.median(big[:, k]):.1f} | {np.median(small[:, k]):.1f} | {share:.0%} |"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--updates", type=int, default=30)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--paired", type=int, default=0, help="N pairs, own forward against direct")
    p.add_argument("--overhead", action="store_true", help="each phase at 16 prompts and at 2")
    args = p.parse_args()
    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory()
    kit = lm_kit.build(tmp.name, [0], ["copy"]) / "copy"
    if args.overhead:
        overhead(kit)
        return

    def cfg(n: int) -> FinetuneConfig:
        return FinetuneConfig(
            f"{kit / 'reward.py'}:reward",
            prompts=str(kit / "train.jsonl"),
            model=str(kit / "model-0"),
            group_size=8,
            prompts_per_batch=16,
            max_completion_length=8,
            max_updates=n,
            eval_every=0,
            target_accuracy=None,
            progress=False,
            out=str(Path(tmp.name) / f"run-{time.monotonic_ns()}"),
        )

    if args.paired:
        paired(cfg, args.paired)
        return
    finetune(cfg(5))
    prof = cProfile.Profile()
    prof.enable()
    finetune(cfg(args.updates))
    prof.disable()
    stats = pstats.Stats(prof)
    total = sum(v[3] for k, v in stats.stats.items() if k[2] == "finetune")
    print(f"{total / args.updates * 1e3:.1f} ms per update (cProfile on)")
    for name, pattern in PHASES.items():
        import re

        t = sum(
            v[3] for k, v in stats.stats.items() if re.search(pattern, f"{k[0]}:{k[1]}({k[2]})")
        )
        print(f"  {name:15s} {t / args.updates * 1e3:7.1f} ms ({t / total:5.1%})")
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
