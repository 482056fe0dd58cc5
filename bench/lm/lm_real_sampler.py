"""The sampler before and after a change, on the real-model kit, paired: seconds of a wait.

    OMP_NUM_THREADS=2 python bench/lm/lm_real_sampler.py --before REV --pairs 4 --updates 8 \
        --task antonym --t-max 16

An update of a sparse reward's wait (β = 0, every group tied) costs the sampling alone and an
Adam step on zeros (``lm.objective.zero_gradient``), so its seconds are the sampler's;
``--mode full`` scores and backpropagates each update all the same (a whole update's cost).
``--lora-r R`` runs both sides with LoRA adapters. Each run
is ``finetune`` from Python (``bench/lm/lm_real_wait.py``'s run: the kit's SmolLM2-135M-Instruct,
the kit's ``correct`` reward, every option at its default but ``--t-max``, no evaluation) in a
process of its own, on the package as of ``--before`` (a detached ``git worktree`` of that
revision, on ``PYTHONPATH``) or on the working tree's, each with its ``--dtype``
(``--before-dtype``, ``--after-dtype``: with ``--before HEAD`` and a clean tree, the two
dtypes of one revision); the two alternate, ``--pairs`` times.
Printed: each side's median seconds per update (the load and update 1 left out) and the median
of the per-pair ratios before / after. The run must be a wait on both sides (it stops with a
message where an update held a right sample): a task and seed whose first updates sample no
exactly right reply.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--before", required=True, help="the revision to compare the working tree to")
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--updates", type=int, default=8)
    p.add_argument("--task", default="multiply")
    p.add_argument("--t-max", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--before-dtype", default="float32", help="--dtype of the before side")
    p.add_argument("--after-dtype", default="float32", help="--dtype of the after side")
    p.add_argument("--lora-r", type=int, default=None, help="--lora-r of both sides")
    p.add_argument(
        "--mode", choices=("skip", "full"), default="skip",
        help="skip: the wait's update (sampling, an Adam step on zeros); full: every update "
        "scored and backpropagated as if its rewards differed",
    )  # fmt: skip
    p.add_argument("--json", default=None)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "before"
        git = ["git", "-C", str(HERE.parents[1])]
        subprocess.run([*git, "worktree", "add", "-q", "--detach", str(tree), a.before], check=True)
        try:
            got = pairs(a, {"before": tree / "src", "after": HERE.parents[1] / "src"})
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=True)
    ratios = [b / f for b, f in zip(got["before"], got["after"], strict=True)]
    print(f"{a.pairs} pairs of {a.updates}-update waits ({a.mode}, LoRA r {a.lora_r}) on "
          f"{a.task}, T_max {a.t_max}, "
          f"threads {os.environ.get('OMP_NUM_THREADS')}, before = {a.before} "
          f"({a.before_dtype}), after = the working tree ({a.after_dtype})")  # fmt: skip
    for side, s in got.items():
        print(f"{side}: {statistics.median(s):.3f} s/update (runs: "
              f"{', '.join(f'{x:.3f}' for x in s)})")  # fmt: skip
    print(f"before / after, median of the pairs: {statistics.median(ratios):.3f}x "
          f"(pairs: {', '.join(f'{r:.3f}' for r in ratios)})")  # fmt: skip
    if a.json:
        record = {"argv": sys.argv, **vars(a), "s_per_update": got, "ratios": ratios}
        Path(a.json).write_text(json.dumps(record, indent=1) + "\n")


def pairs(a: argparse.Namespace, src: dict[str, Path]) -> dict[str, list[float]]:
    """Seconds per update of each side's runs, the sides alternating which goes first."""
    got: dict[str, list[float]] = {side: [] for side in src}
    for k in range(a.pairs):
        for side in ("before", "after") if k % 2 == 0 else ("after", "before"):
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src[side]), str(HERE)])}
            dtype = a.before_dtype if side == "before" else a.after_dtype
            call = f"{a.mode!r}, {a.updates}, {a.task!r}, {a.t_max!r}, {a.seed}, {dtype!r}"
            call += f", {a.lora_r!r}"
            code = f"import json, lm_real_wait as w; print(json.dumps(w.one({call})))"
            out = subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True
            )
            if out.returncode != 0:
                raise SystemExit(f"{side}: {out.stderr.strip().splitlines()[-1]}")
            got[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
    return got


if __name__ == "__main__":
    main()
