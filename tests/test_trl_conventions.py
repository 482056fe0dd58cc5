"""TRL's reward conventions on every kind of task, and the one list of names the run keeps.

Truth: TRL's own ``GRPOTrainer`` source (the keywords its ``_calculate_rewards`` hands every
reward function, the columns it leaves out of the call), read from the installed package; the
records and tables the run itself writes (every key they hold must be refused to
``log_extra``); and one reward function written for TRL, run unchanged on a task of prompts
and on a task of episodes.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from eligibility.lm.reserved import (
    CALL,
    CELLS,
    COLUMNS,
    DROPPED,
    KEYWORDS,
    RECORD,
    TABLE,
    refuse_columns,
)
from eligibility.lm.rewards import HANDED, Rewards, TrainerState
from eligibility.lm.usermetrics import UserLogs

TRL_REWARD = textwrap.dedent(
    '''
    def judged(prompts, completions, completion_ids, trainer_state, log_metric, log_extra,
               **kwargs):
        """Written for TRL's GRPOTrainer: logs a metric and a column, reads the step."""
        log_metric("judged", 0.25)
        log_metric("judged", 0.75)
        log_extra("note", [f"step {trainer_state.global_step}" for _ in completions])
        return [1.0 for _ in completions]
    '''
)


def _trl_source() -> str:
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("trl is not installed")
    path = Path(spec.submodule_search_locations[0]) / "trainer" / "grpo_trainer.py"
    return path.read_text()


def _calculate_rewards(source: str) -> ast.FunctionDef:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "_calculate_rewards":
            return node
    pytest.fail("TRL's GRPOTrainer has no _calculate_rewards any more: read its reward call again")


def test_the_keywords_are_those_trls_reward_call_hands():
    """Every ``reward_kwargs["NAME"] = …`` of TRL's ``_calculate_rewards`` is one of KEYWORDS
    (and each of ours is TRL's); the call's own arguments are TRL's ``prompts=``,
    ``completions=``, ``completion_ids=``; the columns it leaves out are ``prompt`` and DROPPED."""
    fn = _calculate_rewards(_trl_source())
    handed = {
        t.slice.value
        for node in ast.walk(fn)
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Subscript)
        and isinstance(t.value, ast.Name)
        and t.value.id == "reward_kwargs"
        and isinstance(t.slice, ast.Constant)
    }
    assert handed == set(KEYWORDS)
    called = {
        k.arg
        for node in ast.walk(fn)
        if isinstance(node, ast.Call)
        for k in node.keywords
        if k.arg is not None
        and any(
            isinstance(x, ast.keyword) and x.arg is None for x in node.keywords
        )  # the reward call: its named arguments beside **reward_kwargs
    }
    assert called == set(CALL)
    left_out = next(
        {e.value for e in node.elts}
        for node in ast.walk(fn)
        if isinstance(node, ast.List) and all(isinstance(e, ast.Constant) for e in node.elts)
        and {"prompt", "completion"} <= {e.value for e in node.elts}
    )  # fmt: skip
    assert left_out - {"prompt"} - set(CALL) == set(DROPPED)
    assert set(HANDED) == set(KEYWORDS) - {"environments"}


@pytest.mark.parametrize("column", COLUMNS)
def test_a_data_column_named_as_the_call_is_refused_in_one_line(column):
    """A column ``trainer_state`` or ``log_metric`` was passed to the reward call and then
    overwritten by the run's (as TRL overwrites it) without a word."""
    with pytest.raises(ValueError) as err:
        refuse_columns([{"prompt": "a"}, {"prompt": "b", column: 1}], "the training data")
    text = str(err.value)
    assert f"a column named {column!r} collides with the reward call's" in text
    assert "\n" not in text


def test_every_key_the_run_writes_beside_a_cell_is_refused_to_log_extra():
    """``log_extra("rewards", …)`` and ``log_extra("system", …)`` passed the check and were
    then dropped from the records (the record's own keys win). The truth is what the run
    writes: an episode's record (with a system prompt) and the trackers' table."""
    from eligibility.lm.episodes.shown import table, transcript

    record = transcript([1], [2, 3], [1, 0], [0, 0], [1.0], lambda ids: "x",
                        shown={"system": "s", "prompt": [], "completion": []})  # fmt: skip
    columns, _ = table(0, [record])
    assert set(record) == set(RECORD) and set(columns) == set(TABLE)
    for name in {*record, *columns}:
        with pytest.raises(ValueError, match="is a column of the episodes' table already"):
            UserLogs(1).log_extra(name, [1])
    assert set(CELLS) == {*record, *columns}
    logs = UserLogs(1)
    logs.log_extra("turns", [3])  # not the run's column: kept, written under its name
    assert table(0, [{**record, **logs.extra(0)}])[0][-1] == "turns"


def test_a_trl_reward_gets_trls_keywords_on_a_task_of_prompts(tmp_path):
    """It failed with ``'NoneType' object is not callable``: single completions' functions got
    no ``log_metric``. Now the call is TRL's; what was logged comes back, and the run's state
    is the reward's ``trainer_state``."""
    (tmp_path / "trl_reward.py").write_text(TRL_REWARD)
    state = TrainerState(global_step=3, max_steps=9)
    with Rewards([f"{tmp_path}/trl_reward.py:judged"], timeout=30) as rewards:
        rewards.check([*CALL, *HANDED])
        scored = rewards(["p", "q"], ["a", "b"], [[1], [2]], {}, state)
    assert scored.rewards.tolist() == [1.0, 1.0] and scored.scorable.all()
    assert scored.logged == {"judged": [0.25, 0.75]}
    assert scored.cells == {"note": ["step 3", "step 3"]}


def test_the_same_reward_gets_the_same_on_a_task_of_episodes(tmp_path):
    pytest.importorskip("transformers")
    from eligibility.lm.edge.hf import tool_schema
    from eligibility.lm.episodes.toolbox import Toolbox

    (tmp_path / "trl_reward.py").write_text(
        TRL_REWARD
        + textwrap.dedent(
            '''
            class Quiet:
                def reset(self, **kwargs):
                    return None

                def ping(self) -> str:
                    """Answer pong."""
                    return "pong"
            '''
        )
    )
    box = Toolbox((), f"{tmp_path}/trl_reward.py:Quiet", timeout=10.0, schema=tool_schema,
                  rewards=[f"{tmp_path}/trl_reward.py:judged"]).start()  # fmt: skip
    try:
        handles = [box.open({})[0] for _ in range(2)]
        batch = {"prompts": [[], []], "completions": [[], []], "completion_ids": [[], []],
                 "columns": {}}  # fmt: skip
        endings, logged = box.settle(handles, batch, TrainerState(global_step=3, max_steps=9))
    finally:
        box.close()
    assert logged == {"judged": [0.25, 0.75]}
    assert [e.extra for e in endings] == [{"note": "step 3"}] * 2


def test_a_trl_reward_with_log_metric_runs_unchanged_on_a_task_of_prompts(tmp_path):
    """End to end, from Python with rows in memory (as a TRL script runs): metrics.csv has the
    metric under ``user/NAME`` (its mean over the calls), episodes.jsonl each evaluation's
    first completions with the ``log_extra`` column, its cells the run's step."""
    import sys

    from eligibility import runs
    from eligibility.lm import FinetuneConfig, finetune

    (tmp_path / "trl_reward.py").write_text(TRL_REWARD)
    sys.path.insert(0, str(tmp_path))
    try:
        from trl_reward import judged
    finally:
        sys.path.remove(str(tmp_path))
    config = FinetuneConfig("judged", d_model=8, n_head=2, n_layer=1, group_size=2,
                            prompts_per_batch=2, max_updates=2, max_completion_length=3,
                            eval_every=1, target_accuracy=None, progress=False,
                            out=str(tmp_path / "run"))  # fmt: skip
    rows = [{"prompt": "ab"}, {"prompt": "ba"}]
    finetune(config, reward_funcs=[judged], train_dataset=rows, eval_dataset=rows[:1])
    got = runs.read_metrics(tmp_path / "run")
    assert [r["user/judged"] for r in got] == ["0.5", "0.5"]
    lines = [json.loads(x) for x in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert [[e["note"] for e in x["episodes"]] for x in lines] == [["step 1"], ["step 2"]]
    assert np.isclose(lines[0]["episodes"][0]["return"], 1.0)
