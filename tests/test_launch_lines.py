"""A rank that cannot join its run says so in one line (issue 72, cases 13 and 14).

``WORLD_SIZE=2 RANK=1`` with an unreachable ``MASTER_ADDR``, or rank 1 started without rank 0:
the refusal was one line after 40–50 lines of c10d's C++ logs and stack frames, written on
file descriptor 2 past Python. The process group forms with that descriptor held aside
(``lm.edge.ranks._c10d_aside``): what c10d wrote is passed on when the group forms, dropped
when it does not.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from eligibility.lm.edge.ranks import _c10d_aside

HERE = Path(__file__).resolve().parent


def test_what_c10d_writes_on_descriptor_2_is_passed_on_when_the_group_forms(capfd):
    with _c10d_aside():
        os.write(2, b"[W c10d] a retry\n")
    assert capfd.readouterr().err == "[W c10d] a retry\n"


def test_what_c10d_writes_on_descriptor_2_is_dropped_when_the_group_does_not_form(capfd):
    with pytest.raises(RuntimeError, match="no store"), _c10d_aside():
        os.write(2, b"[E c10d] socket.cpp: timed out\nframe #0: c10::Error\n")
        raise RuntimeError("no store")
    os.write(2, b"after\n")  # the descriptor is stderr again
    assert capfd.readouterr().err == "after\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("addr", "said"),
    [
        ("127.0.0.1", "rank 1 of 2 could not join the run's process group"),  # rank 0 not started
        ("unreachable.invalid", "MASTER_ADDR='unreachable.invalid' names no host"),  # before c10d
    ],
)
def test_a_rank_that_cannot_join_is_one_line_and_exit_2(tmp_path, addr, said):
    """Bounded: the deadline is ELIGIBILITY_RANK_TIMEOUT=2 s (c10d retries within it)."""
    env = {
        **os.environ,
        "WORLD_SIZE": "2",
        "RANK": "1",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": addr,
        "MASTER_PORT": str(_free_port()),
        "ELIGIBILITY_RANK_TIMEOUT": "2",
        "OMP_NUM_THREADS": "1",
    }
    argv = ["finetune", "reverse", "--d-model", "8", "--n-head", "2", "--n-layer", "1"]
    argv += ["--max-updates", "1", "--no-progress", "--out", str(tmp_path / "run")]
    done = subprocess.run(
        [sys.executable, "-m", "eligibility", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert said in lines[0]
