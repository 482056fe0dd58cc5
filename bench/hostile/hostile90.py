"""Issue 90's hostile groups not yet driven, each case a process of the command line, judged.

    python bench/hostile/hostile90.py --jobs 2 --markdown /tmp/hostile90.md [--only GROUP]

Each case runs ``python -m eligibility …`` (this checkout's ``src``) in a directory of its own
under a temporary home, with a deadline (a hang is a case that outlives it), and is judged:

- ``traceback``: a Python traceback on stderr (every refusal must be one line);
- ``hang``: the process outlived its deadline;
- the case's own check (a wrong value, a history lost: metrics.csv's rows not 1..N, a resume
  refused) says what it found, or nothing.

A case that passes all three is ``clean``. Groups (issue 90's list): ``tools`` (async tools with
``--tool-timeout`` and the turn and call bounds at their extremes, ``--reward-timeout`` beside
them), ``signals`` (SIGINT and SIGTERM at each phase of a run, then ``--resume``), ``python``
(a run made from Python continued, evaluated and exported from the command line in another
directory), ``importance`` (``--importance-sampling auto`` saved, resumed, changed), ``check``
(``check --framework … --family episodes`` given garbage configurations) and ``ranks``
(``ELIGIBILITY_RANK_TIMEOUT`` given garbage). The table it prints is the record's
(``docs/measurements/hostile.md``); ``tests/test_hostile_90.py`` runs each case as a test.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
TESTS = ROOT / "tests"

REWARD = '''
import os, signal

CALLS = [0]


def zero(completions, **kwargs):
    return [0.0] * len(completions)


def odd(completions, **kwargs):
    return [float(len(str(c)) % 2) for c in completions]


def signalling(completions, **kwargs):
    """Sends $HOSTILE_SIG to the run at its reward call $HOSTILE_AT (call1: the first batch's)."""
    CALLS[0] += 1
    at, name = os.environ.get("HOSTILE_AT", ""), os.environ.get("HOSTILE_SIG", "SIGTERM")
    if at == f"call{CALLS[0]}":
        os.kill(os.getppid(), getattr(signal, name))
    return [0.0] * len(completions)
'''

ENV = '''
import asyncio, os, signal, time


RESETS = [0]


class Counter:
    def reset(self, start=0, **kwargs):
        RESETS[0] += 1
        if os.environ.get("HOSTILE_AT") == "reset" and RESETS[0] == 3:  # update 2's first
            os.kill(os.getppid(), getattr(signal, os.environ.get("HOSTILE_SIG", "SIGTERM")))
        self.n = start
        return f" (from {start})"

    async def increment(self, a: int) -> int:
        """Increment the counter.

        Args:
            a: The value to add.
        """
        await asyncio.sleep(0)
        if os.environ.get("HOSTILE_AT") == "tool":
            os.kill(os.getppid(), getattr(signal, os.environ.get("HOSTILE_SIG", "SIGTERM")))
        if os.environ.get("HOSTILE_TOOL") == "hang":
            await asyncio.sleep(3600)
        if os.environ.get("HOSTILE_TOOL") == "raise":
            raise RuntimeError("the tool broke")
        self.n += a
        return self.n

    def get_reward(self) -> float:
        return float(self.n == 3)
'''

SETUP_SIGNAL = """
import os, signal
if os.environ.get("HOSTILE_AT") == "setup":
    os.kill(os.getppid(), getattr(signal, os.environ.get("HOSTILE_SIG", "SIGTERM")))


def zero(completions, **kwargs):
    return [0.0] * len(completions)
"""

HOOK = '''
"""Run the command line with a signal sent to this process at the phase $HOSTILE_AT names.

The phase's function is wrapped so that its k-th call first sends $HOSTILE_SIG to the process
itself: the run's own handler answers it while that phase is under way, as a signal from
outside would be at that moment.
"""
import os, signal, sys

at, name = os.environ.get("HOSTILE_AT", ""), os.environ.get("HOSTILE_SIG", "SIGTERM")
PHASES = {  # phase: (module, function, the call that signals)
    "sampling": ("eligibility.lm.episodes.episode_rollout", "play", 2),
    "update": ("eligibility.lm.trainer", "update", 2),
    "evaluation": ("eligibility.lm.episodes.episode_rollout", "evaluate_episodes", 1),
    "checkpoint": ("eligibility.runs.directory", "_save_tensors", 2),
    "export": ("eligibility.lm.edge.hf", "save_cloned", 1),
}
if at in PHASES:
    import importlib

    module, function, k = PHASES[at]
    mod = importlib.import_module(module)
    inner, calls = getattr(mod, function), [0]

    def wrapped(*args, **kwargs):
        calls[0] += 1
        if calls[0] == k:
            os.kill(os.getpid(), getattr(signal, name))
        return inner(*args, **kwargs)

    setattr(mod, function, wrapped)

from eligibility.cli import program

sys.argv[0] = "eligibility"
sys.exit(program())
'''

FROM_PYTHON = """
import sys
sys.path.insert(0, {home!r})
from hostile_rewards import zero
from hostile_env import Counter
from eligibility.lm import FinetuneConfig
from eligibility.lm.trainer import finetune

config = FinetuneConfig("zero", model={model!r}, max_updates=1, group_size=2,
                        prompts_per_batch=1, eval_every=1, max_completion_length=8,
                        target_accuracy=None, progress=False, out={out!r},
                        prompts={prompts!r}, max_tool_calls=1)
finetune(config, reward_funcs=[{reward}], environment_factory=Counter)
"""


@dataclass
class Case:
    """One hostile case: its command lines (run in turn), and what it must leave."""

    group: str
    name: str
    argv: list[list[str]]  # each a command line after ``python -m eligibility``
    env: dict[str, str] = field(default_factory=dict)  # the first command's alone
    check: Callable[[Path, list[subprocess.CompletedProcess]], str] | None = None
    deadline: float = 240.0
    script: str | None = None  # a Python script run first (``python -c``), in the case's dir


@dataclass
class Outcome:
    case: Case
    codes: list[int | None]
    said: str  # the last stderr line of the last command
    problem: str  # "" clean; else traceback, hang, or the check's words
    seconds: float


def _rows(run: Path) -> list[dict[str, str]]:
    if not (run / "metrics.csv").is_file():
        return []
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def whole(run: Path, n: int | None = None) -> str:
    """'' where metrics.csv's rows are updates 1..N (N = ``n`` if given), else what is wrong."""
    numbers = [int(r["update"]) for r in _rows(run)]
    if numbers != list(range(1, len(numbers) + 1)):
        return f"metrics.csv's updates are {numbers}"
    if n is not None and len(numbers) != n:
        return f"metrics.csv holds {len(numbers)} updates, not {n}"
    return ""


def refused(words: str) -> Callable[[Path, list], str]:
    """The last command exits 2 with one error line holding ``words``."""

    def check(run: Path, done: list) -> str:
        last = done[-1]
        errors = [x for x in last.stderr.splitlines() if ": error: " in x]
        if last.returncode != 2:
            return f"exit {last.returncode}, not 2"
        if len(errors) != 1 or words not in errors[0]:
            return f"said {errors!r}, not one line with {words!r}"
        return ""

    return check


def ran(n: int | None = None, *, codes: tuple[int, ...] = (0,)) -> Callable[[Path, list], str]:
    """Every command exits in ``codes``; the run's history whole (``n`` updates)."""

    def check(run: Path, done: list) -> str:
        bad = [d.returncode for d in done if d.returncode not in codes]
        if bad:
            return f"exit {bad[0]}: {(done[-1].stderr.strip().splitlines() or [''])[-1][:160]}"
        return whole(run / "run", n) if (run / "run").exists() else ""

    return check


def stopped_then_resumed(n: int) -> Callable[[Path, list], str]:
    """The first command stopped by its signal (130/143, said), the resume exit 0, and
    metrics.csv's updates 1..n."""

    def check(run: Path, done: list) -> str:
        first, resume = done[0], done[-1]
        if first.returncode not in (130, 143):  # 0: the phase was never reached
            return f"the stopped run exited {first.returncode}"
        if "interrupted" not in first.stderr:
            return f"the stopped run: {first.stderr.strip().splitlines()[-1][:160]}"
        if resume.returncode != 0:
            return f"the resume exited {resume.returncode}: {resume.stderr.strip()[-200:]}"
        return whole(run / "run", n)

    return check


GARBAGE = {
    "no such file": None,
    "an empty file": "",
    "binary bytes": "\x00\xff\xfe garbage",
    "a YAML list": "- 1\n- 2\n",
    "JSON null": "null",
    "a directory": "DIR",
    "keys of nothing": "foo: bar\n",
    "NaN everywhere": "num_generations: .nan\nbeta: .nan\nloss_type: .nan\n",
}
"""``check --config``'s garbage: what each file holds (None: no file; DIR: a directory)."""


def _garbage(home: Path, framework: str, what: str) -> Path:
    return home / f"config-{framework}-{what.replace(' ', '_')}.yaml"


def kept(key: str, value: str, n: int) -> Callable[[Path, list], str]:
    """Every command exits 0, config.json's ``key`` is still ``value``, n updates."""

    def check(run: Path, done: list) -> str:
        said = ran(n)(run, done)
        saved = json.loads((run / "run" / "config.json").read_text()).get(key)
        return said or ("" if saved == value else f"config.json's {key} is now {saved!r}")

    return check


def left_nothing_then_ran(n: int) -> Callable[[Path, list], str]:
    """The first command stopped by its signal before the run was made: it left no run
    directory (or an empty one); the same command again (into ``run2``) runs n updates."""

    def check(run: Path, done: list) -> str:
        first, again = done[0], done[-1]
        if first.returncode not in (130, 143):
            return f"the stopped run exited {first.returncode}"
        left = sorted(p.name for p in (run / "run").iterdir()) if (run / "run").exists() else []
        if left:
            return f"the stopped run left {left}"
        if again.returncode != 0:
            return f"the run again exited {again.returncode}"
        return whole(run / "run2", n)

    return check


def _home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="hostile90."))
    sys.path.insert(0, str(TESTS))
    from lm_user import hf_kit

    hf_kit.tool_model_dir(home / "model")
    (home / "hostile_rewards.py").write_text(REWARD)
    (home / "hostile_env.py").write_text(ENV)
    (home / "hostile_setup.py").write_text(SETUP_SIGNAL)
    (home / "hostile_hook.py").write_text(HOOK)
    rows = [{"prompt": [{"role": "user", "content": f"Reach {k}"}], "start": k} for k in (1, 2)]
    (home / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for framework in ("trl", "verl"):
        for what, text in GARBAGE.items():
            path = _garbage(home, framework, what)
            if text == "DIR":
                path.mkdir()
            elif text is not None:
                path.write_bytes(text.encode("latin-1"))
    return home


def cases(home: Path) -> list[Case]:
    """The cases, by group."""
    model, rows = str(home / "model"), str(home / "rows.jsonl")
    episodes = ["finetune", f"{home}/hostile_rewards.py:zero", "--prompts", rows,
                "--model", model, "--env", f"{home}/hostile_env.py:Counter",
                "--max-updates", "1", "--group-size", "2", "--prompts-per-batch", "1",
                "--max-completion-length", "8", "--target-accuracy", "none", "--no-progress",
                "--out", "run"]  # fmt: skip
    out: list[Case] = []

    # -- tools: async tools, --tool-timeout and the bounds at their extremes ---------------------
    for value, words in [
        ("0", "--tool-timeout"),
        ("-1", "--tool-timeout"),
        ("nan", "--tool-timeout"),
        ("-inf", "--tool-timeout"),
        ("abc", "--tool-timeout"),
        ("", "--tool-timeout"),
    ]:
        out.append(Case("tools", f"--tool-timeout {value!r}",
                        [[*episodes, "--tool-timeout", value]], check=refused(words)))  # fmt: skip
    for value, words in [("inf", "finite"), ("1e308", "at most 1e7 s")]:
        out.append(Case("tools", f"--tool-timeout {value}",
                        [[*episodes, "--tool-timeout", value]], check=refused(words)))  # fmt: skip
    for value in ("1e-3", "0.5"):
        out.append(Case("tools", f"--tool-timeout {value}",
                        [[*episodes, "--tool-timeout", value]], check=ran(1)))  # fmt: skip
    for value in ("0", "-1", "nan", "inf", "abc"):
        out.append(Case("tools", f"--reward-timeout {value}",
                        [[*episodes, "--reward-timeout", value]],
                        check=refused("--reward-timeout")))  # fmt: skip
    for flag, value, check in [
        ("--max-turns", "0", refused("--max-turns")),
        ("--max-turns", "-1", refused("--max-turns")),
        ("--max-turns", "nan", refused("--max-turns")),
        ("--max-turns", "1", ran(1)),
        ("--max-turns", "1000000", ran(1)),
        ("--max-turns", "99999999999999999999", ran(1)),
        ("--max-tool-calls", "-1", refused("--max-tool-calls")),
        ("--max-tool-calls", "0", ran(1)),
        ("--max-tool-calls", "1000000", ran(1)),
        ("--max-tool-calls", "1.5", refused("--max-tool-calls")),
    ]:
        out.append(Case("tools", f"{flag} {value}", [[*episodes, flag, value]], check=check))
    out.append(Case("tools", "an async tool that hangs, --tool-timeout 0.5",
                    [[*episodes, "--tool-timeout", "0.5", "--max-tool-calls", "2"]],
                    env={"HOSTILE_TOOL": "hang"}, check=ran(1)))  # fmt: skip
    out.append(Case("tools", "an async tool that raises",
                    [[*episodes, "--max-tool-calls", "2"]], env={"HOSTILE_TOOL": "raise"},
                    check=ran(1)))  # fmt: skip

    # -- signals: SIGINT and SIGTERM at each phase, then --resume ------------------------------
    signalling = [x if x != f"{home}/hostile_rewards.py:zero" else
                  f"{home}/hostile_rewards.py:signalling" for x in episodes]  # fmt: skip
    longer = [*signalling[: signalling.index("--max-updates")], "--max-updates", "3",
              "--eval-every", "2", "--checkpoint-every", "1",
              *signalling[signalling.index("--group-size"):]]  # fmt: skip
    resume = ["finetune", "--resume", "run", "--max-updates", "3", "--no-progress"]
    phases = {
        "set-up (the reward module's import)": "setup",
        "sampling (update 2's episodes played)": "sampling",
        "sampling (an environment's reset, in the worker)": "reset",
        "a reward call (update 1's batch)": "call1",
        "a reward call (update 2's batch)": "call2",
        "the update (update 2's optimiser step)": "update",
        "the evaluation (after update 2)": "evaluation",
        "the checkpoint's write (update 2's)": "checkpoint",
        "the export of model/ (the run's end)": "export",
    }
    for sig in ("SIGINT", "SIGTERM"):
        for phase, at in phases.items():
            first, then, check = longer, resume, stopped_then_resumed(3)
            if at == "setup":  # nothing to resume: the run left nothing; it starts again
                first = [x if "hostile_rewards.py:signalling" not in x else
                         f"{home}/hostile_setup.py:zero" for x in longer]  # fmt: skip
                then = [x if x != "run" else "run2" for x in first]
                check = left_nothing_then_ran(3)
            out.append(Case("signals", f"{sig} at {phase}", [first, then],
                            env={"HOSTILE_AT": at, "HOSTILE_SIG": sig}, check=check))  # fmt: skip

    # -- python: a run made from Python, continued, evaluated, exported from the CLI elsewhere --
    script = FROM_PYTHON.format(home=str(home), model=model, out="run", prompts=rows,
                                reward="zero")  # fmt: skip
    elsewhere = str(home / "elsewhere")
    out.append(Case("python", "made from Python, resumed from the CLI in another directory",
                    [["finetune", "--resume", "RUN", "--max-updates", "2", "--no-progress"]],
                    script=script, check=ran(2)))  # fmt: skip
    out.append(Case("python", "made from Python, evaluated from the CLI in another directory",
                    [["evaluate", "RUN", "--format", "json"]], script=script,
                    check=ran(1)))  # fmt: skip
    out.append(Case("python", "made from Python, exported from the CLI in another directory",
                    [["export", "RUN", f"{elsewhere}/exported"]], script=script,
                    check=ran(1)))  # fmt: skip
    anonymous = "lambda completions, **kw: [0.0] * len(completions)"
    lam = FROM_PYTHON.format(home=str(home), model=model, out="run", prompts=rows,
                             reward=anonymous)  # fmt: skip
    out.append(Case("python", "a lambda reward from Python, resumed from the CLI",
                    [["finetune", "--resume", "RUN", "--max-updates", "2", "--no-progress"]],
                    script=lam, check=refused("without an importable name")))  # fmt: skip
    relative = f"import shutil; shutil.copy({rows!r}, 'rows.jsonl')\n" + FROM_PYTHON.format(
        home=str(home), model=model, out="run", prompts="rows.jsonl", reward="zero")  # fmt: skip
    out.append(Case("python", "relative --prompts from Python, resumed from another directory",
                    [["finetune", "--resume", "RUN", "--max-updates", "2", "--no-progress"]],
                    script=relative, check=ran(2)))  # fmt: skip

    # -- importance: --importance-sampling auto saved, resumed, changed -------------------------
    tiny = ["finetune", "repeat", "--max-updates", "1", "--group-size", "2",
            "--prompts-per-batch", "2", "--no-progress", "--out", "run"]  # fmt: skip
    again = ["finetune", "--resume", "run", "--max-updates", "2", "--no-progress"]
    out.append(Case("importance", "auto saved and resumed",
                    [[*tiny, "--importance-sampling", "auto"], again],
                    check=ran(2)))  # fmt: skip
    for changed, check in [
        ("none", ran(2)),  # auto resolved to none (float32): the same setting
        ("sequence-mask", refused("--importance-sampling 'sequence-mask' (the run has 'none')")),
        ("token-truncate", refused("--importance-sampling 'token-truncate' (the run has")),
    ]:
        out.append(Case("importance", f"auto saved, resumed with {changed}",
                        [[*tiny, "--importance-sampling", "auto"],
                         [*again, "--importance-sampling", changed]], check=check))  # fmt: skip
    out.append(Case("importance", "auto saved, resumed with garbage",
                    [[*tiny, "--importance-sampling", "auto"],
                     [*again, "--importance-sampling", "sometimes"]],
                    check=refused("--importance-sampling")))  # fmt: skip
    out.append(Case("importance", "sequence-mask saved, resumed with auto (the run's kept)",
                    [[*tiny, "--importance-sampling", "sequence-mask"],
                     [*again, "--importance-sampling", "auto"]],
                    check=kept("importance_sampling", "sequence-mask", 2)))  # fmt: skip

    # -- check: --framework … --family episodes given garbage configurations --------------------
    for framework in ("trl", "verl"):
        for what in GARBAGE:
            path = _garbage(home, framework, what)
            out.append(Case("check", f"--framework {framework} --family episodes, {what}",
                            [["check", "--framework", framework, "--family", "episodes",
                              "--config", str(path)]],
                            check=ran(None, codes=(0, 1, 2)), deadline=600.0))  # fmt: skip

    # -- ranks: ELIGIBILITY_RANK_TIMEOUT given garbage ------------------------------------------
    for value, check in [
        ("", refused("ELIGIBILITY_RANK_TIMEOUT")),
        ("abc", refused("ELIGIBILITY_RANK_TIMEOUT")),
        ("-1", refused("ELIGIBILITY_RANK_TIMEOUT")),
        ("0", refused("ELIGIBILITY_RANK_TIMEOUT")),
        ("nan", refused("ELIGIBILITY_RANK_TIMEOUT")),
        ("inf", refused("ELIGIBILITY_RANK_TIMEOUT")),
        ("1e309", refused("ELIGIBILITY_RANK_TIMEOUT")),
        (" 5 ", ran(1)),
    ]:
        out.append(Case("ranks", f"ELIGIBILITY_RANK_TIMEOUT={value!r}", [tiny],
                        env={"ELIGIBILITY_RANK_TIMEOUT": value}, check=check))  # fmt: skip
    return out


def drive(case: Case, home: Path) -> Outcome:
    """Run ``case`` in a directory of its own; judge it."""
    where = made_in = Path(tempfile.mkdtemp(prefix="case.", dir=home))
    env = {**os.environ, "PYTHONPATH": f"{SRC}:{home}", "OMP_NUM_THREADS": "1"}
    done: list[subprocess.CompletedProcess] = []
    start = time.perf_counter()
    problem = ""
    if case.script is not None:
        made = subprocess.run([sys.executable, "-c", case.script], cwd=where, env=env,
                              capture_output=True, text=True, timeout=case.deadline)  # fmt: skip
        if made.returncode != 0:
            problem = f"the Python run failed: {made.stderr.strip()[-200:]}"
        run_dir = where / "run"
        where = home / "elsewhere" / where.name  # the CLI in another directory
        where.mkdir(parents=True)
        case.argv = [[str(run_dir) if a == "RUN" else a for a in argv] for argv in case.argv]
    for i, argv in enumerate(case.argv if not problem else []):
        given = {**env, **case.env} if i == 0 else env  # a resume is the user's plain command
        try:
            done.append(subprocess.run([sys.executable, str(home / "hostile_hook.py"), *argv],
                                       cwd=where, env=given, capture_output=True, text=True,
                                       timeout=case.deadline))  # fmt: skip
        except subprocess.TimeoutExpired:
            problem = f"hang: past {case.deadline:g} s"
            break
    if not problem and (shown := [d.stderr for d in done if "Traceback" in d.stderr]):
        last = [x for x in shown[0].splitlines() if x.strip()][-1]
        problem = f"traceback ({last.strip()[:120]})"
    if not problem and case.check is not None:
        problem = case.check(made_in, done)
    said = (done[0].stderr.strip().splitlines() or [""])[-1] if done else ""  # the first's
    return Outcome(case, [d.returncode for d in done], said, problem,
                   time.perf_counter() - start)  # fmt: skip


def table(outcomes: list[Outcome]) -> str:
    """The record's table: group, case, exit statuses, what it said (last line), verdict."""
    lines = ["| group | case | exit | what it gave (first command, last stderr line) | verdict |",
             "|---|---|---|---|---|"]  # fmt: skip
    for o in outcomes:
        said = o.said.replace("|", "\\|")[:150]
        verdict = "clean" if not o.problem else o.problem.replace("|", "\\|")[:150]
        codes = ", ".join("-" if c is None else str(c) for c in o.codes)
        lines.append(f"| {o.case.group} | {o.case.name} | {codes} | {said} | {verdict} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Drive every case (or a group's); print the table and the counts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="one group")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    home = _home()
    try:
        chosen = [c for c in cases(home) if args.only in (None, c.group)]
        with ThreadPoolExecutor(args.jobs) as pool:
            outcomes = list(pool.map(lambda c: drive(c, home), chosen))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    text = table(outcomes)
    clean = sum(not o.problem for o in outcomes)
    text += f"\n{clean} of {len(outcomes)} clean\n"
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
