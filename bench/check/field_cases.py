"""``check`` on the field's fixed bugs: each side of each case of tests/field/cases.py.

Each side (the framework's code at the fix's parent, and at the fix) is checked through the
Python API at the family's default N and seed, problem by problem; the record holds the
verdict, the diagnosis, the fitted scale and the credit audit's findings beside the verdict,
names and place derived before any run (tests/field/cases.py). ``--fresh`` runs the held-out
cases (``FRESH``, ported after the reading was set) instead of ``CASES``.

    PYTHONPATH=src:tests python bench/check/field_cases.py --json bench/results/check_field.json
    PYTHONPATH=src:tests python bench/check/field_cases.py --markdown bench/results/check_field.json
    PYTHONPATH=src:tests python bench/check/field_cases.py --fresh \
        --json bench/results/check_field_fresh.json
    PYTHONPATH=src:tests python bench/check/field_cases.py \
        --markdown bench/results/check_field_fresh.json --after LATER.json

``--after`` adds a column: each side as read in a later record (``as before`` where the
reading is the same).
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
from field.cases import CASES, FRESH, Case, Side  # noqa: E402


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


def _family_flags(case: Case) -> str:
    flags = ["--sequence"] + (["--off-policy"] if case.family == "off-policy" else [])
    flags += [f"--{k.replace('_', '-')} {v}" for k, v in case.settings.items()]
    return f"`{' '.join(flags)}`; {', '.join(case.problems)}"


def _grouped(per_problem: dict[str, str]) -> str:
    """``text on a, b; other on c``: problems with the same text together."""
    groups: dict[str, list[str]] = {}
    for problem, text in per_problem.items():
        groups.setdefault(text, []).append(problem)
    return "; ".join(f"{', '.join(ps)}: {text}" for text, ps in groups.items())


def _derived(side: Side) -> str:
    texts = {}
    for problem, verdict in side.verdicts.items():
        names, _ = side.named(problem)
        texts[problem] = f"{verdict} ({', '.join(names)})" if names else verdict
    return f"{_grouped(texts)}. {side.place}"


def _read(rows: list[dict]) -> str:
    texts = {}
    for r in rows:
        if r["verdict"] == "error":
            texts[r["problem"]] = f"error ({(r['error'] or [''])[0].split(':')[0]})"
            continue
        names = f" ({r['diagnosis']})" if r["diagnosis"] else ""
        audit = ", ".join(a["name"] for a in r["audit"]) or "no finding"
        texts[r["problem"]] = f"{r['verdict']}{names}, c = {r['scale']:.3g}; audit: {audit}"
    return _grouped(texts)


def markdown(rows: list[dict], after: list[dict] | None = None) -> str:
    """The measurement record's table: one line per side, derived beside read.

    ``after``: the rows of a later record, each side's reading in a column of its own.
    """
    head = "| case | source | form | side | derived | read |"
    lines = [head + (" read after |" if after else ""), "|---|---|---|---|---|---|"]
    lines[1] += "---|" if after else ""
    for case in CASES + FRESH:
        for label, side in (("parent", case.buggy), ("fix", case.fixed)):
            read = [r for r in rows if r["case"] == case.key and r["side"] == side.function]
            if not read:
                continue
            source = (
                f"{case.repo} `{case.commit[:9]}` `{case.file}`: {case.change}"
                if label == "parent"
                else ""
            )
            form = _family_flags(case) if label == "parent" else ""
            key = f"`{case.key}`" if label == "parent" else ""
            line = f"| {key} | {source} | {form} | {label} | {_derived(side)} | {_read(read)} |"
            if after is not None:
                later = [r for r in after if r["side"] == side.function]
                text = _read(later) if later else "not read"
                line += f" {'as before' if text == _read(read) else text} |"
            lines.append(line)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--case", action="append", help="only these cases (by key)")
    parser.add_argument("--markdown", type=Path, help="print the table of a --json file; no run")
    parser.add_argument("--fresh", action="store_true", help="the held-out cases (FRESH)")
    parser.add_argument("--after", type=Path, help="with --markdown: a later record's column")
    args = parser.parse_args()
    if args.markdown:
        after = json.loads(args.after.read_text())["rows"] if args.after else None
        print(markdown(json.loads(args.markdown.read_text())["rows"], after), end="")
        return
    rows = []
    for case in FRESH if args.fresh else CASES:
        if args.case and case.key not in args.case:
            continue
        for side in (case.buggy, case.fixed):
            start = time.monotonic()
            for row in run_side(case, side):
                rows.append(row)
                print(json.dumps(row, ensure_ascii=False), flush=True)
            print(f"# {side.function}: {time.monotonic() - start:.0f} s", file=sys.stderr)
    if args.json:
        record = {"argv": ["bench/check/field_cases.py", *sys.argv[1:]], "rows": rows}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
