"""Peak memory per rank of one `finetune` run: 1 rank, 2 ranks data-parallel, 2 ranks --fsdp.

    python bench/lm/lm_memory.py --json bench/results/lm_memory.json -- --max-updates 3

runs the kit's SmolLM2-135M-Instruct on its antonym task (its partial-credit ``reward``, so
that every update scores and backpropagates: under ``correct`` the first updates' groups all
tie at 0 and skip the scoring pass, which would leave the backward out of the peak), a full
fine-tune and a LoRA one (``--lora-r 16``), in each of the three layouts, one after the other,
each rank started as the user starts it (``eligibility finetune …`` or ``torchrun
--standalone --nproc-per-node 2 -m eligibility finetune …``). Each rank records its own peak
resident set (``resource.getrusage``'s ``ru_maxrss``) when it exits: the figure is the largest
over the ranks, with every rank's beside it. Memory, not time: it may be measured on a busy
machine. The arguments after ``--`` go to every run.

Each layout runs twice: with glibc's allocator as it is, which keeps much of what the run
frees (a high-water mark of the heap, not of the tensors alive), and with
``MALLOC_MMAP_THRESHOLD_=65536``, which maps every block over 64 KiB apart and unmaps it when
freed, so that the peak is the tensors' own.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lm_ranks import launch  # bench/lm: how a layout's command is started

KIT = Path.home() / ".cache" / "eligibility-kit"
LAYOUTS = {"1 rank": (1, False), "2 ranks": (2, False), "2 ranks --fsdp": (2, True)}
KINDS = {"full": [], "lora": ["--lora-r", "16"]}
ALLOCATORS = {"glibc": {}, "eager": {"MALLOC_MMAP_THRESHOLD_": "65536"}}


def kit_args(kit: Path) -> list[str]:
    """The kit's model, antonym task and reward, as ``eligibility finetune``'s arguments."""
    task = kit / "tasks" / "antonym"
    return [
        f"{kit / 'tasks' / 'rewards.py'}:reward",
        "--model",
        str(kit / "models" / "smollm2-135m-instruct"),
        "--prompts",
        str(task / "train.jsonl"),
        "--eval-prompts",
        str(task / "heldout.jsonl"),
        "--eval-every",
        "0",
        "--no-progress",
    ]


def as_rank(report: Path, argv: list[str]) -> None:
    """Run ``eligibility`` with ``argv`` in this process, then write its peak RSS (bytes)."""
    sys.argv = ["eligibility", *argv]
    try:
        runpy.run_module("eligibility", run_name="__main__", alter_sys=True)
    finally:
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        rank = os.environ.get("RANK", "0")
        (report / f"rank-{rank}").write_text(str(kib * 1024))


def run_once(layout: str, argv: list[str], tmp: Path, allocator: str = "glibc") -> list[int]:
    """Every rank's peak RSS in bytes, in rank order (``allocator``: of :data:`ALLOCATORS`)."""
    ranks, sharded = LAYOUTS[layout]
    report = Path(tempfile.mkdtemp(dir=tmp))
    args = [*argv, *(["--fsdp"] if sharded else []), "--out", str(report / "run")]
    me = [str(Path(__file__).resolve()), "--as-rank", str(report), "--", "finetune", *args]
    launch(layout, ranks, me, {**os.environ, "OMP_NUM_THREADS": "1", **ALLOCATORS[allocator]})
    return [int((report / f"rank-{r}").read_text()) for r in range(ranks)]


def commit() -> str:
    """The checkout's commit (``unknown`` outside git)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--kit", type=Path, default=KIT)
    parser.add_argument("--as-rank", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    a = parser.parse_args()
    rest = [x for x in a.rest if x != "--"] if a.rest[:1] == ["--"] else a.rest
    if a.as_rank is not None:
        as_rank(a.as_rank, rest)
        return
    argv = [*kit_args(a.kit), *rest]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for allocator in ALLOCATORS:
            for kind, extra in KINDS.items():
                for layout in LAYOUTS:
                    per_rank = run_once(layout, [*argv, *extra], Path(tmp), allocator)
                    row = {"allocator": allocator, "kind": kind, "layout": layout}
                    rows.append({**row, "peak_rss_bytes": per_rank})
                    peak = max(per_rank) / 2**20
                    print(f"{allocator} {kind:5s} {layout:15s} {peak:8.0f} MiB", flush=True)
    report = {
        "argv": ["bench/lm/lm_memory.py", *sys.argv[1:]],
        "command": ["eligibility", "finetune", *argv],
        "commit": commit(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "peak_rss": "resource.getrusage(RUSAGE_SELF).ru_maxrss of each rank, at its exit",
        "allocators": ALLOCATORS,
        "rows": rows,
    }
    if a.json:
        a.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
