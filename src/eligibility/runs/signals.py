"""The line a command prints when a signal stopped its run (after its checkpoint)."""

from __future__ import annotations

import signal

from eligibility._signals import Interrupted


def interrupted_line(command: str, stop: Interrupted) -> str:
    """``interrupted (SIGINT); checkpoint written; resume with: eligibility CMD --resume DIR``."""
    name = signal.Signals(stop.signum).name
    return (
        f"interrupted ({name}); checkpoint written; resume with: "
        f"eligibility {command} --resume {stop.out_dir}"
    )
