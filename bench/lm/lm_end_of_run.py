"""From the last update's row to the exit: ``finetune``'s end of run, two checkouts alternating.

    make kit
    git worktree add /tmp/before <commit>          # the checkout to compare against
    OMP_NUM_THREADS=2 python bench/lm/lm_end_of_run.py --before /tmp/before --after . \
        --pairs 10 --json bench/results/lm_end_of_run.json

Each run is ``eligibility finetune rewards.py:correct --model KIT/models/MODEL`` on the kit's
``antonym`` files for one update, as the user types it: a process of its own (``python -m
eligibility``), started by this script with the checkout's ``src`` first on ``PYTHONPATH``. An
import finder wraps the checkout's ``runs.directory.RunDir.log`` (once its module has run, so
nothing is imported earlier or in another order than the command imports it) to say when each
row was written; the last row's moment is the update's end. Per run:

- ``row_to_exit_s``: from the last row written to the process's exit as this script's
  ``wait`` sees it (wall clock on both sides: the interpreter's own teardown included, as the
  user waits for it; stderr goes to a file, so no pipe a child holds open is waited on);
- ``disk_bytes``: the run directory's size, each file counted once however many names it
  has (a hard link is not a second copy).

The checkouts alternate in order from one pair to the next (before/after, then after/before),
after one unmeasured run of each (the files cached, bytecode written). Reported: medians per
side and the median of the pairwise ratios after / before.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lm_start_load import argv, paired, recorded  # the same command, the record's form

# The child: once runs.directory has run, RunDir.log says when each row is written; then the
# command line as ``python -m eligibility`` runs it.
CHILD = """
import importlib.abc, importlib.machinery, sys, time
class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "eligibility.runs.directory":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            log = module.RunDir.log
            def logged(self, row):
                log(self, row)
                print("ROW_AT", time.time(), file=sys.stderr, flush=True)
            module.RunDir.log = logged
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Hook())
import runpy
sys.argv = ["eligibility", *sys.argv[1:]]
runpy.run_module("eligibility", run_name="__main__", alter_sys=True)
"""


def disk_bytes(run: Path) -> int:
    """The bytes of every file under ``run``, each inode once."""
    seen: dict[tuple[int, int], int] = {}
    for p in run.rglob("*"):
        if p.is_file() and not p.is_symlink():
            s = p.stat()
            seen[(s.st_dev, s.st_ino)] = s.st_size
    return sum(seen.values())


def run(src: Path, model: str) -> dict[str, float]:
    """One process of the checkout at ``src``: its last row to its exit, and its run's bytes."""
    env = {**os.environ, "PYTHONPATH": str(src / "src")}
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "run", Path(tmp) / "stderr"
        with open(err, "w") as f:
            cmd = [sys.executable, "-c", CHILD, *argv(model, out)]
            p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=f)
            p.wait()
            ended = time.time()
        text = err.read_text()
        if p.returncode != 0 or "ROW_AT" not in text:
            raise SystemExit(f"{src}: exit {p.returncode}: {text[-2000:]}")
        row = float(text.split("ROW_AT")[-1].split()[0])
        return {"row_to_exit_s": ended - row, "disk_bytes": disk_bytes(out)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", type=Path, help="the checkout compared against")
    ap.add_argument("--after", type=Path, required=True, help="the checkout measured")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sides = ("after",) if args.before is None else ("before", "after")
    for side in sides:  # warm: the files cached, bytecode written
        run(getattr(args, side), args.model)
    rows = []
    for i in range(args.pairs):
        order = sides if i % 2 == 0 else sides[::-1]
        rows.append({"pair": i, **{side: run(getattr(args, side), args.model) for side in order}})
        print(json.dumps(rows[-1]), file=sys.stderr)
    summary = paired(rows, sides, ("row_to_exit_s", "disk_bytes"))
    recorded("bench/lm/lm_end_of_run.py", rows, summary, args.json)


if __name__ == "__main__":
    main()
