"""From the command to the model's load beginning: ``finetune``'s imports and set-up, two checkouts.

    make kit
    git worktree add /tmp/before <commit>          # the checkout to compare against
    OMP_NUM_THREADS=2 python bench/lm/lm_start_load.py --before /tmp/before --after . \
        --pairs 10 --json bench/results/lm_start_load.json
    OMP_NUM_THREADS=2 python bench/lm/lm_start_load.py --after . --importtime   # where it goes

Each run is ``eligibility finetune rewards.py:correct --model KIT/models/MODEL`` on the kit's
``antonym`` files, as the user types it: a process of its own (``python -m eligibility``),
started by this script. The process ends where the model's load begins (the checkout's
``lm.edge.loaders.build_model`` is entered: the weights are not read), having done everything a
run does before it: the interpreter's start, the imports, the parse, the run directory, the
task with its tokenizer. The hook is an import finder that replaces ``build_model`` once its
module has run, so that nothing is imported earlier or in another order than the command imports
it. Per run:

- ``to_load_s``: from the moment before this script starts the process to the load's beginning
  (wall clock on both sides: the interpreter's start included, as the user waits for it);
- ``in_process_s``: from the child's first line of Python to the load's beginning;

and, alternating with them, ``floor_s``: a process that does only what the load needs before it
begins (imports torch and transformers, loads the tokenizer), measured as ``to_load_s`` is: the
floor a start is held against, so that what is ``eligibility``'s own reads as the difference;
``torch_s``: a process that imports torch and nothing else, the floor's first part; and
``modeling_s``: torch and ``transformers.modeling_utils``, what any Hugging Face model's load
imports before it reads a weight.

The checkouts alternate in order from one pair to the next (before/after, then after/before),
after one unmeasured run of each (the files cached, bytecode written). Reported: medians per
side and the median of the pairwise ratios after / before. ``--importtime``: one run of
``--after`` under ``python -X importtime``, and the top-level packages by their own import time
(a profile of where the time goes, not a figure: importtime's own cost inflates it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from eligibility._io import atomic_write_json

KIT = Path(os.environ.get("KIT", Path.home() / ".cache" / "eligibility-kit"))

# The child: an import finder that, once lm.edge.loaders has run, replaces its build_model by a
# stop that says when it was entered; then the command line as ``python -m eligibility`` runs it.
CHILD = """
import importlib.abc, importlib.machinery, os, sys, time
FIRST = time.time()
class Stop(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "eligibility.lm.edge.loaders":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            def build_model(*args, **kwargs):
                print("LOAD_AT", time.time(), FIRST, file=sys.stderr, flush=True)
                os._exit(0)
            module.build_model = build_model
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Stop())
import runpy
sys.argv = ["eligibility", *sys.argv[1:]]
runpy.run_module("eligibility", run_name="__main__", alter_sys=True)
"""

TORCH = """
import sys, time
import torch
print("LOAD_AT", time.time(), 0.0, file=sys.stderr, flush=True)
"""

MODELING = """
import sys, time
import torch
import transformers.modeling_utils
print("LOAD_AT", time.time(), 0.0, file=sys.stderr, flush=True)
"""

FLOOR = """
import sys, time
import torch
from transformers import AutoTokenizer
AutoTokenizer.from_pretrained(sys.argv[1])
print("LOAD_AT", time.time(), 0.0, file=sys.stderr, flush=True)
"""


def argv(model: str, out: Path) -> list[str]:
    """The command line of one run (the user's, up to the options every run shares)."""
    t, rewards = KIT / "tasks" / "antonym", KIT / "tasks" / "rewards.py"
    return [
        "finetune", f"{rewards}:correct",
        "--model", str(KIT / "models" / model),
        "--prompts", str(t / "train.jsonl"),
        "--eval-prompts", str(t / "heldout.jsonl"),
        "--eval-metric", f"{rewards}:correct",
        "--max-updates", "1", "--seed", "3", "--out", str(out), "--no-progress",
    ]  # fmt: skip


def run(
    src: Path | None, model: str, flags: tuple[str, ...] = (), floor: str = FLOOR
) -> dict[str, float] | str:
    """One process of the checkout at ``src`` (None: the ``floor`` script), to the load's
    beginning (its stderr if ``flags``)."""
    env = {**os.environ, "PYTHONPATH": str(src / "src")} if src else dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, *flags, "-c", CHILD, *argv(model, Path(tmp) / "run")]
        if src is None:
            cmd = [sys.executable, "-c", floor, str(KIT / "models" / model)]
        began = time.time()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if "LOAD_AT" not in p.stderr:
        raise SystemExit(f"{src}: exit {p.returncode} before the load: {p.stderr[-2000:]}")
    if flags:
        return p.stderr
    at, first = (float(x) for x in p.stderr.split("LOAD_AT")[-1].split()[:2])
    return {"to_load_s": at - began, "in_process_s": at - first}


def importtime(stderr: str, top: int = 20) -> list[tuple[str, float]]:
    """The top-level packages by their modules' own import time (seconds), largest first."""
    own: Counter[str] = Counter()
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+\d+ \| \s*(\S+)", line)
        if m:
            own[m[2].split(".")[0]] += int(m[1]) / 1e6
    return [(name, round(s, 3)) for name, s in own.most_common(top)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", type=Path, help="the checkout compared against")
    ap.add_argument("--after", type=Path, required=True, help="the checkout measured")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--importtime", action="store_true", help="where --after's time goes")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.importtime:
        for name, s in importtime(run(args.after, args.model, ("-X", "importtime"))):
            print(f"{s:7.3f} s  {name}")
        return
    sides = ("after",) if args.before is None else ("before", "after")
    for side in sides:  # warm: the files cached, bytecode written
        run(getattr(args, side), args.model)
    rows = []
    for i in range(args.pairs):
        order = sides if i % 2 == 0 else sides[::-1]
        got = {side: run(getattr(args, side), args.model) for side in order}
        rows.append({"pair": i, **got, "floor_s": run(None, args.model)["to_load_s"]})
        rows[-1]["torch_s"] = run(None, args.model, floor=TORCH)["to_load_s"]
        rows[-1]["modeling_s"] = run(None, args.model, floor=MODELING)["to_load_s"]
        print(json.dumps(rows[-1]), file=sys.stderr)
    summary = paired(rows, sides, ("to_load_s", "in_process_s"))
    summary["floor_s"] = statistics.median(r["floor_s"] for r in rows)
    summary["torch_s"] = statistics.median(r["torch_s"] for r in rows)
    summary["modeling_s"] = statistics.median(r["modeling_s"] for r in rows)
    summary["after_over_floor"] = statistics.median(
        r["after"]["to_load_s"] / r["floor_s"] for r in rows
    )
    recorded("bench/lm/lm_start_load.py", rows, summary, args.json)


def paired(rows: list[dict], sides: tuple[str, ...], keys: tuple[str, ...]) -> dict[str, float]:
    """Each side's median of each key, and the median of the pairs' ratios after / before."""
    summary: dict[str, float] = {}
    for key in keys:
        for side in sides:
            summary[f"{side}_{key}"] = statistics.median(r[side][key] for r in rows)
        if len(sides) == 2:
            summary[f"{key}_after_over_before"] = statistics.median(
                r["after"][key] / r["before"][key] for r in rows
            )
    return summary


def recorded(script: str, rows: list[dict], summary: dict, path: Path | None) -> None:
    """The record (command, date, machine, rows, summary) in ``path``; the summary on stdout."""
    result = {
        "argv": [script, *sys.argv[1:]],
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "threads": os.environ.get("OMP_NUM_THREADS"),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "rows": rows,
        "summary": summary,
    }
    if path:  # the record first, whole or not at all; then the summary on stdout
        atomic_write_json(path, result, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
