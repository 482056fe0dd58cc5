"""bench/lm/gpu_all.sh, the one script a lent GPU runs, checked on the CPU before its minutes are
spent: every step of its dry run (tiny shapes, the same scripts) exits 0.

Truth: the scripts' own exit statuses and output (the decode step's JSON line, the benchmark's
result files); a step whose script no longer matches the package (a renamed function) fails.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_gpu_scripts_dry_run_exits_0_at_every_step(tmp_path):
    done = subprocess.run(
        ["bash", "bench/lm/gpu_all.sh", "--dry-run", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    ended = [line for line in done.stdout.splitlines() if line.startswith("== ")]
    assert done.returncode == 0 and ended[-1] == "== done: every step exited 0", done.stdout[-4000:]
    for shape in ("smollm2", "qwen"):
        assert json.loads((tmp_path / f"lm_gpu_{shape}.json").read_text())
    decoded = [
        json.loads(line)
        for line in (tmp_path / "decode_step.log").read_text().splitlines()
        if line.startswith("{")
    ]
    assert [d["shape"] for d in decoded] == ["smollm2-135m"]
    assert all(d["ms_per_step"] > 0 and d["ms_per_replay"] > 0 for d in decoded)
    assert all(d["ms_per_step_compiled"] > 0 for d in decoded)  # the compiled step ran
    assert all(d["compiled_vs_eager"]["tokens_equal"] == 1.0 for d in decoded)
