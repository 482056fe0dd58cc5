"""``eligibility check`` on mistakes written apart from its audit (bench/check/apart/).

Each function of bench/check/apart/*.py is one loss with one mistake (two are correct); the
command below runs the CLI on each as a user would and prints, per problem, the verdict, the
names and the audit's lines. Written on 2026-11-29 before the audit read them; the audit's
grammar was then extended where these read wrong, so they are a record of what it now reads,
not a held-out measure.

    OMP_NUM_THREADS=1 python bench/check/apart.py --json bench/results/check_apart.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent / "apart"

ON = ["--sequence", "--kl", "none", "--problem", "length"]
CASES = [
    *(
        ("completions.py", f, ON)
        for f in (
            "signed_square",
            "plus_one_norm",
            "last_three",
            "discount_from_end",
            "clip_after_whiten",
            "other_groups_baseline",
            "max_abs_norm",
            "first_token_if_positive",
            "own_probability",
            "dropout_unrestored",
        )
    ),
    *(
        ("kl.py", f, ["--sequence", "--problem", "kl"])
        for f in ("k2_penalty", "abs_penalty", "k3_token_mean")
    ),
    *(
        ("episodes.py", f, ["--family", "episodes", "--kl", "none", "--form", "model"])
        for f in ("discounted_half", "next_turns_reward", "last_token_of_each_turn_dropped")
    ),
    *(
        ("offpolicy.py", f, ["--sequence", "--off-policy", "--kl", "none", "--problem", "near"])
        for f in (
            "ratio_against_sampler",
            "sequence_ratio_squared",
            "sampler_weight_per_token_mean",
        )
    ),
]
"""(file, function, the check's options) of every case."""


def run(path: str, function: str, options: list[str]) -> dict:
    """The check's JSON report on one function, and its exit status."""
    argv = [
        sys.executable,
        "-m",
        "eligibility",
        "check",
        f"{HERE / path}:{function}",
        *options,
        "--format",
        "json",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    rows = []
    for p in report.get("problems", []):
        audit = (p.get("details") or {}).get("audit") or {}
        rows.append(
            {
                "problem": p["problem"],
                "verdict": p["verdict"],
                "diagnosis": p.get("diagnosis"),
                "audit": [f"{f['name']}: {f['where']}" for f in audit.get("findings", [])],
            }
        )
    return {"case": f"{path}:{function}", "exit": done.returncode, "problems": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path, help="write the record here")
    args = parser.parse_args()
    record = []
    for path, function, options in CASES:
        found = run(path, function, options)
        record.append(found)
        for p in found["problems"]:
            print(f"{found['case']} [{p['problem']}] {p['verdict']} ({p['diagnosis']})")
            for line in p["audit"]:
                print(f"    {line}")
        sys.stdout.flush()
    if args.json:
        args.json.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
