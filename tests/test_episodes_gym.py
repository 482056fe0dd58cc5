"""Gymnasium environments of text (``finetune module:Id``): the reply is the action, the
observation the next user turn, each step's reward the turn's; only the model's tokens scored."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("gymnasium")
sys.path.insert(0, str(Path(__file__).parent))

from eligibility.lm.edge.model import TinyLM  # noqa: E402
from eligibility.lm.episodes.gym import text_env_id, text_task  # noqa: E402
from eligibility.lm.episodes.rollout import play  # noqa: E402

ENV = "_text_env:EchoText-v0"


def test_a_text_environment_is_played_turn_by_turn():
    assert text_env_id(ENV) == "EchoText-v0" and text_env_id("_text_env:nope") is None
    task = text_task(ENV, episodes=4, held_out=2, max_turns=5)
    try:
        assert task.vocab[2:] == ("\n", "a", "b")
        torch.manual_seed(0)
        model = TinyLM(task.vocab_size, 8, 1, 2, 64)
        batch = play(model, task, [0, 1, 2, 3], t_max=2, rng=np.random.default_rng(0))
        assert (batch.turns == 2).all()  # the environment ends at its second step
        assert batch.turn_rewards.shape == (4, 2)
        assert set(batch.turn_rewards.flatten().tolist()) <= {0.0, 0.5}
        for row, m, prompt in zip(batch.completion_ids.tolist(), batch.completion_mask.tolist(),
                                  batch.prompt_ids.tolist(), strict=True):  # fmt: skip
            world = "".join(task.vocab[t] for t, k in zip(row, m, strict=True) if not k)
            assert world.strip("\n<eos>") in ("a", "b")  # the second observation, masked
            assert task.vocab[prompt[-2]] in "ab"  # the first, the prompt
    finally:
        task.close()


def test_an_environment_that_raises_is_one_line():
    task = text_task("_text_env:BrokenText-v0", episodes=1, held_out=1)
    try:
        world = task.world(0)
        with pytest.raises(ValueError, match=r"BrokenText-v0 at step: .*the environment broke"):
            world.step([task.vocab.index("a")], False)
    finally:
        task.close()


@pytest.mark.slow
def test_finetune_trains_on_a_text_environment(tmp_path, monkeypatch):
    """``eligibility finetune module:Id`` on the built-in model: the rewards per step rise."""
    import csv

    from eligibility.cli import main

    monkeypatch.chdir(Path(__file__).parent)  # module:Id imports from the current directory
    out = tmp_path / "run"
    argv = ["finetune", ENV, "--max-updates", "40", "--eval-every", "10", "--no-progress"]
    assert main([*argv, "--max-completion-length", "2", "--out", str(out)]) in (0, 1)
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    first = np.mean([float(r["mean_reward"]) for r in rows[:5]])
    last = np.mean([float(r["mean_reward"]) for r in rows[-5:]])
    assert last > first + 0.2 and float(rows[-1]["turns"]) == 2
