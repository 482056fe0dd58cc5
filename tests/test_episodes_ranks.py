"""Episodes across ranks (torchrun, gloo on loopback): ``finetune guess`` on 2 ranks is the
single-process run. Truth: the single process, in float64 (the tiny model cast): the same
episodes (tokens, returns, the greedy evaluation's accuracy, each rank playing its share) and
the same weights after 3 updates to 1e-10, for reward-to-go, an uneven split, the KL per turn
and per token, micro-batches, and the contexts recomputed each turn instead of the kept cache.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_lm_ranks import one_and_two  # noqa: E402


@pytest.mark.slow
def test_two_ranks_play_and_learn_the_single_process_episodes_in_float64(tmp_path):
    one, two = one_and_two(tmp_path, "episodes_ranks_worker.py")
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted(p.name for p in two.iterdir()) and len(names) == 6
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
