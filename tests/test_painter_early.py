"""learning_curve.png started by the painter before the run's last writes (``RunDir.draw_now``).

``finetune`` hands the painter its job once the last row is written, so that the curve is drawn
on the other core while the last checkpoint and the exported model are written; ``finish``
then waits for it. Truth: the picture drawn in this process by :func:`plot_curves` from the same
metrics.csv, byte for byte, whether the painter drew it or failed and left it to the run.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from _run_dir import write_six_rows
from eligibility import runs
from eligibility.reinforce.logs import SCHEMA as TRAIN
from eligibility.runs.painter import Painter


def _write_run(path, painter, checkpoints: int) -> None:
    """Six rows, the job handed early, then ``checkpoints`` writes before the run finishes."""

    def early(run, history) -> None:
        run.draw_now(history)
        run.draw_now(history)  # once: a second call hands nothing more
        for _ in range(checkpoints):
            run.checkpoint({"w": np.zeros(3)}, {"counters": {}, "rngs": []})

    write_six_rows(path, TRAIN, painter, early)


@pytest.mark.curve
@pytest.mark.parametrize("painter", ["drawing", "failing"])
def test_a_curve_handed_early_is_the_one_drawn_here(tmp_path, painter):
    """The painter draws while a checkpoint is written; one that fails (exit 3) leaves the
    drawing to the run, at its finish."""
    if painter == "drawing":
        job = Painter.spawn()
    else:
        script = "import sys; sys.stdin.readline(); sys.exit(3)"
        job = Painter(subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE))
    _write_run(tmp_path / "run", job, checkpoints=1)
    assert job.proc.returncode == (0 if painter == "drawing" else 3)
    runs.plot_curves([tmp_path / "run"], tmp_path / "here.png", TRAIN)
    want = (tmp_path / "here.png").read_bytes()
    assert (tmp_path / "run" / "learning_curve.png").read_bytes() == want
