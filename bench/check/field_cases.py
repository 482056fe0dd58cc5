"""``check`` on the field's fixed bugs: each side of each case of tests/field/cases.py.

Each side (the framework's code at the fix's parent, and at the fix) is checked through the
Python API at the family's default N and seed, problem by problem; the record holds the
verdict, the diagnosis, the fitted scale and the credit audit's findings beside the verdict,
names and place derived before any run (tests/field/cases.py).

    PYTHONPATH=src:tests python bench/check/field_cases.py --json bench/results/check_field.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from field import ports  # noqa: E402
from field.cases import CASES, Case, Side  # noqa: E402


def split_names(names) -> list[str]:
    """The catalogue's names in a diagnosis (``a, b``; ``V × c`` gives V's)."""
    out = []
    for name in names:
        for part in name.split(", "):
            out.append(part.split(" × ")[0].strip())
    return out


def run_side(case: Case, side: Side) -> list[dict]:
    """The check's reading of one side, one row per problem."""
    from eligibility import check

    report = check(
        getattr(ports, side.function),
        family=case.family,
        problem=",".join(case.problems),
        **case.settings,
    )
    rows = []
    for p in report.problems:
        audit = (p.details or {}).get("audit") or {}
        names, also = side.named(p.problem)
        rows.append(
            {
                "case": case.key,
                "side": side.function,
                "problem": p.problem,
                "derived": {
                    "verdict": side.verdicts[p.problem],
                    "names": list(names),
                    "also": list(also),
                },
                "verdict": p.verdict,
                "diagnosis": p.diagnosis,
                "names": split_names(p.finding.names if p.finding else ()),
                "times": p.finding.times if p.finding else None,
                "scale": p.scale,
                "max_abs_z": p.max_abs_z,
                "audit": [
                    {"name": f.get("name"), "where": f.get("where")}
                    for f in audit.get("findings", [])
                ],
                "relation": audit.get("relation"),
                "error": (p.error or "").strip().splitlines()[-1:] if p.error else None,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--case", action="append", help="only these cases (by key)")
    args = parser.parse_args()
    rows = []
    for case in CASES:
        if args.case and case.key not in args.case:
            continue
        for side in (case.buggy, case.fixed):
            start = time.monotonic()
            for row in run_side(case, side):
                rows.append(row)
                print(json.dumps(row, ensure_ascii=False), flush=True)
            print(f"# {side.function}: {time.monotonic() - start:.0f} s", file=sys.stderr)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
