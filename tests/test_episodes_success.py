"""What a success is (issue 75): a return of exactly 1, or one that reaches ``--success-return``.

An environment paying 1 on each of 3 turns returns 3: without a threshold its accuracy is 0
and ``--target-accuracy`` can never be reached; with ``--success-return 3`` every episode is a
success, in the evaluation and in a batch's ``accuracy`` alike.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility.lm.edge.model import TinyLM  # noqa: E402
from eligibility.lm.episodes.episode_rollout import evaluate_episodes  # noqa: E402
from eligibility.lm.tasks import BOS, Answer, EpisodicTask, judged, succeeded  # noqa: E402

VOCAB = ("<eos>", "<bos>", "x", "|")


class _Pays:
    """Pays 1 for every reply, for three turns."""

    def __init__(self) -> None:
        self.k = 0

    def step(self, reply, ended):
        self.k += 1
        return Answer((3,), reward=1.0, done=self.k == 3)


def _task() -> EpisodicTask:
    return EpisodicTask("pays", VOCAB, ((BOS,), (BOS,)), lambda i, c, e: 0.0,
                        max_completion_length=2, world=lambda i: _Pays(), max_turns=3)  # fmt: skip


def test_a_return_of_three_is_a_success_only_with_its_threshold():
    torch.manual_seed(0)
    model = TinyLM(len(VOCAB), 8, 1, 2, 64)
    plain = evaluate_episodes(model, _task(), 2, 4)
    assert plain.mean_reward == 3.0 and plain.accuracy == 0.0  # "not solved", as it was
    three = judged(_task(), 3.0)
    assert three.evaluation.success_return == 3.0
    assert evaluate_episodes(model, three, 2, 4).accuracy == 1.0
    assert evaluate_episodes(model, judged(_task(), 3.5), 2, 4).accuracy == 0.0


def test_success_is_the_same_rule_on_numpy_and_torch_and_on_single_completions():
    r = [0.0, 1.0, 1.1, 3.0]
    for at, want in ((None, [0, 1, 0, 0]), (1.0, [0, 1, 1, 1]), (3.0, [0, 0, 0, 1])):
        assert succeeded(np.array(r), at).astype(int).tolist() == want
        assert succeeded(torch.tensor(r), at).int().tolist() == want
    from eligibility.lm.tasks import reverse_task

    task = judged(reverse_task(), 0.5)
    assert task.evaluation.success_return == 0.5
    got = task.correct([0, 0], [[2], [3]], [True, True], np.array([0.25, 0.75]))
    assert got.tolist() == [0.0, 1.0]


def test_a_runs_task_is_judged_by_its_config():
    from eligibility.lm.build import task_and_model
    from eligibility.lm.config import FinetuneConfig

    task, _, _ = task_and_model(FinetuneConfig("guess", success_return=2.0))
    assert task.success_return == task.evaluation.success_return == 2.0
    plain, _, _ = task_and_model(FinetuneConfig("guess"))
    assert plain.success_return is None


@pytest.mark.slow
def test_the_command_line_takes_a_success_return(tmp_path, capsys):
    """``--success-return`` reaches the run: a batch's accuracy and the greedy one read it."""
    import csv

    from eligibility.cli import main

    out = tmp_path / "run"
    argv = ["finetune", "guess", "--max-updates", "1", "--eval-every", "1", "--no-progress"]
    assert main([*argv, "--success-return", "0", "--out", str(out)]) in (0, 1)
    (row,) = csv.DictReader((out / "metrics.csv").open())
    assert float(row["accuracy"]) == 1.0 and float(row["eval_accuracy"]) == 1.0  # R ≥ 0 always
    import json  # each evaluation's first episodes, whole (TRL's log_completions)

    (line,) = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert line["update"] == 1 and len(line["episodes"]) == 4
    assert {"prompt", "completion", "rewards", "return", "tool_calls"} <= set(line["episodes"][0])
    assert line["system"] == [] and line["episodes"][0]["prompt"][0]["role"] == "user"  # 91
