"""Episodes across ranks (torchrun, gloo on loopback): ``finetune guess`` on 2 ranks is the
single-process run. Truth: the single process, in float64 (the tiny model cast): the same
episodes (tokens, returns, the greedy evaluation's accuracy, each rank playing its share) and
the same weights after 3 updates to 1e-10, for reward-to-go, an uneven split, the KL per turn
and per token, micro-batches, the contexts recomputed each turn instead of the kept cache,
top-p with a repetition penalty and min-p (on the kept cache and the contexts), importance
sampling, K = 2 further steps, and --fsdp (each rank's shards; a rank whose episodes have all
ended samples in step with the others).
"""

from __future__ import annotations

import csv
import json

import pytest

torch = pytest.importorskip("torch")

from test_lm_ranks import _torchrun, one_and_two  # noqa: E402


@pytest.mark.slow
def test_two_ranks_play_and_learn_the_single_process_episodes_in_float64(tmp_path):
    one, two = one_and_two(tmp_path, "episodes_ranks_worker.py")
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted(p.name for p in two.iterdir()) and len(names) == 12
    for name in names:
        a, b = torch.load(one / name), torch.load(two / name)
        for k, w in a["weights"].items():
            assert w.dtype == torch.float64
            assert float((w - b["weights"][k]).abs().max()) <= 1e-10, (name, k)
        for ra, rb in zip(a["history"], b["history"], strict=True):
            for key in ("tokens", "mean_reward", "turns", "eval_accuracy", "eval_reward"):
                assert ra[key] == rb[key], (name, key)
            assert abs(ra["loss"] - rb["loss"]) <= 1e-10 * max(1.0, abs(ra["loss"]))
        assert any(r["grad_norm"] > 1e-3 for r in a["history"]), name  # the runs did move


@pytest.mark.slow
def test_finetune_guess_runs_sharded_on_two_ranks_from_the_command_line(tmp_path):
    """``torchrun … finetune guess --fsdp --top-p 0.9 --epochs-per-batch 2`` on 2 gloo ranks:
    one run (rank 0 reports once), sharded (config.json says so), its metrics rows those of
    the episodes (turns played, the further step's ratio logged)."""
    out = tmp_path / "run"
    args = ["-m", "eligibility", "finetune", "guess", "--fsdp", "--top-p", "0.9",
            "--epochs-per-batch", "2", "--max-updates", "2", "--eval-every", "1",
            "--group-size", "2", "--prompts-per-batch", "2", "--no-progress",
            "--out", str(out)]  # fmt: skip
    done = _torchrun(*args)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert done.stdout.count("guess:") == 1
    assert json.loads((out / "config.json").read_text())["fsdp"] is True
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert len(rows) == 2 and all(float(r["turns"]) >= 1 and r["ratio/mean"] for r in rows)
