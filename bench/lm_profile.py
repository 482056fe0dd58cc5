"""Where one update of ``finetune`` spends its time (cProfile), on a kit-sized Llama.

    OMP_NUM_THREADS=1 python bench/lm_profile.py --updates 30

The run: the kit's ``copy`` task (``bench/lm_kit.py``: its random-init Llama, 2 layers, width
64, 4 heads, its tokenizer, JSONL prompts and TRL-convention reward), G = 8, 16 prompts a
batch, T_max = 8, evaluation off, one thread, ``finetune`` from Python. Five updates warm up,
then ``--updates`` updates run under cProfile; printed: the seconds per update spent in each
phase (sampling, the scoring forward, backward, the optimiser step, the rest: the reward
call, the KL's reference pass, bookkeeping) and the functions with the most own time.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

sys.path.insert(0, str(Path(__file__).parent))
import lm_kit
from eligibility.lm import FinetuneConfig, finetune

PHASES = {
    "sample": "sample.py:.*\\(sample\\)",
    "score forward": "sample.py:.*\\(token_logps\\)",
    "backward": "_tensor.py:.*\\(backward\\)",
    "optimiser step": "optimizer.py:.*\\(wrapper\\)",
    "rewards (worker)": "rewards.py:.*\\(__call__\\)|usertask.py:.*\\(score.*\\)",
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--updates", type=int, default=30)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory()
    kit = lm_kit.build(tmp.name, [0], ["copy"]) / "copy"

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
        )

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
