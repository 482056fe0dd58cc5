"""What a sparse reward's wait costs, with and without the scoring pass, paired.

    OMP_NUM_THREADS=2 python bench/lm/lm_real_wait.py --pairs 3 --updates 10

With β = 0 (a pretrained model's default) an update whose every advantage is 0 (every group
tied: no right sample yet) has a gradient of exactly 0, and ``finetune`` steps Adam on zeros
without scoring the batch (``lm.objective.zero_gradient``; the same run bit for bit:
``tests/test_lm.py``). Each run here is ``finetune`` from Python on the real-model kit's
SmolLM2-135M-Instruct, ``multiply``'s training prompts and the kit's ``correct`` reward (seed 0
samples no exactly right reply in its first 60 updates: every update is a wait), every option
at its default, no evaluation, in a process of its own; ``full`` is the same run with the skip
turned off (the trainer's ``zero_gradient`` replaced by one that always says no). The two
alternate, ``--pairs`` times; printed: each one's median seconds per update and the median of
the per-pair ratios full / skip.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

KIT = Path(os.environ.get("ELIGIBILITY_KIT", Path.home() / ".cache" / "eligibility-kit"))


def one(
    mode: str,
    updates: int,
    task: str = "multiply",
    t_max: int | None = None,
    seed: int = 0,
    dtype: str = "float32",
    lora_r: int | None = None,
) -> float:
    """Seconds per update of one run in this process (``mode``: skip or full).

    The kit's ``task`` (its training prompts), ``t_max`` completion tokens (None: the
    default), ``seed``, ``dtype`` (``--dtype``), ``lora_r`` (``--lora-r``; None: every
    weight): every update must be a wait.
    """
    import torch

    from eligibility.lm import FinetuneConfig, finetune, trainer

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    if mode == "full":
        trainer.zero_gradient = lambda rewards, **settings: False
    t = KIT / "tasks"
    config = FinetuneConfig(
        f"{t / 'rewards.py'}:correct", model=str(KIT / "models" / "smollm2-135m-instruct"),
        prompts=str(t / task / "train.jsonl"), max_updates=updates, eval_every=0,
        target_accuracy=None, progress=False, seed=seed, dtype=dtype, lora_r=lora_r,
        **({} if t_max is None else {"max_completion_length": t_max}),
    )  # fmt: skip
    h = finetune(config).history
    if any(r["frac_reward_zero_std"] != 1 for r in h):
        raise SystemExit("an update held a right sample: not a wait; use fewer --updates")
    return (h[-1]["wall_s"] - h[0]["wall_s"]) / (updates - 1)  # the load and update 1 left out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--updates", type=int, default=10)
    p.add_argument("--one", choices=("skip", "full"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(json.dumps(one(a.one, a.updates)))
        return
    got: dict[str, list[float]] = {"skip": [], "full": []}
    for k in range(a.pairs):
        for mode in ("skip", "full") if k % 2 == 0 else ("full", "skip"):
            cmd = [sys.executable, __file__, "--one", mode, "--updates", str(a.updates)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            got[mode].append(json.loads(out.strip().splitlines()[-1]))
    ratio = statistics.median(f / s for f, s in zip(got["full"], got["skip"], strict=True))
    print(
        f"{a.pairs} pairs of {a.updates}-update runs, threads {os.environ.get('OMP_NUM_THREADS')}"
    )
    for mode, s in got.items():
        runs = ", ".join(f"{x:.2f}" for x in s)
        print(f"{mode}: {statistics.median(s):.2f} s/update (runs: {runs})")
    print(f"full / skip, median of the pairs: {ratio:.2f}x")


if __name__ == "__main__":
    main()
