"""`eligibility check` runs the user's function where it cannot take the check down or lie.

Every case runs the real worker process (fork), with bounded time: a loss that calls
backward(), exits, sleeps, allocates without bound, is killed, writes to the parameters or
returns NaN on one problem is an ``error`` verdict (or one line, exit 2) that names what it did,
never exit 0 and never an internal traceback; the caller's random streams are untouched.
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.distributions import Categorical

from eligibility.check import check
from eligibility.check.family import Draw, Trial
from eligibility.check.run import CheckConfig, _verdict
from eligibility.cli import main

FAST = {"problem": "bandit", "samples": 30}
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "check"
JSON = ["--format", "json"]
FAST_ARGS = ["--problem", "bandit", "--samples", "30"]


def good(policy, episodes, gamma):
    """Plain REINFORCE (γ = 1 on the chain), one forward pass over the batch."""
    obs = torch.cat([ep.obs for ep in episodes])
    actions = torch.cat([ep.actions for ep in episodes])
    G = torch.cat([ep.rewards.flip(0).cumsum(0).flip(0) for ep in episodes])
    return -(G * Categorical(logits=policy(obs)).log_prob(actions)).sum() / len(episodes)


def only(report):
    (p,) = report.problems
    return p


def test_a_loss_that_calls_backward_is_told_to_return_the_loss():
    def loss(policy, episodes, gamma):
        out = good(policy, episodes, gamma)
        out.backward()
        return out

    p = only(check(loss, **FAST))
    assert p.verdict == "error" and "do not call backward()" in p.error, p.error
    assert "Traceback" not in p.error


@pytest.mark.slow
def test_backward_then_zero_grad_is_told_the_same():
    def loss(policy, episodes, gamma):
        out = good(policy, episodes, gamma)
        out.backward()
        policy.zero_grad()
        return out

    p = only(check(loss, **FAST))
    assert p.verdict == "error" and "do not call backward()" in p.error, p.error


def test_a_loss_that_steps_an_optimiser_is_told_to_leave_the_parameters():
    def loss(policy, episodes, gamma):
        with torch.no_grad():
            for w in policy.parameters():
                w.add_(0.01)
        return good(policy, episodes, gamma)

    p = only(check(loss, **FAST))
    assert p.verdict == "error" and "changed the policy's parameters" in p.error, p.error


ENDINGS = {
    "called sys.exit(0)": lambda: sys.exit(0),
    "ended the process (exit status 0)": lambda: os._exit(0),
    "killed by SIGKILL": lambda: os.kill(os.getpid(), signal.SIGKILL),
}
SLOW = pytest.mark.slow  # the same mechanism as the fast cases; nightly only


@pytest.mark.parametrize(
    "needle",
    [*list(ENDINGS)[:2], pytest.param(list(ENDINGS)[2], marks=SLOW)],
)
def test_a_loss_that_ends_the_process_is_an_error_not_a_verdict(needle):
    def loss(policy, episodes, gamma):
        ENDINGS[needle]()
        return good(policy, episodes, gamma)

    p = only(check(loss, **FAST))
    assert p.verdict == "error" and needle in p.error, p.error


def test_a_loss_that_sleeps_is_stopped_after_the_timeout(tmp_path):
    """The worker stuck in the call is stopped (its process gone and reaped by the time the
    report is back, its sleep never finished) and the error names the timeout and the option
    that sets it. No duration is asserted: a worker waited for instead of stopped would wake
    after its 60 s and leave ``woke`` behind."""
    pid_file, woke = tmp_path / "pid", tmp_path / "woke"

    def loss(policy, episodes, gamma):
        pid_file.write_text(str(os.getpid()))
        time.sleep(60)
        woke.write_text("the call ran to its end")

    p = only(check(loss, timeout=0.2, **FAST))  # the pid is written at once: 0.2 s is ample
    assert p.verdict == "error" and "did not return within 0.2 s (--timeout)" in p.error
    pid = int(pid_file.read_text())
    assert pid != os.getpid()  # the call ran in the worker
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # no such process: killed and reaped, not left sleeping
    assert not woke.exists()


def test_a_loss_that_runs_out_of_memory_is_named():
    def loss(policy, episodes, gamma):
        hoard = torch.ones(2**28)  # 1 GiB, over the 256 MiB allowed
        return good(policy, episodes, gamma) + hoard[0]

    p = only(check(loss, memory=256, **FAST))
    assert p.verdict == "error" and "ran out of memory" in p.error, p.error


def test_the_data_cap_of_a_worker_started_ahead_still_catches_a_runaway_allocation(monkeypatch):
    """Where torch is a CUDA build the cap is on the data segment (CUDA's initialisation maps
    far more address space than a cap leaves): an allocation over it is still named."""
    from eligibility.check import run

    def loss(policy, episodes, gamma):
        hoard = torch.ones(2**28)  # 1 GiB, over the 256 MiB allowed
        return good(policy, episodes, gamma) + hoard[0]

    monkeypatch.setattr(run.isolate, "start_method", lambda plan: "fork")
    p = only(check(loss, memory=256, **FAST))
    assert p.verdict == "error" and "ran out of memory" in p.error, p.error


def test_a_traceback_keeps_the_users_frames_only():
    def loss(policy, episodes, gamma):
        return torch.cat([])  # raises inside torch

    p = only(check(loss, **FAST))
    assert p.verdict == "error" and "in loss" in p.error and "torch.cat([])" in p.error
    assert "eligibility/check" not in p.error and "multiprocessing" not in p.error


def test_the_callers_random_streams_are_left_as_they_were():
    def loss(policy, episodes, gamma):
        torch.manual_seed(123)  # the user's code may reseed too: in the worker only
        return good(policy, episodes, gamma)

    torch.manual_seed(7)
    np.random.seed(7)  # noqa: NPY002
    random.seed(7)
    threads = torch.get_num_threads()
    check(loss, **FAST)
    after = (torch.rand(3), np.random.rand(3), random.random())  # noqa: NPY002
    torch.manual_seed(7)
    np.random.seed(7)  # noqa: NPY002
    random.seed(7)
    assert torch.equal(after[0], torch.rand(3))
    assert np.array_equal(after[1], np.random.rand(3))  # noqa: NPY002
    assert after[2] == random.random()
    assert torch.get_num_threads() == threads


def test_one_tolerance_for_the_verdict_and_max_abs_z():
    """A component with no spread, 1.2e-7 (relative) off its target: before, the verdict's
    tolerance (1e-6) passed it while ``max_abs_z`` (1e-9) said ∞; now both agree (and float
    noise where the truth is 0 is not a bias)."""
    rng = np.random.default_rng(0)
    exact = np.array([1.0, 2.0])
    off = 2.0 + 2.0**-22  # exact in float64: the column's mean is exact, its spread 0
    G = np.column_stack([exact[0] + rng.standard_normal(200), np.full(200, off)])
    trial = Trial(name="t", exact=exact, sigma=np.ones(2), draw=lambda n: Draw(step=None))
    p = _verdict(trial, G, Draw(step=None), CheckConfig(), 200, 0.0)  # type: ignore[arg-type]
    assert p.verdict == "unbiased" and math.isfinite(p.max_abs_z) and p.max_abs_z <= p.threshold
    G[:, 1] = exact[1] + 1e-4  # beyond the tolerance: both say so
    p = _verdict(trial, G, Draw(step=None), CheckConfig(), 200, 0.0)  # type: ignore[arg-type]
    assert p.verdict != "unbiased" and p.max_abs_z > 10 * p.threshold


# -- the command line ----------------------------------------------------------------------------


def _write(tmp_path: Path, body: str) -> str:
    path = tmp_path / "mine.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("out.backward()", "do not call backward()"),
        pytest.param("sys.exit(0)", "called sys.exit(0)", marks=SLOW),
        pytest.param("os._exit(0)", "ended the process", marks=SLOW),
    ],
)
def test_the_cli_never_says_unbiased_for_a_hostile_loss(tmp_path, capsys, body, needle):
    path = _write(
        tmp_path,
        f"""
        import os, sys
        from torch.distributions import Categorical

        def loss(policy, episodes, gamma):
            ep = episodes[0]
            logp = Categorical(logits=policy(ep.obs)).log_prob(ep.actions)
            out = -(ep.rewards.sum() * logp).sum()
            {body}
            return out
        """,
    )
    rc = main(["check", f"{path}:loss", *FAST_ARGS])
    captured = capsys.readouterr()  # one line on stderr naming it, no report
    assert rc == 2 and needle in captured.err and captured.out == "", captured
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1


def test_nan_on_one_problem_is_one_line_naming_it(tmp_path, capsys):
    path = _write(
        tmp_path,
        """
        from torch.distributions import Categorical

        def loss(policy, episodes, gamma):
            ep = episodes[0]
            logp = Categorical(logits=policy(ep.obs)).log_prob(ep.actions)
            out = -(ep.rewards.sum() * logp).sum()
            return out * float("nan") if gamma < 1 else out
        """,
    )
    rc = main(["check", f"{path}:loss", "--problem", "gridworld", "--samples", "30"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error" in line]
    assert rc == 2 and len(lines) == 1 and "returned nan" in lines[0], err
    assert "(call 1) on problem gridworld" in lines[0] and "Traceback" not in err


PRINTS = """
from torch.distributions import Categorical

def loss(policy, episodes, gamma):
    print("debugging output of the user")
    ep = episodes[0]
    G = ep.rewards.flip(0).cumsum(0).flip(0)
    return -(G * Categorical(logits=policy(ep.obs)).log_prob(ep.actions)).sum()
"""


def test_progress_on_stderr_and_only_json_on_stdout(tmp_path, capsys):
    path = _write(tmp_path, PRINTS)
    rc = main(["check", f"{path}:loss", *FAST_ARGS, *JSON])
    captured = capsys.readouterr()
    assert rc == 0 and json.loads(captured.out)["unbiased"] is True
    assert "bandit: 30/30 calls" in captured.err


@pytest.mark.slow
def test_a_subprocess_keeps_the_users_prints_off_stdout(tmp_path):
    """The worker's file descriptor 1 is stderr: a print in the user's loss cannot corrupt the
    JSON on stdout (capsys cannot see a forked process's descriptors, a subprocess can)."""
    path = _write(tmp_path, PRINTS)
    proc = subprocess.run(
        [sys.executable, "-m", "eligibility.cli", "check", f"{path}:loss", *FAST_ARGS, *JSON],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["unbiased"] is True
    assert "bandit: 30/30 calls" in proc.stderr and "debugging output" in proc.stderr


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(
            {"problem": "bandit,chain", "samples": 30},
            marks=pytest.mark.slow,  # fast cover: test_the_calls_made_in_process_give_the_...
        ),
        pytest.param(
            {"sequence": True, "form": "model", "problem": "kl,length", "samples": 30},
            marks=pytest.mark.slow,  # 2 s; fast: the episodic family's, below
        ),
    ],
    ids=["episodic", "sequence"],
)
def test_workers_forked_ahead_give_the_same_report(monkeypatch, options):
    """Where torch sees an accelerator the check forks every worker before its own autograd
    (a process forked after a backward pass cannot run one: a GPU machine's lot); each worker
    then computes its problem's batches itself, from the seeds: the very same gradients.

    Fast cover (the episodic family, the same fields, bit for bit):
    test_the_calls_made_in_process_give_the_workers_report."""
    from eligibility.check import run
    from eligibility.lm.objective import loss as finetune_loss

    def seq(model, batch):
        from eligibility.lm.sample import Completions, token_logps

        mask = batch.completion_mask.long()
        done = torch.ones(len(mask), dtype=torch.bool)
        c = Completions(batch.prompt_ids, torch.ones_like(batch.prompt_ids),
                        batch.completion_ids, mask, batch.old_logps, done)  # fmt: skip
        logps = token_logps(model, c, vocab_size=model.vocab_size)
        return finetune_loss(logps, batch.rewards, mask.bool(), group_size=batch.group_size,
                             baseline="rloo", scale="none", aggregation="sequence-sum",
                             max_completion_length=batch.max_completion_length,
                             kl="reward-to-go", beta=batch.beta,
                             ref_logps=batch.ref_logps[:, : mask.shape[1]])[0]  # fmt: skip

    fn = seq if options.get("sequence") else good
    here = check(fn, **options)
    monkeypatch.setattr(run.isolate, "start_method", lambda plan: "fork")
    ahead = check(fn, **options)
    assert [p.verdict for p in here.problems] == [p.verdict for p in ahead.problems]
    assert all(p.verdict != "error" for p in ahead.problems), [p.error for p in ahead.problems]
    for a, b in zip(here.problems, ahead.problems, strict=True):  # the same N rows, bit for bit
        assert (a.max_abs_z, a.bias_norm, a.noise, a.samples) == (
            b.max_abs_z, b.bias_norm, b.noise, b.samples)  # fmt: skip


def test_the_calls_made_in_process_give_the_workers_report(request, monkeypatch):
    """The suite's statistical tests make the check's calls in process (``conftest``'s
    ``check_calls_in_process``): the same gradients, so the same report, bit for bit; workers
    forked ahead (a CUDA build of torch) keep their calls."""
    from eligibility.check import run

    options = {"problem": "bandit,chain", "samples": 30, "episodes": 2}
    worker = check(good, **options)
    request.getfixturevalue("check_calls_in_process")
    here = check(good, **options)
    monkeypatch.setattr(run.isolate, "start_method", lambda plan: "fork")
    ahead = check(good, **options)
    for a, b, c in zip(worker.problems, here.problems, ahead.problems, strict=True):
        assert (a.verdict, a.diagnosis, a.samples) == (b.verdict, b.diagnosis, b.samples)
        assert (a.max_abs_z, a.scale, a.bias_norm, a.noise, a.variance_ratio) == (
            b.max_abs_z, b.scale, b.bias_norm, b.noise, b.variance_ratio)  # fmt: skip
        assert (c.verdict, c.max_abs_z, c.bias_norm, c.noise, c.samples, c.variance_ratio) == (
            a.verdict, a.max_abs_z, a.bias_norm, a.noise, a.samples, a.variance_ratio)  # fmt: skip
        assert c.verdict != "error", c.error


# -- how the workers start: one decision, held on the CPU ----------------------------------------


def _a_plan():
    from eligibility.check import run

    config = run.CheckConfig(problem="bandit", samples=30)
    return functools.partial(run._drawn, f"{EXAMPLES}/correct.py:loss", "episodic", "bandit",
                             config, 0)  # fmt: skip


@pytest.mark.parametrize(
    "cuda, hip, portable, want",
    [
        (None, None, True, None),  # a CPU build: fork each worker when its problem is checked
        ("12.4", None, True, "spawn"),  # CUDA: a fresh interpreter, whatever CUDA saw here
        (None, "6.2", True, "spawn"),
        ("12.4", None, False, "fork"),  # a closure cannot be sent: forked ahead of autograd
    ],
)
def test_the_start_method_is_never_fork_where_cuda_is_built_and_the_work_can_be_sent(
    monkeypatch, cuda, hip, portable, want
):
    """The failure on a GPU machine: a worker forked from a process that had asked the driver
    anything cannot start CUDA. The build alone decides (asking for devices would itself be the
    touch); torch.cuda's predicates are monkeypatched to say CUDA is initialised here."""
    from eligibility.check import isolate

    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    plan = _a_plan() if portable else (lambda: None)
    assert isolate.start_method(plan) == want


@pytest.mark.slow  # a spawned interpreter imports torch: about 2 s a worker
def test_a_spawned_worker_runs_the_users_loss_end_to_end_and_keeps_it_isolated(monkeypatch):
    """What a CUDA build gets: each worker spawned, the function loaded there from its file; the
    report is the forked one's, and a function that exits, prints or sleeps is still said so."""
    from eligibility.check import isolate, run

    spec = f"{EXAMPLES}/correct.py:loss"
    here = check(spec, problem="bandit,chain", samples=30)
    started = []
    monkeypatch.setattr(run.isolate, "start_method", lambda plan: "spawn")
    real = isolate.forked_ahead
    monkeypatch.setattr(run.isolate, "forked_ahead",
                        lambda *a: started.append(a[2]) or real(*a))  # fmt: skip
    spawned = check(spec, problem="bandit,chain", samples=30)
    assert started == ["spawn", "spawn"]
    for a, b in zip(here.problems, spawned.problems, strict=True):
        assert b.verdict == "unbiased" and (a.max_abs_z, a.bias_norm) == (b.max_abs_z, b.bias_norm)


@pytest.mark.slow  # a spawned interpreter imports torch: about 2 s a worker
def test_a_spawned_worker_still_says_what_the_users_code_did(monkeypatch, tmp_path, capfd):
    from eligibility.check import run

    f = tmp_path / "bad.py"
    f.write_text(
        textwrap.dedent("""
        import sys, time
        def exits(policy, episodes, gamma):
            print("debugging output")
            sys.exit(3)
        def sleeps(policy, episodes, gamma):
            time.sleep(60)
    """)
    )
    monkeypatch.setattr(run.isolate, "start_method", lambda plan: "spawn")
    (p,) = check(f"{f}:exits", **FAST).problems
    assert p.verdict == "error" and "sys.exit(3)" in p.error
    out, err = capfd.readouterr()
    assert "debugging output" in err and "debugging output" not in out
    (p,) = check(f"{f}:sleeps", **FAST, timeout=1.0).problems
    assert p.verdict == "error" and "did not return within 1 s" in p.error
