"""A turn's tool calls of every episode run at once in the worlds' worker (``--max-env-workers``):
the calls overlap (structurally: a barrier four calls must reach together), at most the bound
run at once, 1 is one call after another; the answers, the episodes and a run's rows are those
of the calls made one after another; a call that raises, hangs or exits is said as it is said
one at a time, the first in the episodes' order; a stop during the calls is answered at once."""

from __future__ import annotations

import itertools
import json
import textwrap
import threading

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import test_episodes_tools  # noqa: E402
from _scripted_replies import scripted  # noqa: E402
from eligibility._signals import Interrupted, stop_on_signals  # noqa: E402
from eligibility.lm.edge.hf import tool_schema  # noqa: E402
from eligibility.lm.episodes.chat import Call  # noqa: E402
from eligibility.lm.episodes.toolbox import Toolbox  # noqa: E402
from lm_user import hf_kit  # noqa: E402

ENV = textwrap.dedent(
    '''
    import os, sys, threading, time
    from pathlib import Path

    _met = threading.Barrier(4)
    _lock = threading.Lock()
    _running = [0, 0]  # the calls of stamp running now, the most at once
    _made = [0]  # the calls of Meter.increment in this worker

    def _armed():
        """Past the calls the .armed file beside it counts: say so (.started), then sleep."""
        armed = Path(__file__).with_suffix(".armed")
        with _lock:
            _made[0] += 1
            if not armed.exists() or _made[0] <= int(armed.read_text()):
                return
        Path(__file__).with_suffix(".started").touch()
        time.sleep(600)

    class Meter:
        """A counter of its own for each episode: its calls depend on nothing else."""

        def reset(self, start=0, **kwargs):
            self.n = int(start)

        def increment(self, a: int) -> int:
            """Increment the counter.

            Args:
                a: The value to add.
            """
            _armed()
            self.n += int(a)
            return self.n

        def get_reward(self) -> float:
            return float(self.n == 3)

    def meet(x: int) -> str:
        """Wait until four calls have begun; when this one began and ended.

        Args:
            x: Anything.
        """
        began = time.monotonic()
        _met.wait(timeout=20)
        return f"{began} {time.monotonic()}"

    def stamp(x: int) -> str:
        """When this call began and ended, and the most calls running at once so far.

        Args:
            x: Anything.
        """
        with _lock:
            _running[0] += 1
            _running[1] = max(_running)
        began = time.monotonic()
        time.sleep(0.05)
        ended = time.monotonic()
        with _lock:
            _running[0] -= 1
        return f"{began} {ended} {_running[1]}"

    def ping(x: int) -> str:
        """Answer pong.

        Args:
            x: Anything.
        """
        return f"pong {x}"

    def leave_with(x: int) -> int:
        """Exit with status x.

        Args:
            x: The exit status.
        """
        sys.exit(x)

    def die(x: int) -> int:
        """End the process.

        Args:
            x: The exit status.
        """
        os._exit(x)

    def slow(x: int) -> int:
        """Say it started (a file beside it), then sleep.

        Args:
            x: Anything.
        """
        Path(__file__).with_suffix(".started").touch()
        time.sleep(600)
    '''
)

TOOLS = ("meet", "stamp", "ping", "boom", "hang", "leave_with", "die", "slow")


@pytest.fixture
def env_file(tmp_path):
    """These tools, and ``boom`` and ``hang`` of ``tests/test_episodes_tools.py``'s."""
    path = tmp_path / "at_once_env.py"
    path.write_text(ENV + test_episodes_tools.ENV)
    return path


def _box(env_file, workers, timeout=30.0):
    tools = [f"{env_file}:{t}" for t in TOOLS]
    return Toolbox(tools, None, timeout=timeout, schema=tool_schema, workers=workers).start()


def _each(box, name, n=4):
    """Episode i of ``n`` (each its handle) calls ``name(x=i)`` once: each one's answer."""
    handles = [box.open({})[0] for _ in range(n)]
    return [a for (a,) in box.calls([[(h, Call(name, {"x": i}))] for i, h in enumerate(handles)])]


def _times(answers):
    return [tuple(float(v) for v in text.split()) for text, failed in answers if not failed]


def test_four_episodes_calls_run_at_once(env_file):
    """Four episodes' calls of a turn all begin before any ends: each waits at a barrier of
    four, which no call passes unless all four run at once (not a timing: the order)."""
    box = _box(env_file, None)
    try:
        answers = _each(box, "meet")
    finally:
        box.close()
    assert [failed for _, failed in answers] == [False] * 4, answers
    times = _times(answers)
    assert max(b for b, _ in times) < min(e for _, e in times)


@pytest.mark.parametrize("workers", [1, 2])
def test_at_most_the_bound_run_at_once_and_one_is_one_after_another(env_file, workers):
    box = _box(env_file, workers)
    try:
        times = _times(_each(box, "stamp"))
    finally:
        box.close()
    assert len(times) == 4 and max(most for *_, most in times) <= workers
    if workers == 1:  # each call ends before the next begins, in the episodes' order
        assert all(e <= b for (_, e, _), (b, _, _) in itertools.pairwise(times))


def test_a_raising_or_hanging_call_among_others_is_the_failed_call_it_is_alone(env_file):
    """A tool that raises, and one past --tool-timeout, among calls made at once: each episode's
    answer is the one it gets one call after another (an episode of two calls keeps its order)."""
    names = [["ping"], ["boom", "ping"], ["hang"], ["ping", "ping"]]

    def answered(workers):
        box = _box(env_file, workers, timeout=0.3)
        try:
            handles = [box.open({})[0] for _ in names]
            turn = [[(h, Call(t, {"x": 10 * i + k})) for k, t in enumerate(ts)]
                    for i, (h, ts) in enumerate(zip(handles, names, strict=True))]  # fmt: skip
            return box.calls(turn)
        finally:
            box.close()

    at_once = answered(None)
    assert at_once == answered(1)
    assert at_once[1][0] == ("{'error': 'boom'}", True) and at_once[1][1] == ("pong 11", False)
    assert at_once[2][0][1] and "did not return within 0.3 s" in at_once[2][0][0]


@pytest.mark.parametrize(
    ("names", "words"),
    [
        # the first in the episodes' order: episode 1's status, not episode 3's
        (
            ["ping", "leave_with", "ping", "leave_with"],
            "calling leave_with: the user's code called sys.exit(1)",
        ),
        # a call that ends the worker: which of those at once did is not known, so both end it
        # alike here (each with status 7); the line names the turn's calls
        (["die", "die"], "calling die: the user's code ended the process (exit status 7)"),
    ],
)
def test_a_call_that_exits_is_one_line_as_one_at_a_time(env_file, names, words):
    said = []
    for workers in (None, 1):
        box = _box(env_file, workers)
        try:
            handles = [box.open({})[0] for _ in names]
            with pytest.raises(ValueError) as err:
                box.calls(
                    [
                        [(h, Call(t, {"x": 7 if t == "die" else i}))]
                        for i, (h, t) in enumerate(zip(handles, names, strict=True))
                    ]
                )
        finally:
            box.close()
        said.append(str(err.value))
    assert said[0] == said[1] and said[0].startswith(words) and "\n" not in said[0], said


def test_a_stop_during_calls_made_at_once_is_answered_at_once(env_file):
    """A stop that comes while four episodes' calls sleep (under --tool-timeout 300) ends the
    wait: the worker closed, Interrupted raised (the run checkpoints, as for one call)."""
    started = env_file.with_suffix(".started")
    with stop_on_signals(install=False) as stop:
        box = _box(env_file, None, timeout=300)

        def stop_once_started():
            while not started.exists():
                threading.Event().wait(0.05)
            stop.set()

        threading.Thread(target=stop_once_started, daemon=True).start()
        try:
            with pytest.raises(Interrupted):
                _each(box, "slow")
        finally:
            box.close()


# -- the episodes and a run's rows: the replies scripted, the worlds real ----------------------


ROWS = [{"prompt": [{"role": "user", "content": f"Reach {k}"}], "start": k} for k in (1, 2)]


def test_a_turns_calls_at_once_play_the_episodes_of_one_after_another(env_file, monkeypatch):
    """Eight episodes (each its own counter, odd ones calling twice a reply) played with their
    calls at once and one after another: every row of the batch is the same."""
    from eligibility.lm.episodes.tools import tool_task
    from eligibility.lm.tasks import Task

    play, tok = scripted(monkeypatch), hf_kit.tool_tokenizer()
    base = Task("tools", (), (), lambda i, c, e: 0.0, max_completion_length=64,
                eos_id=tok.eos_token_id, n_tokens=len(tok), tokenizer=tok)  # fmt: skip
    batches = []
    for workers in (None, 1):
        box = Toolbox((), f"{env_file}:Meter", timeout=30, schema=tool_schema, workers=workers)
        try:
            task = tool_task(base, ROWS, box.start(), max_tool_calls=2)
            batches.append(play.play(None, task, [0, 1] * 4, t_max=64))
        finally:
            box.close()
    a, b = batches
    assert a.tool_calls.tolist() == [1, 2] * 4 and a.tool_failures.sum() == 0
    counted = [(1, 2)[j % 2] + sum(j % 3 + k for k in range(1 + j % 2)) for j in range(8)]
    assert a.returns.tolist() == [float(n == 3) for n in counted]  # each episode's own counter
    for name in ("prompt_ids", "completion_ids", "completion_mask", "returns", "turns"):
        assert torch.equal(torch.as_tensor(getattr(a, name)), torch.as_tensor(getattr(b, name)))


CLOCK = ("wall_s", "tokens_per_s")  # and time/*: what two runs may differ in


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:at update")  # the scripted replies' log-probs are not π's
def test_a_runs_rows_with_calls_at_once_are_those_of_one_after_another(env_file, tmp_path,
                                                                       monkeypatch):  # fmt: skip
    """``finetune --max-env-workers`` none and 1 on the tiny tool model, its episodes' replies
    scripted: every row of metrics.csv but the clock's is the same."""
    import csv

    from eligibility.lm import FinetuneConfig, finetune

    scripted(monkeypatch)
    model = hf_kit.tool_model_dir(tmp_path / "model")
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    learned = []
    for workers in (None, 1):
        out = tmp_path / f"run-{workers}"
        config = FinetuneConfig(task="zero", prompts=str(tmp_path / "rows.jsonl"),
                                model=str(model), environment_factory=f"{env_file}:Meter",
                                max_env_workers=workers, group_size=4, prompts_per_batch=2,
                                max_completion_length=64, max_updates=2, eval_every=0,
                                target_accuracy=None, progress=False, out=str(out))  # fmt: skip
        finetune(config)
        with (out / "metrics.csv").open() as f:
            rows = list(csv.DictReader(f))
        learned.append([{k: v for k, v in r.items() if k not in CLOCK and "time/" not in k}
                        for r in rows])  # fmt: skip
    assert len(learned[0]) == 2 and float(learned[0][0]["tool_calls"]) > 1
    assert learned[0] == learned[1]


@pytest.mark.slow
def test_ctrl_c_during_a_turns_calls_checkpoints_and_the_run_resumes(env_file, tmp_path):
    """``finetune`` from the command line, its replies scripted: Ctrl-C while update 2's calls
    sleep (under --tool-timeout 300) ends the run at once with its line and 130, update 1's
    checkpoint kept; ``--resume`` plays update 2 again to the end."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    here = Path(__file__).parent
    model = hf_kit.tool_model_dir(tmp_path / "model")
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    env_file.with_suffix(".armed").write_text("3")  # update 1 makes 3 calls (episodes 0, 1)
    out = tmp_path / "run"
    argv = [sys.executable, str(here / "_scripted_replies.py"), "finetune", "zero",
            "--prompts", str(tmp_path / "rows.jsonl"), "--model", str(model),
            "--env", f"{env_file}:Meter", "--tool-timeout", "300", "--max-updates", "2",
            "--group-size", "2", "--prompts-per-batch", "1", "--max-completion-length", "64",
            "--eval-every", "0", "--checkpoint-every", "1", "--no-progress",
            "--target-accuracy", "none", "--out", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env)  # fmt: skip
    started, t0 = env_file.with_suffix(".started"), time.monotonic()
    while not started.exists() and run.poll() is None and time.monotonic() - t0 < 240:
        time.sleep(0.05)
    assert started.exists(), run.communicate(timeout=60)[1]
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=150)  # a hang guard: the calls sleep 600 s
    assert run.returncode == 130 and "Traceback" not in err, err
    assert f"checkpoint written; resume with: eligibility finetune --resume {out}" in err, err
    env_file.with_suffix(".armed").unlink()
    again = [*argv[:3], "--resume", str(out), "--no-progress"]
    resumed = subprocess.run(again, capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    rows = (out / "metrics.csv").read_text().splitlines()
    assert len(rows) == 3  # the header, updates 1 and 2


@pytest.mark.slow
def test_the_sampler_makes_the_calls_at_once_and_the_rows_are_those_of_one_after_another(
    env_file, tmp_path
):
    """``--max-staleness 1``: the sampler, a process of its own, plays the scripted episodes and
    makes their calls at once (none) or one after another (1): the learned rows are the same."""
    import csv
    import os
    import subprocess
    import sys
    from pathlib import Path

    site = tmp_path / "site"  # every process of the run scripted: the sampler's too
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import _scripted_replies\n_scripted_replies.scripted()\n"
    )
    model = hf_kit.tool_model_dir(tmp_path / "model")
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(site), *(p for p in sys.path if p)])}  # fmt: skip
    learned = []
    for workers in ("none", "1"):
        out = tmp_path / f"run-{workers}"
        argv = [sys.executable, "-m", "eligibility", "finetune", "zero",
                "--prompts", str(tmp_path / "rows.jsonl"), "--model", str(model),
                "--env", f"{env_file}:Meter", "--max-env-workers", workers,
                "--max-staleness", "1", "--importance-sampling", "exact",
                "--max-updates", "3", "--group-size", "4", "--prompts-per-batch", "2",
                "--max-completion-length", "64", "--eval-every", "0", "--no-progress",
                "--target-accuracy", "none", "--out", str(out)]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr
        with (out / "metrics.csv").open() as f:
            rows = list(csv.DictReader(f))
        learned.append([{k: v for k, v in r.items() if k not in CLOCK and "time/" not in k}
                        for r in rows])  # fmt: skip
    assert [r["async/staleness"] for r in learned[0]] == ["0", "1", "1"]
    assert all(float(r["tool_calls"]) > 1 for r in learned[0])  # every update made calls
    assert learned[0] == learned[1]


@pytest.mark.parametrize(("value", "words"), [("0", "must be >= 1 or none"), ("x", "invalid int")])
def test_a_bound_below_one_is_one_line_exit_2_and_no_run(tmp_path, capsys, value, words):
    """``--max-env-workers 0`` (or not a number): one line on stderr, exit 2, no traceback, and
    no run directory made."""
    from eligibility.cli import main

    out = tmp_path / "run"
    try:
        code = main(["finetune", "repeat", "--max-env-workers", value, "--out", str(out)])
    except SystemExit as stop:  # argparse's own refusal
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert words in err and "Traceback" not in err and not out.exists()
