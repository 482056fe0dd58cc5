"""The wreck guard on the real-model kit: runs of ``finetune``, their metrics rows kept for replay.

    OMP_NUM_THREADS=2 python bench/lm/lm_guard.py --json bench/results/lm_guard_kit_tuning.json \
        --guard off --dir /tmp/g capital:correct:1e-3:0 capital:correct:default:0 ...
    OMP_NUM_THREADS=2 python bench/lm/lm_guard.py --json bench/results/lm_guard_kit_heldout.json \
        --guard on --dir /tmp/g antonym:correct:1e-3:0 antonym:correct:default:0 ...

Each RUN is ``TASK:REWARD:LR:SEED`` (``LR`` a rate or ``default``; ``REWARD`` a function of the
kit's ``rewards.py``, ``correct`` or ``reward``; with ``reward`` the held-out metric is
``correct``): SmolLM2-135M-Instruct from the kit (``--kit``, ``make kit``) on the task's train and
held-out files, every other option at its default, an evaluation every 3 updates, ``--updates``
updates, one run at a time. ``--guard off`` adds ``--max-kl inf --target-accuracy none`` (the
whole trajectory, for choosing the rule); ``--guard on`` runs as a user does, and a run the
guard stops (exit 2) is resumed with ``--resume DIR --lr 1e-5`` for 2 more updates.

A run whose directory ``--dir/NAME`` already holds its exit status (``NAME.rc``) is not run
again, only read. Written: per run its command, exit status, the guard's line (if it spoke),
and its metrics rows (the columns the guard reads); the commit and date of the measurement.
``tests/test_lm_guard_kit.py`` replays the rows through the guard.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = (
    "update", "mean_reward", "min_reward", "max_reward", "accuracy", "frac_reward_zero_std",
    "eval_accuracy", "eval_reward", "entropy", "kl", "loss", "grad_norm", "mean_length",
)  # fmt: skip
"""The metrics.csv columns kept: those the guard reads, and the reply's length."""
RESUME_LR = "1e-5"
RESUME_UPDATES = 2


def argv(kit: Path, spec: str, guard: str, out: Path, dtype: str | None = None) -> list[str]:
    """The ``eligibility finetune`` command of one RUN spec, its run directory ``out``.

    ``dtype``: ``--dtype`` given (None: the default, which the machine decides)."""
    task, reward, lr, seed = spec.split(":")
    t = kit / "tasks"
    cmd = [
        "eligibility", "finetune", f"{t / 'rewards.py'}:{reward}",
        "--model", str(kit / "models" / "smollm2-135m-instruct"),
        "--prompts", str(t / task / "train.jsonl"),
        "--eval-prompts", str(t / task / "heldout.jsonl"),
        "--eval-every", "3", "--seed", seed, "--no-progress", "--out", str(out),
    ]  # fmt: skip
    if reward != "correct":
        cmd += ["--eval-metric", f"{t / 'rewards.py'}:correct"]
    if lr != "default":
        cmd += ["--lr", lr]
    if guard == "off":
        cmd += ["--max-kl", "inf", "--target-accuracy", "none"]
    if dtype is not None:
        cmd += ["--dtype", dtype]
    return cmd


def execute(cmd: list[str], log: Path) -> int:
    """Run ``cmd`` (``eligibility`` as this interpreter's module, this checkout's sources)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    real = [sys.executable, "-m", "eligibility.cli", *cmd[1:]]
    with log.open("a") as err:
        rc = subprocess.run(real, env=env, stdout=subprocess.DEVNULL, stderr=err).returncode
    return rc


def rows(run_dir: Path) -> list[dict]:
    """The run's metrics.csv rows, the :data:`COLUMNS` as numbers (None where empty)."""
    with (run_dir / "metrics.csv").open() as f:
        table = list(csv.DictReader(f))
    out = []
    for r in table:
        row = {}
        for c in COLUMNS:
            v = r.get(c, "")
            row[c] = None if v in ("", None) else float(v)
        row["update"] = int(row["update"])
        out.append(row)
    return out


def guard_line(log: Path) -> str | None:
    """The guard's words on stderr (its stop or its warning), or None."""
    said = [ln for ln in log.read_text().splitlines() if "looks wrecked" in ln]
    return said[0] if said else None


def measure(
    kit: Path, spec: str, guard: str, where: Path, updates: int, dtype: str | None = None
) -> dict:
    """One RUN spec: run it (unless its exit status is kept) and read what it left.

    A run given a ``dtype`` has it in its name (``…_bf16``, ``…_fp32``)."""
    tag = {None: [], "bfloat16": ["bf16"], "float32": ["fp32"]}.get(dtype, [str(dtype)])
    name = "_".join([*spec.replace("default", "def").split(":"), guard, *tag])
    out, log, rc_file = where / name, where / f"{name}.err", where / f"{name}.rc"
    cmd = [*argv(kit, spec, guard, out, dtype), "--max-updates", str(updates)]
    if not rc_file.exists():
        rc_file.write_text(str(execute(cmd, log)))
    run = {"name": name, "spec": spec, "command": cmd, "exit": int(rc_file.read_text())}
    run["guard"] = guard_line(log)
    run["rows"] = rows(out)
    if guard == "on" and run["exit"] == 2:
        resume = ["eligibility", "finetune", "--resume", str(out), "--lr", RESUME_LR]
        resume += ["--max-updates", str(run["rows"][-1]["update"] + RESUME_UPDATES)]
        resume += ["--no-progress"]
        rc2 = where / f"{name}.resume.rc"
        if not rc2.exists():
            rc2.write_text(str(execute(resume, where / f"{name}.resume.err")))
        run["resume"] = {"command": resume, "exit": int(rc2.read_text())}
        run["resume"]["rows"] = rows(out)[len(run["rows"]) :]
    return run


def commit() -> str:
    """The checkout's commit (with ``+`` when its tree differs from it)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                          capture_output=True, check=False).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "status", "--porcelain", "src"], cwd=ROOT, text=True,
                           capture_output=True, check=False).stdout.strip()  # fmt: skip
    return head + ("+" if dirty else "")


def main() -> int:
    """Run (or read) every RUN spec and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", metavar="RUN")
    p.add_argument("--kit", type=Path, default=Path.home() / ".cache" / "eligibility-kit")
    p.add_argument("--dir", type=Path, required=True, help="where the run directories go")
    p.add_argument("--guard", choices=("on", "off"), required=True)
    p.add_argument("--updates", type=int, default=15)
    p.add_argument("--json", type=Path, required=True)
    p.add_argument("--note", default="", help="how the runs were made, if not by this command")
    p.add_argument("--dtype", choices=("bfloat16", "float32"), help="every run's --dtype")
    a = p.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    measured = []
    for spec in a.runs:
        t0 = time.monotonic()
        measured.append(measure(a.kit, spec, a.guard, a.dir, a.updates, a.dtype))
        last = measured[-1]["rows"][-1]
        print(f"{spec}: exit {measured[-1]['exit']}, {last['update']} updates, "
              f"{time.monotonic() - t0:.0f} s", file=sys.stderr)  # fmt: skip
    data = {
        "argv": ["bench/lm/lm_guard.py", *sys.argv[1:]],
        "meta": {
            "commit": commit(),
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "threads": os.environ.get("OMP_NUM_THREADS"),
            "dtype": a.dtype,
            "machine": platform.machine(),
            "columns": list(COLUMNS),
            "note": a.note,
        },
        "runs": measured,
    }
    a.json.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
