"""Seconds from SIGINT/SIGTERM to the exit of ``eligibility train`` in the middle of a batch.

The env (``tests/hostile_envs.py:Sleepy-v0``) takes 20 ms a step and its episodes 10 000 steps,
so the signal always lands inside the first batch, where the run can only stop by polling.

    PYTHONPATH=src:tests python bench/classic/signal_latency.py [repeats]
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def once(sig: int) -> float:
    """Start a run, signal it 1.5 s into its first batch, return the seconds until it exits."""
    out = Path(tempfile.mkdtemp()) / "run"
    argv = ["train", "hostile_envs:Sleepy-v0", "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "eligibility.cli", *argv], stderr=subprocess.PIPE
    )
    while not (out / "config.json").exists():
        time.sleep(0.05)
    time.sleep(1.5)
    t0 = time.monotonic()
    proc.send_signal(sig)
    proc.communicate()
    waited = time.monotonic() - t0
    assert proc.returncode == 128 + sig, proc.returncode
    return waited


def main() -> None:
    """Alternate SIGINT and SIGTERM; print each latency and the median."""
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    waits = [once(sig) for sig in (signal.SIGINT, signal.SIGTERM) * repeats]
    print("signal -> exit (s):", " ".join(f"{w:.2f}" for w in waits))
    print(f"median {statistics.median(waits):.2f} s over {len(waits)}")


if __name__ == "__main__":
    main()
