"""`make test` as CI runs it: the default suite's pytest seconds on a checkout without bytecode.

    git clone -q . /tmp/suite && make -C /tmp/suite install
    python bench/suite/make_test.py /tmp/suite --runs 6 --json bench/results/make_test.json

DIR is a clone made for this (its ``.venv`` installed by ``make install``): each run first removes
from it what a fresh clone lacks, its own bytecode (every ``__pycache__`` outside ``.venv``),
``.pytest_cache`` and ``.hypothesis``, then runs ``make test`` there (lint, then the default
suite) and reads the seconds pytest reports at its end (``… in 44.38s``). Before and after each
run a fresh interpreter times a fixed loop of 10**7 additions (``loop_before_s``,
``loop_after_s``): the speed of a shared machine can drift by half or more from one minute to
the next, and the loop says at which speed each run went. ``--warm`` keeps the bytecode (the
second run of a day, as a developer has it).

Reported: each run's ``pytest_s``, ``passed`` and the loop's two times; the median, least and
largest ``pytest_s``. Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from eligibility._io import atomic_write_json

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lm"))
from lm_dtype_speed import cpu_name

LOOP = """
import time
t = time.perf_counter()
s = 0
for i in range(10**7):
    s += i
print(time.perf_counter() - t)
"""
"""The fixed loop: CPython's own speed on this machine at this minute (seconds)."""

SUMMARY = re.compile(r"(\d+) passed.* in ([\d.]+)s")
"""pytest's last line: ``2742 passed, 20 skipped, 6 warnings in 44.38s``."""


def loop_s() -> float:
    """The fixed loop's seconds in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", LOOP], capture_output=True, text=True, check=True)
    return float(out.stdout)


def unbuilt(checkout: Path) -> None:
    """Remove what ``git clone`` would not give: the checkout's bytecode and pytest's caches."""
    for name in (".pytest_cache", ".hypothesis"):
        shutil.rmtree(checkout / name, ignore_errors=True)
    for cache in checkout.rglob("__pycache__"):
        if ".venv" not in cache.relative_to(checkout).parts:
            shutil.rmtree(cache, ignore_errors=True)


def make_test(checkout: Path) -> dict[str, float]:
    """One ``make test`` in ``checkout``: pytest's reported seconds and the tests passed."""
    done = subprocess.run(["make", "test"], cwd=checkout, capture_output=True, text=True)
    last = (done.stdout.strip().splitlines() or [""])[-1]
    found = SUMMARY.search(last)
    if done.returncode != 0 or not found:
        raise SystemExit(f"make test in {checkout}: exit {done.returncode}: {done.stdout[-2000:]}")
    return {"pytest_s": float(found[2]), "passed": int(found[1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkout", type=Path, help="a clone made for this, its .venv installed")
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--warm", action="store_true", help="keep the bytecode between runs")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not (args.checkout / ".venv" / ".installed").exists():
        raise SystemExit(f"{args.checkout}: no .venv installed (make -C {args.checkout} install)")
    commit = subprocess.run(
        ["git", "-C", str(args.checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    rows = []
    for i in range(args.runs):
        if not args.warm:
            unbuilt(args.checkout)
        before = loop_s()
        got = make_test(args.checkout)
        rows.append({"run": i, **got, "loop_before_s": before, "loop_after_s": loop_s()})
        print(rows[-1], file=sys.stderr)
    times = [r["pytest_s"] for r in rows]
    summary = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}
    result = {
        "argv": ["bench/suite/make_test.py", *sys.argv[1:]],
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "commit": commit,
        "machine": platform.machine(),
        "cpu": cpu_name(),
        "cpus": os.cpu_count(),
        "rows": rows,
        "summary": summary,
    }
    print(summary)
    if args.json:
        atomic_write_json(args.json, result)


if __name__ == "__main__":
    main()
