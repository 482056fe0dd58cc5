"""The comparisons' child processes (``bench/lm/lm_trl.py``'s ``child``) end with the script.

A stopped comparison must leave no run going on beside the next measurement: the script that
started a child is sent SIGTERM, and the child is gone after it (Linux's parent-death signal).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "lm"

PARENT = """
import os, sys
sys.path.insert(0, sys.argv[1])
import lm_trl
lm_trl.child([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has ended, only not yet reaped
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_run_ends_when_the_script_that_started_it_is_stopped():
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(BENCH)])
    try:
        deadline, child = time.monotonic() + 30, None
        while child is None and time.monotonic() < deadline:  # the child, once it runs its code
            kids = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
            if kids and b"time.sleep(60)" in Path(f"/proc/{kids[0]}/cmdline").read_bytes():
                child = int(kids[0])
            time.sleep(0.05)
        assert child is not None and _alive(child)
        parent.send_signal(signal.SIGTERM)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        parent.kill()
