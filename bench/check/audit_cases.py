"""The credit audit on the field's loss mistakes: each case checked as a user runs it.

Each case is a loss of examples/check/audit/ (or examples/check/offpolicy/losses.py), or a TRL
configuration of examples/check/audit/ checked through TRL's own code (``make peers``), with
the names derived for it before any run (``derived``); the check runs as a whole process
(``eligibility check ... --format json``), and the table records its verdict, its diagnosis and
the audit's findings, problem by problem.

    python bench/check/audit_cases.py --json bench/results/check_audit_cases.json \\
        --markdown /tmp/audit_cases.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

EP = "examples/check/audit/episodes.py"
SEQ = "examples/check/audit/completions.py"
OFF = "examples/check/offpolicy/losses.py"
EPISODES = ["--family", "episodes", "--kl", "none"]
SEQUENCE = ["--sequence", "--problem", "length,difficulty"]
ACCUMULATED = ["--sequence", "--problem", "length", "--micro-batches", "2"]
OFF_POLICY = ["--sequence", "--off-policy", "--problem", "near"]
TRL_OFF = ["--off-policy", "--problem", "near,far"]

CASES: list[tuple[str, list[str], str]] = [
    (f"{EP}:fixed", EPISODES, "unbiased; no finding"),
    (f"{EP}:role_header_scored", EPISODES, "world-tokens-trained (each answer's first token)"),
    (f"{EP}:return_zeroed_before_answer", EPISODES, "first-reply-uncredited"),
    (f"{EP}:first_reply_left_out", EPISODES, "first-reply-uncredited"),
    (f"{EP}:own_turn_reward", EPISODES, "later-rewards-withheld"),
    (f"{EP}:whitened_across_groups", EPISODES, "batch-whitened"),
    (f"{EP}:token_mean_over_batch", EPISODES, "batch-dependent-normaliser (÷ the batch's tokens)"),
    (f"{EP}:accumulated_twice", EPISODES, "scaled: c = 2"),
    (f"{SEQ}:fixed", SEQUENCE, "unbiased; no finding"),
    (f"{SEQ}:whitened_across_groups", SEQUENCE, "batch-whitened"),
    (f"{SEQ}:weighted_by_relative_probability", SEQUENCE, "per-token-weight"),
    (f"{SEQ}:undivided_accumulation", ACCUMULATED, "accumulation-scaled, c = 2"),
    (f"{SEQ}:divided_accumulation", ACCUMULATED, "unbiased; no finding"),
    (f"{OFF}:product", OFF_POLICY, "unbiased; no finding"),
    (f"{OFF}:ppo_clip", OFF_POLICY, "per-token-ratio, clipping-bias (ε 0.2)"),
    (f"{OFF}:truncated_half", OFF_POLICY, "truncation-bias (C = 0.5)"),
    (f"{OFF}:truncated_without_ratio", OFF_POLICY, "stale-old-logps, truncation-bias (C = 0.5)"),
    (f"{OFF}:cispo_relative", OFF_POLICY, "cispo-relative-cap"),
    (
        f"{EP}:role_header_scored",
        [*EPISODES, "--problem", "two-turn-long-answers"],
        "world-tokens-trained (the first token of a two-token header)",
    ),
    (
        "trl:examples/check/audit/trl_sequence_truncate.yaml",
        TRL_OFF,
        "per-token-ratio, truncation-bias (C = 0.5), clipping-bias (ε 0.2), constant-normaliser",
    ),
    (
        "trl:examples/check/audit/trl_token_mask.yaml",
        TRL_OFF,
        "per-token-ratio, per-token-sampler-weight, clipping-bias, masking-bias (C = 2), constant",
    ),
]
"""(the loss, the check's options, what was derived before running)."""


def run(spec: str, options: list[str]) -> dict:
    """One whole `eligibility check` process: its exit status, seconds and JSON report."""
    t0 = time.perf_counter()
    if spec.startswith("trl:"):  # a framework's configuration: its own code checked
        spec, options = "--framework", ["trl", "--config", spec[4:], *options]
    cmd = [sys.executable, "-m", "eligibility", "check", spec, *options, "--format", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    out = {"spec": " ".join(cmd[4:-2]), "exit": done.returncode}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        out["error"] = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return out
    out["problems"] = [
        {
            "problem": p["problem"],
            "verdict": p["verdict"],
            "diagnosis": p["diagnosis"],
            "audit": [
                f["name"] for f in ((p.get("details") or {}).get("audit") or {}).get("findings", [])
            ],
        }
        for p in report["problems"]
    ]
    return out


def markdown(rows: list[dict]) -> str:
    """The measurement record's table: case, problem, derived, verdict, the audit's names."""
    lines = [
        "| case | problem | derived | verdict (exit) | audit's findings |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        name = (
            r["spec"].split()[0].rsplit("/", 1)[-1]
            if "--framework" not in r["spec"]
            else ("trl " + r["spec"].split("--config ")[1].split()[0].rsplit("/", 1)[-1])
        )
        for p in r.get("problems", [{"problem": "—", "verdict": str(r.get("error")), "audit": []}]):
            found = ", ".join(p["audit"]) or "none"
            lines.append(
                f"| `{name}` | {p['problem']} | {r['derived']} | {p['verdict']} "
                f"({r['exit']}) | {found} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    rows = []
    for spec, options, derived in CASES:
        row = {**run(spec, options), "derived": derived}
        print(json.dumps(row), file=sys.stderr)
        rows.append(row)
    record = {"argv": sys.argv, "cases": rows}
    args.json.write_text(json.dumps(record, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(rows))


if __name__ == "__main__":
    main()
