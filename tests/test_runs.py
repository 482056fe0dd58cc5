"""The run layer (eligibility.runs): below both trainers, and what every run writes with it."""

from __future__ import annotations

import ast
import dataclasses
import functools
import gc
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import _source
from _run_dir import _Config, _row
from eligibility import runs
from eligibility._io import atomic_write_bytes
from eligibility.lm.config import IDENTITY as LM_IDENTITY
from eligibility.lm.config import FinetuneConfig
from eligibility.lm.metrics import SCHEMA as FINETUNE
from eligibility.reinforce.logs import SCHEMA as TRAIN
from eligibility.runs.metrics import fmt

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "eligibility"


# -- the layer sits below both trainers ------------------------------------------------------


def _module(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every eligibility module ``path`` imports, at the top or inside a function."""
    found = set()
    for node in _source.nodes(path):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in found if m.startswith("eligibility.")}


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module → the eligibility modules it imports (a package stands for its ``__init__``).

    Parsed once a worker (0.5 s): ``test_trainers`` and ``test_layers`` read it too. The
    collector is paused meanwhile: the trees are some 260,000 new objects, none of them
    garbage, and the full collections their allocation set off each walked the whole heap of
    a worker that has imported torch (three of them: 1.3 s for the graph instead of 0.5 s).
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
        return {m: {i for i in _imports(p) if i in modules} for m, p in modules.items()}
    finally:
        if collecting:
            gc.enable()


@pytest.fixture
def graph() -> dict[str, set[str]]:
    return import_graph()


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [m for m in graph if m == start or m.startswith(start + ".")]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += sorted(graph.get(m, ()))
    return seen


def test_lm_never_imports_reinforce_and_the_run_layer_neither_trainer(graph):
    lm = _reach(graph, "eligibility.lm")
    assert not {m for m in lm if m.startswith("eligibility.reinforce")}
    layer = _reach(graph, "eligibility.runs")
    assert not {m for m in layer if m.startswith(("eligibility.reinforce", "eligibility.lm"))}
    assert "eligibility.runs.directory" in _reach(graph, "eligibility.reinforce.trainer")
    assert "eligibility.runs.directory" in _reach(graph, "eligibility.lm.trainer")


def test_the_run_layer_is_in_no_import_cycle(graph):
    for m in graph:
        if m.startswith("eligibility.runs"):
            others = _reach(graph, m) - {m}
            assert not any(m in _reach(graph, o) for o in others), m


@pytest.mark.slow
def test_importing_lm_and_the_run_layer_loads_no_reinforce_module():
    """At run time: ``eligibility/__init__`` bypassed, any import of reinforce fails loudly."""
    code = f"""
import sys, types, importlib.abc
pkg = types.ModuleType("eligibility"); pkg.__path__ = [{str(PACKAGE)!r}]
sys.modules["eligibility"] = pkg
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.startswith("eligibility.reinforce"):
            raise ImportError("imported " + name)
sys.meta_path.insert(0, Block())
import eligibility.runs, eligibility.lm.trainer, eligibility.lm.runs, eligibility.lm.metrics
from eligibility.lm import FinetuneConfig, finetune
finetune(FinetuneConfig("repeat", max_updates=1, d_model=8, n_head=2, group_size=2,
         prompts_per_batch=1, progress=False))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# -- a run directory of either kind --------------------------------------------------------


def _write_run(path: Path, schema: runs.Schema, n: int = 4, weights: Any = None) -> None:
    weights = np.ones(3) if weights is None else weights
    with runs.RunDir.open(_Config(str(path)), schema, frozenset({"seed"})) as run:
        history = []
        for i in range(1, n + 1):
            history.append(_row(schema, i))
            run.log(history[-1])
        rng = np.random.default_rng(0)
        run.checkpoint(
            {"policy.w": weights}, {"counters": {"updates": n}, "rngs": [rng.bit_generator.state]}
        )
        run.finish(history)


@pytest.mark.parametrize("umask", [0o022, 0o027])
@pytest.mark.parametrize("weights", [pytest.param("numpy", marks=pytest.mark.curve), "torch"])
def test_run_files_follow_the_umask(tmp_path, umask, weights):
    """Bug: config.json, metrics.csv, checkpoint and plot were 0600 (mkstemp's mode); then a
    checkpoint of torch tensors (finetune's) still was: safetensors' writer replaces the file
    it is named with its own 0600 one. The plot is drawn (``curve``) beside NumPy weights: its
    writer does not read what the checkpoint holds."""
    tensor = np.ones(3) if weights == "numpy" else pytest.importorskip("torch").ones(3)
    old = os.umask(umask)
    try:
        atomic_write_bytes(tmp_path / "one.json", b"{}")
        _write_run(tmp_path / "run", TRAIN, weights=tensor)
    finally:
        os.umask(old)
    want = 0o666 & ~umask
    assert stat.S_IMODE((tmp_path / "one.json").stat().st_mode) == want
    files = ["config.json", "metrics.csv", runs.CHECKPOINT, runs.LOCK]
    files += ["learning_curve.png"] if weights == "numpy" else []
    modes = {f: oct(stat.S_IMODE((tmp_path / "run" / f).stat().st_mode)) for f in files}
    assert modes == dict.fromkeys(files, oct(want))


@pytest.mark.parametrize("schema", [TRAIN, FINETUNE], ids=["train", "finetune"])
def test_the_learning_curves_y_label_fits_in_the_picture(tmp_path, monkeypatch, schema):
    """Bug: the y-label (one line, taller than the 4.2-inch figure) was cut off at the top."""
    from eligibility.runs import plot

    boxes = []

    def measure(fig, path, **kw):
        fig.canvas.draw()
        label = fig.axes[0].yaxis.label.get_window_extent(fig.canvas.get_renderer())
        boxes.append((label, fig.bbox))

    _write_run(tmp_path / "run", schema)
    monkeypatch.setattr(plot, "save_figure", measure)
    plot.plot_curves([tmp_path / "run"], tmp_path / "curve.png", schema)
    ((label, figure),) = boxes
    assert figure.y0 <= label.y0 and label.y1 <= figure.y1, (label, figure)
    assert figure.x0 <= label.x0 and label.x1 <= figure.x1


def test_a_run_directory_writes_its_schemas_columns_and_resumes_to_its_checkpoint(tmp_path):
    path = tmp_path / "run"
    _write_run(path, FINETUNE, n=3)
    rows = runs.read_metrics(path)
    assert tuple(rows[0]) == FINETUNE.columns and len(rows) == 3
    state = runs.TrainState(counters={"updates": 0}, rngs=[rng := np.random.default_rng(5)])
    with runs.RunDir.open(_Config(str(path)), FINETUNE, frozenset({"seed"}), resume=True) as run:
        tensors = run.restore({"policy.w": np.zeros(3)}, state)
    assert state.counters == {"updates": 3} and [r["update"] for r in state.history] == [1, 2, 3]
    assert np.array_equal(tensors["policy.w"], np.ones(3))
    assert rng.random() == np.random.default_rng(0).random()  # the RNG as checkpointed


def test_a_resume_writes_nothing_until_its_first_row_then_keeps_the_rows_to_its_checkpoint(
    tmp_path,
):
    """A resume whose restore (or the model's load after it) fails leaves every file as it
    was: config.json keeps the run's options, metrics.csv its rows after the checkpoint. At
    its first row the resume writes its config and drops those rows (they are replayed)."""
    path, seed = tmp_path / "run", frozenset({"seed"})
    _write_run(path, FINETUNE, n=3)
    with open(path / "metrics.csv", "a") as f:  # a row after the checkpoint (at update 3)
        f.write(",".join(fmt(_row(FINETUNE, 4).get(c)) for c in FINETUNE.columns) + "\n")
    before = {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()}
    now, rng = _RunConfig(str(path), progress=True), np.random.default_rng()
    with runs.RunDir.open(now, FINETUNE, seed, resume=True) as run:
        state = runs.TrainState(counters={"updates": 0}, rngs=[rng])
        run.restore({"policy.w": np.zeros(3)}, state)
        assert [r["update"] for r in state.history] == [1, 2, 3]
    assert {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()} == before
    with runs.RunDir.open(now, FINETUNE, seed, resume=True) as run:
        run.restore({"policy.w": np.zeros(3)}, runs.TrainState({"updates": 0}, [rng]))
        run.log(_row(FINETUNE, 4))
    assert [r["update"] for r in runs.read_metrics(path)] == ["1", "2", "3", "4"]
    assert '"progress": true' in (path / "config.json").read_text()


def test_a_column_a_users_code_names_mid_run_widens_metrics_csv_and_reaches_the_trackers(
    tmp_path,
):
    """75 B2: a value a reward function logs (log_metric) is named only once it logs, after
    the header was written: the header widens (before the timing columns), the earlier rows
    kept with an empty cell; TensorBoard gets it under its name; a resume keeps the column."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    path, seed = tmp_path / "run", frozenset({"seed"})
    rng = np.random.default_rng(0)
    snapshot = {"counters": {"updates": 2}, "rngs": [rng.bit_generator.state]}
    with runs.RunDir.open(_Config(str(path)), FINETUNE, seed) as run:
        run.log(_row(FINETUNE, 1))
        run.log({**_row(FINETUNE, 2), "judged": 0.5})
        run.checkpoint({"policy.w": np.ones(3)}, snapshot)
        run.log(_row(FINETUNE, 3))  # after the checkpoint: a resume replays it
    header = (path / "metrics.csv").read_text().splitlines()[0].split(",")
    first_time = min(header.index(c) for c in FINETUNE.timing)
    assert header.index("judged") == first_time - 1
    assert header[:-1] != list(FINETUNE.columns)[:-1] and set(header) - {"judged"} == set(
        FINETUNE.columns
    )
    rows = runs.read_metrics(path)
    assert [r["judged"] for r in rows] == ["", "0.5", ""]
    assert [r["mean_reward"] for r in rows] == ["1.0", "2.0", "3.0"]  # the earlier rows kept
    board = EventAccumulator(str(path))
    board.Reload()
    assert [(e.step, e.value) for e in board.Scalars("judged")] == [(20, 0.5)]
    with runs.RunDir.open(_Config(str(path)), FINETUNE, seed, resume=True) as run:
        state = runs.TrainState(counters={"updates": 0}, rngs=[np.random.default_rng()])
        run.restore({"policy.w": np.zeros(3)}, state)
        assert [r["judged"] for r in state.history] == [None, 0.5]
        run.log(_row(FINETUNE, 3))
    assert [r["judged"] for r in runs.read_metrics(path)] == ["", "0.5", ""]
    with runs.RunDir.open(_Config(str(tmp_path / "train")), TRAIN, seed) as run:
        run.log({**_row(TRAIN, 1), "judged": 0.5})  # a schema that does not widen: not written
    assert "judged" not in (tmp_path / "train" / "metrics.csv").read_text()


def test_tensorboard_gets_each_step_once_when_a_run_that_stopped_after_its_checkpoint_resumes(
    tmp_path,
):
    """The rows after the last checkpoint are replayed by the resume: TensorBoard gets a step
    at the checkpoint that covers it, so a run that stops between the two (here: closed, as a
    kill leaves it) never shows a step twice. Truth: TensorBoard's own reader. (The same with a
    CartPole run killed by SIGKILL in a subprocess: tests/test_faults.py, slow.)"""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    path, seed = tmp_path / "run", frozenset({"seed"})
    snapshot = {"counters": {"updates": 3}, "rngs": [np.random.default_rng(0).bit_generator.state]}
    with runs.RunDir.open(_Config(str(path)), TRAIN, seed) as run:
        for i in (1, 2, 3):
            run.log(_row(TRAIN, i))
        run.checkpoint({"policy.w": np.ones(3)}, snapshot)
        run.log(_row(TRAIN, 4))  # after the checkpoint: the resume replays 4 and 5
        run.log(_row(TRAIN, 5))
    with runs.RunDir.open(_Config(str(path)), TRAIN, seed, resume=True) as run:
        run.restore(
            {"policy.w": np.zeros(3)}, runs.TrainState({"updates": 0}, [np.random.default_rng()])
        )
        for i in (4, 5, 6):
            run.log(_row(TRAIN, i))
        run.checkpoint({"policy.w": np.ones(3)}, {**snapshot, "counters": {"updates": 6}})
    board = EventAccumulator(str(path))
    board.Reload()
    # sorted: the reader takes the two event files in their names' order, which within one
    # second of one process is a counter's as text (``…10`` before ``…9`` once ten were made)
    logged = sorted(e.step for e in board.Scalars("charts/mean_return"))
    assert (
        logged == [int(r["env_steps"]) for r in runs.read_metrics(path)] == [10, 20, 30, 40, 50, 60]
    )


def test_a_resume_whose_metrics_were_deleted_is_refused(tmp_path):
    """It continued: the rows up to the checkpoint (the curve, the watches' replay) gone."""
    path = tmp_path / "run"
    _write_run(path, FINETUNE, n=3)
    (path / "metrics.csv").unlink()
    with pytest.raises(ValueError, match=r"metrics\.csv is missing: the run's history"):
        runs.RunDir.open(_Config(str(path)), FINETUNE, frozenset({"seed"}), resume=True)
    assert not (path / "metrics.csv").exists()


@pytest.mark.parametrize("content", [b"\xda\xff\x00 not text", "update,wall_s\n" + "x" * 200_000])
def test_a_metrics_csv_that_is_not_text_is_refused_naming_the_file(tmp_path, content):
    """A resume said only "'utf-8' codec can't decode byte 0xda in position 1"."""
    path = tmp_path / "run"
    _write_run(path, FINETUNE, n=3)
    if isinstance(content, str):
        content = content.encode()
    (path / "metrics.csv").write_bytes(content)
    with pytest.raises(ValueError, match=rf"{path / 'metrics.csv'} is not the run's metrics\.csv"):
        runs.read_metrics(path)
    with (
        pytest.raises(
            ValueError, match=rf"{path / 'metrics.csv'} is not .*restore the file from a copy"
        ),
        runs.RunDir.open(_Config(str(path)), FINETUNE, frozenset({"seed"}), resume=True) as run,
    ):
        run.restore({"policy.w": np.zeros(3)}, {"updates": 0}, [np.random.default_rng()])
    assert (path / "metrics.csv").read_bytes() == content


def test_the_resume_rule_names_an_option_by_its_flag_and_quotes_a_value_cut(tmp_path):
    """``--env`` was named --environment-factory, a flag that does not exist."""
    saved = FinetuneConfig("repeat")
    with pytest.raises(ValueError, match=r"these options differ from it: --env 'a=x\.py:E' \("):
        runs.resumed(saved, {"environment_factory": "a=x.py:E"}, LM_IDENTITY)
    with pytest.raises(ValueError) as refused:
        runs.resumed(saved, {"environment_factory": "x" * 100_000}, LM_IDENTITY)
    assert len(str(refused.value)) < 400 and "--env 'xxx" in str(refused.value)


def test_a_checkpoint_of_another_identity_or_shape_is_refused_by_name(tmp_path):
    path = tmp_path / "run"
    _write_run(path, TRAIN)
    with pytest.raises(ValueError, match=r"seed 0 \(checkpoint\) vs 1 \(config.json\)"):
        runs.read_checkpoint(path, {"policy.w": np.zeros(3)}, {"seed": 1}, frozenset({"seed"}))
    with pytest.raises(ValueError, match=r"policy.w has shape \(3,\) where the config gives"):
        runs.read_checkpoint(path, {"policy.w": np.zeros(4)}, {"seed": 0}, frozenset({"seed"}))


def test_the_resume_rule_refuses_a_changed_identity_by_name_and_applies_the_rest(tmp_path):
    saved = FinetuneConfig("repeat", lr=1e-3, max_updates=5)
    with pytest.raises(ValueError, match=r"--seed 3 \(the run has 0\)"):
        runs.resumed(saved, {"seed": 3, "max_updates": 9}, LM_IDENTITY)
    again = runs.resumed(saved, {"lr": 0.5, "max_updates": 9}, LM_IDENTITY)
    assert (again.max_updates, again.lr) == (9, 0.5)  # the rate may change (a stopped wreck)


def test_a_schema_naming_a_column_it_does_not_have_is_refused():
    with pytest.raises(ValueError, match="does not have: \\['reward'\\]"):
        dataclasses.replace(FINETUNE, score="reward")


# -- the bookkeeping around both loops, written once ----------------------------------------

_SHARED = {"restore", "already_solved", "start", "evaluating", "clock", "log", "checkpoint"}
_SHARED |= {"close", "outcome", "out_dir"}  # the pieces a trainer's _Run must not write again


@pytest.mark.parametrize("trainer", ["reinforce", "lm"])
def test_both_trainers_keep_their_books_with_the_run_layers_bookkeeping(trainer):
    """Each ``_Run`` adds its own (envs and agent; task and model) and writes none of the rest."""
    import importlib

    run = importlib.import_module(f"eligibility.{trainer}.trainer")._Run
    assert issubclass(run, runs.Bookkeeping)
    assert run.SCHEMA is {"reinforce": TRAIN, "lm": FINETUNE}[trainer]
    assert not _SHARED & set(vars(run)), "a shared piece written again"
    shared = {f.name for f in dataclasses.fields(runs.Bookkeeping)}
    assert not shared & set(run.__annotations__), "a shared field declared again"


@dataclasses.dataclass
class _RunConfig(_Config):
    progress: bool = False


@dataclasses.dataclass(kw_only=True)
class _Books(runs.Bookkeeping):
    SCHEMA = TRAIN
    w: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))

    def state(self) -> dict[str, Any]:
        return {"policy.w": self.w}


def _books(stack, path, resume=False) -> _Books:
    config = _RunConfig(str(path))
    files = stack.enter_context(runs.RunDir.open(config, TRAIN, frozenset({"seed"}), resume=resume))
    return _Books(
        config=config,
        target=0.5,
        t_start=0.0,
        stack=stack,
        stop=runs.Stop(),
        files=files,
        train_state=runs.TrainState(
            counters={"updates": 0, "env_steps": 0}, rngs=[np.random.default_rng(1)]
        ),
    )


@pytest.mark.curve
def test_the_bookkeeping_logs_checkpoints_goes_back_and_resumes(tmp_path):
    import contextlib

    with contextlib.ExitStack() as stack:
        books = _books(stack, tmp_path / "run")
        books.start("demo", None)
        for i in (1, 2):
            books.counters.update(updates=i, env_steps=10 * i)
            books.w = books.w + 1
            books.log(_row(TRAIN, i), 0.0, checkpoint=i == 1)
            books.mark_completed()
        drawn = books.rngs[0].random()
        books.counters.update(updates=3, env_steps=35)  # an update a stop cuts short
        books.go_back()
        assert books.counters == {"updates": 2, "env_steps": 20}
        assert books.rngs[0].random() == drawn  # the draws replay
        assert books.already_solved() == 0.5  # the last evaluation (update 1's) met 0.5
        with books.evaluating():
            pass
        outcome = books.outcome(True, 0.5)
        assert outcome["steps"] == 20 and outcome["updates"] == 2 and outcome["solved"]
        assert outcome["out_dir"] == tmp_path / "run" and outcome["history"] == books.history
        assert (
            0 < outcome["eval_wall_s"] < outcome["wall_s"] and books.train_state.checkpointed == 1
        )
        books.close()
    assert (tmp_path / "run" / "learning_curve.png").is_file()
    with contextlib.ExitStack() as stack:  # the checkpoint holds update 1: resumed there
        books = _books(stack, tmp_path / "run", resume=True)
        tensors = books.restore({"policy.w": np.zeros(3)})
        assert books.counters == {"updates": 1, "env_steps": 10}
        assert books.train_state.checkpointed == 1
        assert np.array_equal(tensors["policy.w"], np.ones(3))
        assert [r["update"] for r in books.history] == [1]


# -- a result in the words of its trainer ---------------------------------------------------

WORDS = {
    "eligibility.reinforce.trainer:TrainResult": {
        "env_steps": "steps",
        "episodes": "samples",
        "final_eval_return": "final_eval",
        "target_return": "target",
    },
    "eligibility.lm.metrics:FinetuneResult": {
        "tokens": "steps",
        "completions": "samples",
        "greedy_accuracy": "final_eval",
        "target_accuracy": "target",
        # train's words, kept for code written against them
        "env_steps": "steps",
        "episodes": "samples",
        "final_eval_return": "final_eval",
        "target_return": "target",
    },
}


@pytest.mark.parametrize("path", WORDS)
def test_each_trainers_result_names_the_run_layers_fields_in_its_own_words(path):
    """The run layer's result speaks no trainer's words (a fine-tune's target is an accuracy,
    not a return); each trainer's result reads and sets its fields under its own names."""
    import importlib

    mod, _, name = path.partition(":")
    cls = getattr(importlib.import_module(mod), name)
    words = {w for ws in WORDS.values() for w in ws}
    assert not {f.name for f in dataclasses.fields(runs.RunResult)} & words
    neutral = {"steps": 120, "samples": 8, "final_eval": 0.75, "target": 0.7}
    result = cls(
        solved=True, updates=2, wall_s=1.0, eval_wall_s=0.5, out_dir=None, **neutral
    )  # fmt: skip
    for word, field_name in WORDS[path].items():
        assert getattr(result, word) == neutral[field_name], word
    for k, (word, field_name) in enumerate(WORDS[path].items()):
        setattr(result, word, k)
        assert getattr(result, field_name) == k, word


# -- what a fine-tuning run says, in the words of its field ---------------------------------


def test_finetune_logs_rewards_accuracies_and_tokens_and_shows_accuracy_to_three_places(
    tmp_path, capsys
):
    """Bug: the progress printed the greedy accuracy to one decimal (0.95 as "0.9" or "1.0")."""
    from eligibility.lm import finetune

    out = tmp_path / "run"
    config = FinetuneConfig(
        "repeat",
        max_updates=2,
        eval_every=2,
        d_model=8,
        n_head=2,
        group_size=2,
        prompts_per_batch=1,
        target_accuracy=None,
        out=str(out),
    )
    result = finetune(config)
    err = capsys.readouterr().err
    assert tuple(result.history[0]) == FINETUNE.columns
    assert all(0 <= r["frac_reward_zero_std"] <= 1 for r in result.history)
    assert tuple(runs.read_metrics(out)[0]) == FINETUNE.columns
    assert result.tokens == result.history[-1]["tokens"] == result.env_steps
    assert result.completions == result.history[-1]["completions"] == 4
    row = result.history[-1]  # evaluated: printed whatever the time since the last line
    assert f"tokens {row['tokens']}" in err and f"accuracy {row['accuracy']:.3f}" in err
    assert f"eval accuracy {row['eval_accuracy']:.3f}" in err


def test_the_progress_line_shows_the_last_batch_and_the_last_held_out_accuracy():
    """Bug: its "reward" was the running mean of 256 rewards (0.062, 0.031, 0.021 … = 0.0625/n
    after one lucky batch), which hides a collapse; the held-out accuracy showed only on the
    update that evaluated."""
    row = dict.fromkeys(FINETUNE.columns)
    row.update(completions=16, mean_reward=0.0, accuracy=0.0, tokens_per_s=50.0, kl=3.2)
    line = FINETUNE.info({**row, "last_eval_accuracy": 0.5}, 0.9)
    assert "reward 0.000" in line and "eval accuracy 0.500" in line and "kl 3.2" in line
    assert "eval accuracy" not in FINETUNE.info({**row, "last_eval_accuracy": None}, 0.9)


def test_the_progress_line_estimates_the_time_left_from_the_updates_so_far(monkeypatch, capsys):
    """91.4: nothing said how long a run takes. The line estimates the time left at the pace
    of the updates since the display started: 2 of a budget of 10 (a run resumed at update 0)
    in 10 s is 5 s an update, 8 left: 40 s; none before the first update."""
    from eligibility.runs import progress

    clock = iter([0.0, 10.0, 11.0])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    shown = progress.Progress("task", None, 0, FINETUNE, budget=("update", 0, 10))
    row = dict.fromkeys(FINETUNE.columns)
    row.update(update=2, tokens=40, completions=16, mean_reward=0.0, accuracy=0.0,
               tokens_per_s=50.0, eval_accuracy=0.5)  # fmt: skip
    shown.update(row, 0.0)
    assert capsys.readouterr().err.startswith("update 2/10  ~40 s left  accuracy 0.000")
    assert progress.left(0, 10, 3.0) is None and progress.left(3, 0, 9.0) == 0.0
    assert [progress.duration(s) for s in (7.4, 125.0, 7260.0)] == ["7 s", "2 min 05 s",
                                                                     "2 h 01 min"]  # fmt: skip


def _finetune_row(update: int) -> dict:
    row = dict.fromkeys(FINETUNE.columns)
    row.update(update=update, tokens=40 * update, completions=16 * update, mean_reward=0.25,
               accuracy=0.5, kl=0.0123, tokens_per_s=50.0, eval_accuracy=None)  # fmt: skip
    return {**row, "last_eval_accuracy": 0.75}


@pytest.mark.parametrize("bounded", [False, True])
def test_at_80_columns_the_bar_keeps_the_update_the_time_left_and_the_accuracy(
    monkeypatch, bounded
):
    """91: at 80 columns the line was cut with "…" where "~T left" stood, and the bar read
    "0/? tokens" of a run of a known number of updates; a run that stops at its target said its
    budget as a forecast ("~4 min 08 s left" of a run solved 3.5 s in). Rich itself renders the
    bar here, on a terminal 80 columns wide."""
    import io

    from rich.console import Console

    from eligibility.runs import progress

    screen = io.StringIO()
    console = Console(file=screen, width=80, force_terminal=True, color_system=None)
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.setattr("eligibility._output.stderr_console", lambda **kw: console)
    clock = iter([0.0, 10.0, 20.0])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    shown = progress.Progress("finetune my_rewards.py:judged", None, 0, FINETUNE,
                              budget=("update", 0, 400), bounded=bounded)  # fmt: skip
    shown.update(_finetune_row(4), 0.0)
    shown.close()
    import re

    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())  # the cursor's moves
    lines = [x.rstrip() for x in text.replace("\r", "\n").splitlines() if x.strip()]
    last = lines[-1]
    assert len(last) <= 80, last
    assert "update 4/400" in last and "accuracy 0.500" in last, last
    assert ("≤ 16 min 30 s left" if bounded else "~16 min 30 s left") in last, last
    assert "?" not in last and "…" not in last.partition("update")[2], last  # the name cut


def test_a_word_from_inside_an_update_is_a_line_only_after_a_quiet_while(monkeypatch, capsys):
    """90: an update of episodes that never end printed nothing for minutes. A word from inside
    the update (its turn) is a line once the display has been quiet for QUIET_S seconds; none
    sooner, so that quick updates print nothing more."""
    from eligibility.runs import progress

    shown = progress.Progress("task", None, 0, FINETUNE)  # stderr is not a terminal here
    shown.during("update 1: turn 1 of at most 500, 16 of 16 episodes playing")
    monkeypatch.setattr(progress, "QUIET_S", 0.0)
    shown.during("update 1: turn 2 of at most 500, 16 of 16 episodes playing")
    assert capsys.readouterr().err == (
        "update 1: turn 2 of at most 500, 16 of 16 episodes playing\n"
    )


def test_no_option_shows_an_empty_default_in_help(capsys):
    """Bug: ``finetune --help`` showed ``--completion-chars … (default: )``."""
    from eligibility.cli import COMMANDS, main

    for command in COMMANDS:
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out = capsys.readouterr().out
        assert "(default: )" not in " ".join(out.split()), command


def test_a_finetune_sweeps_pictures_speak_of_rewards_accuracies_and_tokens(tmp_path, monkeypatch):
    from eligibility.sweep import plots
    from eligibility.trainers import TRAINERS

    assert TRAINERS["finetune"].load("schema") is FINETUNE
    assert TRAINERS["reinforce"].load("schema") is TRAIN
    labels = []

    def keep(fig, path, **kw):
        labels.append(fig.axes[0].get_xlabel() + " | " + fig.axes[0].get_ylabel())

    monkeypatch.setattr(plots, "save_figure", keep)
    run = {
        "curve": {"env_steps": [10, 20], "mean_return": [0.1, 0.4]},
        "final_eval_return": 0.5,
        "steps_to_target": 20,
        "budget": 40,
    }
    summary = {"a": {"steps_to_target": {"iqm": 20.0, "iqm_ci": [10.0, 30.0]}}}
    plots.curves({"a": [run]}, tmp_path / "c.png", FINETUNE)
    plots.profile({"a": [run]}, tmp_path / "p.png", FINETUNE)
    plots.steps_to_solve(summary, {"a": [run]}, tmp_path / "s.png", FINETUNE)
    words = " ".join(labels)
    assert "reward" in words and "greedy accuracy" in words and "completion tokens" in words
    assert "return" not in words and "environment" not in words and "env steps" not in words


def test_the_interrupted_line_names_the_signal_and_the_resume_command(tmp_path):
    import signal

    stop = runs.Interrupted(signal.SIGTERM, tmp_path / "run")
    line = runs.interrupted_line("finetune", stop)
    assert line == (
        f"interrupted (SIGTERM); checkpoint written; resume with: eligibility finetune --resume "
        f"{tmp_path / 'run'}"
    )


def test_the_zero_spread_fraction_is_a_plain_loop_over_the_groups():
    """TRL's ``frac_reward_zero_std``: groups whose G rewards are all equal, over all groups."""
    torch = pytest.importorskip("torch")
    from eligibility.lm.metrics import frac_zero_std

    rng = np.random.default_rng(0)
    for group_size in (2, 3, 8):
        for _ in range(20):
            groups = rng.integers(0, 3, size=(5, group_size)) * 0.5  # {0, 0.5, 1}: ties
            groups[rng.random(5) < 0.4] = 0.5  # some groups all equal
            want = sum(len(set(g.tolist())) == 1 for g in groups) / len(groups)
            got = frac_zero_std(torch.tensor(groups.reshape(-1)), group_size)
            assert got == want


def test_an_overwrite_removes_every_file_a_run_writes_episodes_included(tmp_path):
    """``--overwrite`` left an earlier run's ``episodes.jsonl`` beside the new run's files
    (and a failed new run's directory, holding it, was not removed)."""
    path = tmp_path / "run"
    _write_run(path, FINETUNE)
    (path / "episodes.jsonl").write_text('{"update": 1}\n')
    (path / "mine.txt").write_text("the user's own")
    with runs.RunDir.open(_Config(str(path)), FINETUNE, frozenset({"seed"}), overwrite=True):
        assert not (path / "episodes.jsonl").exists() and not (path / runs.CHECKPOINT).exists()
    assert (path / "mine.txt").read_text() == "the user's own"


def test_out_a_dangling_symlink_is_said_so_not_called_a_file(tmp_path):
    """90: ``--out`` a symbolic link to nothing was called "a file"; it is said what it is, for
    a run, a sweep and a figure, and nothing is made at its target."""
    from eligibility._io import figure_file
    from eligibility.sweep.run import _open_sweep_dir

    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    words = f"is a symbolic link to {tmp_path / 'nowhere'}, which does not exist"
    with pytest.raises(ValueError, match="give a directory") as err:
        runs.RunDir.open(_Config(str(link)), TRAIN, frozenset({"seed"}))
    assert words in str(err.value)
    with pytest.raises(ValueError, match=words):
        _open_sweep_dir(link, None)
    picture = tmp_path / "c.png"
    picture.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"c\.png is a symbolic link to"):
        figure_file(picture, option="--plot")
    assert not (tmp_path / "nowhere").exists()
