"""A user's metrics can never overwrite, break or hide the run's columns (issue 90).

A reward function's ``log_metric(name, value)`` is the column ``user/NAME`` (no column of the
run's begins so), written whole into metrics.csv whatever NAME holds (a comma, a quote, a
newline); a name or value that cannot be one is refused at the call, in one line. Its
``log_extra(column, values)`` is checked as rewards are: one value per episode, a column that
is not the table's own, cells bounded. The runs that issue 90 saw lost (a header with a newline
or a comma in it) are resumed and plotted here.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from _run_dir import _Config, _row
from eligibility import runs
from eligibility.lm.metrics import SCHEMA, schema_of
from eligibility.lm.usermetrics import (
    MAX_EXTRA_CHARS,
    USER,
    UserLogs,
    user_column,
    user_columns,
)

HOSTILE = ["a\nb", "a,b", 'say "hi"', "update", "loss", "mean_reward", "rewards/f/mean", "é ü"]
"""The names issue 90 drove (a newline, a comma, the run's own columns), and two more."""


def test_no_column_of_the_run_is_in_the_users_namespace():
    """The prefix is the wall: no column of a run (nor a reward function's rewards/NAME/*) can
    be a user's."""
    schema = schema_of(("judge", "Counter"))
    assert not [c for c in schema.columns if c.startswith(USER)]


def test_a_users_metric_is_its_own_column_whatever_its_name(capsys):
    """90: "update", "loss", "mean_reward" are columns of their own beside the run's; a newline
    is written as its escape and said once on stderr; a comma or a quote is kept (metrics.csv
    quotes the cell)."""
    logs = UserLogs(2)
    for name in HOSTILE:
        logs.log_metric(name, 1.0)
    logs.log_metric("loss", -5.0)
    said: set[str] = set()
    row = user_columns(logs.logged, said)
    assert row[f"{USER}loss"] == -2.0 and f"{USER}a\\nb" in row and f"{USER}a,b" in row
    assert set(row).isdisjoint(SCHEMA.columns)
    assert all("\n" not in c for c in row)
    user_columns(logs.logged, said)  # said once a run
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'user/a\\\\nb'" in err
    assert user_column("tab\there") == "user/tab\\there"


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("", 1.0, "log_metric's name is empty"),
        (None, 1.0, "log_metric's name is a NoneType (None)"),
        (123, 1.0, "log_metric's name is a int (123)"),
        ("x" * 201, 1.0, "201 characters long"),
        ("nan", float("nan"), "log_metric('nan', …) was given nan: give a finite"),
        ("inf", float("inf"), "was given inf"),
        ("none", None, "was given None, not a number"),
        ("text", "0.5", "was given a str ('0.5'), not a number"),
        ("pair", np.ones(2), "an array of dtype float64 and shape (2,)"),
    ],
)
def test_a_metric_that_cannot_be_one_is_refused_at_the_call(name, value, words):
    """90: NaN is refused as a reward is (it was written as nan); an empty name, None or 123
    became columns; each is now a ValueError in the reward function's own call, one line."""
    with pytest.raises(ValueError, match=None) as err:
        UserLogs(1).log_metric(name, value)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("column", "values", "words"),
    [
        ("short", [1], "was given 1 values for the batch's 2 episodes"),
        ("long", [1, 2, 3], "was given 3 values for the batch's 2 episodes"),
        ("prompt", [1, 2], "'prompt' is a column of the episodes' table already"),
        ("reward", [1, 2], "'reward' is a column"),
        ("text", "ab", "was given a str: give a list of 2 values"),
        ("gen", (x for x in "ab"), "was given a generator"),
        ("", [1, 2], "log_extra's name is empty"),
        (7, [1, 2], "log_extra's name is a int (7)"),
        ("big", ["x" * (MAX_EXTRA_CHARS + 1), ""], "gives episode 0 more than 100,000"),
    ],
)
def test_log_extra_is_checked_as_rewards_are(column, values, words):
    """90: a list one short was padded with None silently; a column named prompt dropped
    silently; 10 MB values written at every evaluation. Each is one line at the call."""
    with pytest.raises(ValueError) as err:
        UserLogs(2).log_extra(column, values)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_log_extra_bounds_an_episodes_cells_together():
    logs = UserLogs(1)
    logs.log_extra("a", ["x" * (MAX_EXTRA_CHARS // 2)])
    with pytest.raises(ValueError, match="with this column"):
        logs.log_extra("b", ["y" * (MAX_EXTRA_CHARS // 2 + 1)])
    logs = UserLogs(2)
    logs.log_extra("judge", [{"by": 1}, None])
    assert [logs.extra(i) for i in (0, 1)] == [{"judge": "{'by': 1}"}, {"judge": None}]


def test_a_run_with_every_hostile_name_is_read_resumed_and_plotted(tmp_path, capsys):
    """90: the newline in the header (the run could never be resumed or plotted), the comma
    (one more cell in the header than in the rows: "no metrics.csv rows to plot", resume
    refused), the run's own names: metrics.csv stays whole, the run's columns the run's."""
    from eligibility.cli import main

    path, seed = tmp_path / "run", frozenset({"seed"})
    rng = np.random.default_rng(0)
    mine = user_columns({name: [7.0] for name in HOSTILE}, set())
    with runs.RunDir.open(_Config(str(path)), SCHEMA, seed) as run:
        history = [_row(SCHEMA, 1), {**_row(SCHEMA, 2), **mine}]
        for row in history:
            run.log(row)
        snapshot = {"counters": {"updates": 2}, "rngs": [rng.bit_generator.state]}
        run.checkpoint({"policy.w": np.ones(3)}, snapshot)
        run.finish(history)
    with open(path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["update"] for r in rows] == ["1", "2"]
    assert [r["mean_reward"] for r in rows] == ["1.0", "2.0"]  # the run's, not a user's
    assert [r[f"{USER}a,b"] for r in rows] == ["", "7.0"]
    assert len((path / "metrics.csv").read_text().splitlines()) == 3
    with runs.RunDir.open(_Config(str(path)), SCHEMA, seed, resume=True) as run:
        state = runs.TrainState(counters={"updates": 0}, rngs=[np.random.default_rng()])
        run.restore({"policy.w": np.zeros(3)}, state)
        assert state.history[1][f"{USER}update"] == 7.0 and state.history[1]["update"] == 2
        run.log(_row(SCHEMA, 3))
    assert [r["update"] for r in runs.read_metrics(path)] == ["1", "2", "3"]
    capsys.readouterr()
    assert main(["plot", str(path), "--plot", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").stat().st_size > 0


HOSTILE_REWARD = """
def judge(completions, log_metric, log_extra, trainer_state, **kwargs):
    assert 0 <= trainer_state.global_step <= trainer_state.max_steps  # at evaluations too (90)
    log_extra("at_step", [trainer_state.global_step] * len(completions))
    for name in {names!r}:
        log_metric(name, -5.0)
    return [2.0] * len(completions)
"""

ENV = '''
class Counter:
    def reset(self, **kwargs):
        self.n = 0

    def increment(self, a: int) -> int:
        """Increment the counter.

        Args:
            a: The value to add.
        """
        self.n += a
        return self.n
'''


@pytest.mark.slow
def test_a_finetune_whose_reward_logs_every_hostile_name_is_resumed_and_plotted(tmp_path, capsys):
    """90, end to end: a reward function of episodes logs the run's own names, a newline and a
    comma: exit 0, ``mean_reward`` the batch's (2.0, not the −5.0 logged as "mean_reward"),
    the run resumed, evaluated and plotted, the escape said once a run. Its ``trainer_state``
    is the run's at every evaluation (training's and ``evaluate``'s), not step 0 of 0."""
    pytest.importorskip("transformers")
    from eligibility.cli import main
    from lm_user import hf_kit

    model = hf_kit.tool_model_dir(tmp_path / "model")
    (tmp_path / "reward.py").write_text(HOSTILE_REWARD.format(names=HOSTILE))
    (tmp_path / "counter.py").write_text(ENV)
    out = tmp_path / "run"
    argv = ["finetune", f"{tmp_path / 'reward.py'}:judge", "--model", str(model),
            "--env", f"{tmp_path / 'counter.py'}:Counter", "--max-tool-calls", "1",
            "--group-size", "2", "--prompts-per-batch", "1", "--max-completion-length", "4",
            "--target-accuracy", "none", "--no-progress", "--out", str(out)]  # fmt: skip
    assert main([*argv, "--max-updates", "1", "--eval-every", "1"]) == 0
    assert main(["finetune", "--resume", str(out), "--max-updates", "2", "--no-progress"]) == 0
    assert main(["evaluate", str(out), "--format", "json"]) == 0  # the checkpoint's step
    err = capsys.readouterr().err
    assert err.count("log_metric('a\\nb', …) is the column") == 2  # once a run
    rows = runs.read_metrics(out)
    assert [r["update"] for r in rows] == ["1", "2"]
    assert [r["mean_reward"] for r in rows] == ["2.0", "2.0"]
    assert [r["user/mean_reward"] for r in rows] == ["-5.0", "-5.0"]
    assert main(["plot", str(out), "--plot", str(tmp_path / "c.png")]) == 0
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert [{e["at_step"] for e in x["episodes"]} for x in lines] == [{1}, {2}]  # not step 0


NAMES = ["é/ü", "a/b", "../../etc/passwd", "\x00z", "user/loss", " ", "名前", "a\tb", "x" * 200]
"""Names a hostile user logs on episodes (issue 110): unicode, slashes, a path, NUL, the prefix
itself, a blank, a tab, the longest taken."""


@pytest.mark.parametrize("name", NAMES)
def test_a_hostile_name_is_a_column_of_its_own_written_whole(name, tmp_path, capsys):
    """Each name is a column of metrics.csv whatever it holds: read back as written (a control
    character as its escape), never a path (a slash is text in a header), never one of the
    run's own columns, and the file stays one row an update."""
    logs = UserLogs(1)
    logs.log_metric(name, 0.5)
    row = user_columns(logs.logged, set())
    (column,) = row
    assert column.startswith(USER) and column not in SCHEMA.columns
    assert all(c.isprintable() for c in column)
    path = tmp_path / "run"
    with runs.RunDir.open(_Config(str(path)), SCHEMA, frozenset({"seed"})) as run:
        run.log({**_row(SCHEMA, 1), **row})
    with open(path / "metrics.csv", newline="", encoding="utf-8") as f:
        (read,) = list(csv.DictReader(f))
    assert read[column] == "0.5" and read["update"] == "1"
    assert sorted(p.name for p in path.iterdir()) == [".lock", "config.json", "metrics.csv"]


@pytest.mark.parametrize(
    ("value", "taken"),
    [
        (np.float32(0.25), 0.25),
        (np.int64(3), 3.0),
        (np.bool_(True), 1.0),
        (np.array(0.5), 0.5),
        ("torch", 0.75),
        ("0.5", None),
        (None, None),
        (np.array([1.0, 2.0]), None),
        ("torch-pair", None),
        (complex(1, 1), None),
    ],
)
def test_a_metrics_value_is_a_finite_real_number_or_one_line(value, taken):
    """Tensors and NumPy scalars are numbers (as rewards are); text, None, a pair, a complex
    number are refused at the call, in one line."""
    torch = pytest.importorskip("torch")
    if isinstance(value, str) and value.startswith("torch"):
        value = torch.tensor(0.75) if value == "torch" else torch.tensor([0.75, 1.0])
    logs = UserLogs(1)
    if taken is None:
        with pytest.raises(ValueError) as err:
            logs.log_metric("m", value)
        assert "log_metric('m', …) was given" in str(err.value) and "\n" not in str(err.value)
    else:
        logs.log_metric("m", value)
        assert logs.logged == {"m": [taken]}


def test_ten_thousand_names_are_ten_thousand_columns_each_the_batchs_mean():
    """Ten thousand names in one batch: each its own column, its mean over the calls; none of
    the run's overwritten (the CSV written whole: the slow test below)."""
    logs = UserLogs(1)
    for i in range(10_000):
        logs.log_metric(f"m{i}", float(i))
        logs.log_metric(f"m{i}", float(i) + 1.0)
    row = user_columns(logs.logged, set())
    assert len(row) == 10_000 and row["user/m9999"] == 9999.5
    assert set(row).isdisjoint(SCHEMA.columns)


@pytest.mark.slow
def test_ten_thousand_names_are_written_whole_into_metrics_csv(tmp_path):
    logs = UserLogs(1)
    for i in range(10_000):
        logs.log_metric(f"m/{i}", float(i))
    row = user_columns(logs.logged, set())
    path = tmp_path / "run"
    with runs.RunDir.open(_Config(str(path)), SCHEMA, frozenset({"seed"})) as run:
        history = [{**_row(SCHEMA, 1), **row}, {**_row(SCHEMA, 2), **row}]
        for r in history:
            run.log(r)
        run.finish(history)
    with open(path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["update"] for r in rows] == ["1", "2"] and rows[1]["user/m/9999"] == "9999.0"
