"""The real-model kit's tasks and rewards (``bench/lm/lm_real_tasks.py``, ``lm_real_rewards.py``).

Pure Python: the held-out items are never in training, every row's answer scores 1 under its own
reward and metric, and the rewards' partial credit is what their docstring says. The models of the
kit are built by ``make kit`` (downloads), never here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "lm"))

import lm_real_rewards as rewards
import lm_real_tasks as tasks

ALL = (*tasks.TUNING, *tasks.HELD_OUT)


@pytest.mark.parametrize("task", ALL)
def test_the_held_out_items_are_unseen_and_each_answer_scores_one(task):
    split = tasks.splits(task)
    train = {r["prompt"][0]["content"] for r in split["train"]}
    held = {r["prompt"][0]["content"] for r in split["heldout"]}
    assert held and train and not held & train
    assert len(held) == len(split["heldout"]) == min(tasks.N_HELD_OUT, len(tasks.items(task)) // 4)
    rows = split["train"] + split["heldout"]
    completions = [[{"role": "assistant", "content": r["answer"]}] for r in rows]
    columns = {"answer": [r["answer"] for r in rows], "task": [r["task"] for r in rows]}
    assert rewards.correct(completions, **columns) == [1.0] * len(rows)
    assert rewards.reward(completions, **columns) == [1.0] * len(rows)
    assert rewards.correct([""] * 2, answer=columns["answer"][:2], task=[task] * 2) == [0.0, 0.0]


@pytest.mark.parametrize(
    ("task", "text", "answer", "correct", "reward"),
    [
        ("add", "The answer is 85.", "85", 0.0, 0.5),
        ("add", "85.", "85", 1.0, 1.0),
        ("multiply", "84 or 48", "48", 0.0, 0.5),
        ("capital", "The capital is Lima.", "Lima", 0.0, 0.5),
        ("capital", "buenos aires", "Buenos Aires", 1.0, 1.0),
        ("antonym", "Cold", "cold", 1.0, 1.0),
        ("date", "2021-03-06", "2021-03-05", 0.0, 0.25),
        ("date", "March 5, 2021", "2021-03-05", 0.0, 0.0),
        (
            "json",
            'Sure: {"name": "Ana", "age": 34}',
            json.dumps({"name": "Ana", "age": 34}),
            0.0,
            0.75,
        ),
        ("json", '{"name": "Ana", "age": 35}', json.dumps({"name": "Ana", "age": 34}), 0.0, 0.25),
        ("json", '{"name": "Ana"', json.dumps({"name": "Ana", "age": 34}), 0.0, 0.0),
    ],
)
def test_partial_credit(task, text, answer, correct, reward):
    assert rewards.score(task, text, answer) == (correct, reward)


def test_the_race_reports_the_time_to_the_first_evaluation_past_the_target(capsys):
    """``lm_real_race.py report --target``: per (task, seed), the training seconds at the first
    evaluation at or past the target (a plain scan of each curve), TRL's over ours where both
    reach it, and "not reached" where a run never does."""
    import lm_real_race

    def run(system, seed, curve, user_s=None):
        row = {"system": system, "task": "json", "seed": seed, "curve": curve}
        return row | ({} if user_s is None else {"user_s": user_s})

    rows = [
        run("eligibility", 0, [[2, 0.5, 10.0], [4, 0.96, 20.0], [6, 0.94, 30.0]],
            [[2, 25.0], [4, 40.0], [6, 55.0]]),
        run("trl", 0, [[2, 0.95, 30.0], [4, 1.0, 60.0]], [[2, 100.0], [4, 150.0]]),
        run("eligibility", 1, [[2, 0.2, 10.0]]),
        run("trl", 1, [[2, 0.97, 25.0]]),
    ]  # fmt: skip
    lm_real_race.to_target(rows, 0.95)
    lines = capsys.readouterr().out.splitlines()
    assert "| json | 0 | eligibility | 4, 20 |  | 40 |  |" in lines
    assert "| json | 0 | trl | 2, 30 | 1.50 | 100 | 2.50 |" in lines  # as run: start-up, evals
    assert "| json | 1 | eligibility | not reached |  |  |  |" in lines
    assert "| json | 1 | trl | 2, 25 |  |  |  |" in lines
