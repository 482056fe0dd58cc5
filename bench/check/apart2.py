"""``eligibility check`` on held-out mistakes written apart from it (bench/check/apart2/).

Each function of bench/check/apart2/*.py is one loss with one mistake (four are correct in the
mean), written, and its verdict and place derived (``apart2/expected.py``), before the check
ran on any of them. This runs the CLI on each as a user would, with the options its entry
names, and records per problem the derived verdict beside the one read, the diagnosis, the
scale, the exit status and the audit's findings in its own words; whether the words are true
is judged by a reader against the derived place (docs/measurements/check.md).

    OMP_NUM_THREADS=1 python bench/check/apart2.py --json bench/results/check_apart2.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent / "apart2"


def cases() -> dict[str, dict]:
    """The derived entries of ``apart2/expected.py``, by case name."""
    spec = importlib.util.spec_from_file_location("apart2_expected", HERE / "expected.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CASES


def run(case: dict) -> dict:
    """The check's JSON report on one case, read beside what was derived for it."""
    argv = [
        sys.executable,
        "-m",
        "eligibility",
        "check",
        str(HERE / case["loss"]),
        *case["options"],
        "--format",
        "json",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    rows = []
    for p in report.get("problems", []):
        audit = (p.get("details") or {}).get("audit") or {}
        findings = audit.get("findings", [])
        rows.append(
            {
                "problem": p["problem"],
                "derived": case["verdict"].get(p["problem"]),
                "verdict": p["verdict"],
                "diagnosis": p.get("diagnosis"),
                "scale": p.get("scale"),
                "max_abs_z": p.get("max_abs_z"),
                "threshold": p.get("threshold"),
                "samples": p.get("samples"),
                "names": [f["name"] for f in findings],
                "audit": [f"{f['name']}: {f['where']}" for f in findings],
                "leak": any(f.get("leak") for f in findings),
                "relation": audit.get("relation"),
                "covers": audit.get("covers"),
            }
        )
    return {
        "case": case["loss"],
        "options": list(case["options"]),
        "exit": done.returncode,
        "stderr": done.stderr.strip().splitlines()[-1:] if done.returncode == 2 else [],
        "derived_place": case["place"],
        "derived_names": case["names"],
        "false_names": sorted(
            {n for r in rows for n in r["names"] + (r["diagnosis"] or "").split(", ")}
            & set(case.get("false", []))
        ),
        "problems": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the record here")
    parser.add_argument("--case", nargs="*", help="only these cases (default: every one)")
    args = parser.parse_args()
    record = []
    for name, case in cases().items():
        if args.case and name not in args.case:
            continue
        found = {"name": name, **run(case)}
        record.append(found)
        print(f"{name} (exit {found['exit']}) {' '.join(found['stderr'])}")
        for p in found["problems"]:
            print(
                f"  [{p['problem']}] derived {p['derived']}; read {p['verdict']} ({p['diagnosis']})"
            )
            for line in p["audit"]:
                print(f"    {line}")
        sys.stdout.flush()
    if args.json:
        out = {"argv": ["python", *sys.argv], "cases": record}
        args.json.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
