"""``eligibility train ENV`` as the user runs it, beside the benchmark's in-process run.

    OMP_NUM_THREADS=1 python bench/classic/cli_wall.py --env CartPole-v1 --seeds 2000 2001 2002 \
        2003 2004 2005 2006 2007 2008 2009 --json bench/results/cli_wall.json

The benchmark tables' *process wall* (``docs/measurements/classic.md``) is ``solve.py``'s: the
trainer called from Python with no run directory. The command a user types does more: it parses
its options, writes a run directory (config.json, metrics.csv, TensorBoard events, the
checkpoint), draws learning_curve.png through matplotlib and, by default, tests the final policy
on sampled episodes. Per seed, three whole processes, their order rotating from seed to seed,
each timed from outside (wall from spawn to exit, CPU from the child's rusage):

- ``bench``: ``python bench/classic/solve.py eligibility-numpy --env ENV --seed S``;
- ``command``: ``eligibility train ENV --seed S --out DIR`` with the benchmark's test (every
  2 000 env steps and on crossing the target, 100 greedy episodes, the table's target, no
  sampled report), so that it stops at the same solving test as ``bench``;
- ``command, its defaults``: ``eligibility train ENV --seed S --out DIR``, everything else as
  the user gets it (its own test cadence and the sampled report after training);
- ``command, no painter``: ``command`` in a process that imports matplotlib before it runs, so
  the run draws its curve itself (as every run did before ``eligibility.runs.painter``): the
  painter's own effect, paired seed by seed.

Ratios are per seed, a command over bench (and ``command`` over ``command, no painter``); the
median of them is quoted.

Then the short commands, each a whole process ``--repeats`` times, in rotating order:
``eligibility --help``, ``eligibility explain categorical --probs 0.69 0.1 0.2 0.01 --action 0``
and the same with ``--autograd`` (the cross-check that imports torch); medians.
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

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
ELIGIBILITY = Path(sys.executable).with_name("eligibility")


def timed(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    """Wall and CPU seconds of one whole process (its output thrown away)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {code}: {err[-500:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime}


def commands(env_id: str, seed: int, out: Path) -> dict[str, list[str]]:
    """The three commands of one seed (run directories under ``out``)."""
    from harness import EVAL_EPISODES, EVAL_EVERY, TARGETS

    train = [str(ELIGIBILITY), "train", env_id, "--seed", str(seed), "--no-progress"]
    same_test = ["--eval-every", str(EVAL_EVERY), "--eval-episodes", str(EVAL_EPISODES)]
    same_test += ["--eval-on-cross", "--target-return", str(TARGETS[env_id])]
    same_test += ["--no-sampled-report"]
    return {
        "bench": [sys.executable, str(HERE / "solve.py"), "eligibility-numpy", "--env", env_id,
                  "--seed", str(seed)],
        "command": [*train, *same_test, "--out", str(out / "command")],
        "command, its defaults": [*train, "--out", str(out / "defaults")],
        "command, no painter": [sys.executable, "-c", NO_PAINTER, *train[1:], *same_test,
                                "--out", str(out / "no-painter")],
    }  # fmt: skip


NO_PAINTER = (
    "import sys, matplotlib\nfrom eligibility.cli import main\nraise SystemExit(main(sys.argv[1:]))"
)
"""The command with matplotlib imported first: no painter, the curve drawn in the process."""


EXPLAIN = ["explain", "categorical", "--probs", "0.69", "0.1", "0.2", "0.01", "--action", "0"]
SHORT = {
    "eligibility --help": ["--help"],
    "eligibility explain …": EXPLAIN,
    "eligibility explain … --autograd": [*EXPLAIN, "--autograd"],
}
"""The short commands: the name shown, the arguments."""


def short(repeats: int, env: dict[str, str]) -> dict[str, list[dict[str, float]]]:
    """Each short command ``repeats`` times as a whole process, the order rotating."""
    names = list(SHORT)
    out: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for k in range(repeats):
        for name in names[k % 3 :] + names[: k % 3]:
            out[name].append(timed([str(ELIGIBILITY), *SHORT[name]], env))
    return out


def run(args: argparse.Namespace) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env["OPENBLAS_NUM_THREADS"] = "1"
    rows = []
    for k, seed in enumerate(args.seeds):
        with tempfile.TemporaryDirectory() as tmp:
            cmds = commands(args.env, seed, Path(tmp))
            names = list(cmds)
            names = names[k % len(names) :] + names[: k % len(names)]
            row = {"seed": seed, "order": names}
            for name in names:
                row[name] = timed(cmds[name], env)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return {"argv": sys.argv, "env": args.env, "rows": rows, "short": short(args.repeats, env)}


def report(result: dict) -> None:
    rows = result["rows"]
    print(f"{result['env']}, {len(rows)} seeds, whole processes, medians (ratios per seed):\n")
    print("| process | wall s | CPU s | wall ÷ bench's | CPU ÷ bench's |")
    print("|---|---|---|---|---|")
    for name in ("bench", "command", "command, its defaults", "command, no painter"):
        if name not in rows[0]:
            continue
        wall = [r[name]["wall_s"] for r in rows]
        cpu = [r[name]["cpu_s"] for r in rows]
        rw = [r[name]["wall_s"] / r["bench"]["wall_s"] for r in rows]
        rc = [r[name]["cpu_s"] / r["bench"]["cpu_s"] for r in rows]
        print(f"| {name} | {np.median(wall):.2f} | {np.median(cpu):.2f} | "
              f"{np.median(rw):.2f} | {np.median(rc):.2f} |")  # fmt: skip
    if "command, no painter" in rows[0]:
        ratio = [r["command"]["wall_s"] / r["command, no painter"]["wall_s"] for r in rows]
        cpu = [r["command"]["cpu_s"] / r["command, no painter"]["cpu_s"] for r in rows]
        print(f"\ncommand ÷ command, no painter (per seed, median): wall {np.median(ratio):.2f}, "
              f"CPU {np.median(cpu):.2f}")  # fmt: skip
    runs = result.get("short", {})
    if runs:
        n = len(next(iter(runs.values())))
        print(f"\nShort commands, {n} runs each, whole processes, medians:\n")
        print("| command | wall s | CPU s |")
        print("|---|---|---|")
    for name, times in runs.items():
        wall = np.median([t["wall_s"] for t in times])
        print(f"| `{name}` | {wall:.2f} | {np.median([t['cpu_s'] for t in times]):.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--seeds", nargs="+", type=int, default=list(range(2000, 2010)))
    p.add_argument("--repeats", type=int, default=10, help="runs of each short command")
    p.add_argument("--json", default=None)
    p.add_argument("--report", default=None, help="print the table of a result file")
    args = p.parse_args()
    if args.report:
        report(json.loads(Path(args.report).read_text()))
        return
    result = run(args)
    if args.json:
        from eligibility._io import atomic_write_json

        atomic_write_json(Path(args.json), result)
    report(result)


if __name__ == "__main__":
    main()
