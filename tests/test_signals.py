"""The stop flag of eligibility._signals: first signal a flag, second at once, a grace deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from eligibility._signals import Interrupted, Stop, exit_status, stop_on_signals


def test_a_signal_sets_the_flag_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signals(grace=None) as stop:
        assert not stop
        stop.check()  # nothing to raise yet
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5.0)
        assert stop.signum == signal.SIGTERM
        with pytest.raises(Interrupted) as info:
            stop.check()
        assert info.value.exit_status == 143
    assert signal.getsignal(signal.SIGTERM) is before


def test_nested_contexts_share_the_outer_flag_and_listeners_hear_it():
    heard: list[int] = []
    with stop_on_signals(install=False) as outer:
        with stop_on_signals(on_signal=heard.append) as inner:
            assert inner is outer
            outer.set(signal.SIGINT)
            assert inner and heard == [signal.SIGINT]
    assert exit_status(signal.SIGINT) == 130
    assert not Stop()


_CHILD = """
import signal, sys, time
from eligibility._signals import stop_on_signals
with stop_on_signals(grace={grace}) as stop:
    print("ready", flush=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        if {polls} and stop:
            print("stopped", flush=True)
            sys.exit(stop.signum + 128)
        time.sleep(0.01)
"""


def _child(grace: float | None, polls: bool) -> subprocess.Popen:
    code = textwrap.dedent(_CHILD.format(grace=grace, polls=polls))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


@pytest.mark.slow  # fast: the in-process test above, and test_faults_envs.py's kamikaze env
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_polling_loop_stops_with_128_plus_the_signal(sig):
    proc = _child(None, True)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    assert out == "stopped\n" and proc.returncode == 128 + sig


@pytest.mark.slow
def test_a_second_signal_ends_the_process_at_once_and_a_stuck_loop_meets_the_grace():
    stuck = _child(None, False)  # never polls: only the second signal ends it
    stuck.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert stuck.poll() is None
    stuck.send_signal(signal.SIGINT)
    stuck.communicate(timeout=30)
    assert stuck.returncode == -signal.SIGINT  # the default action: killed by the signal
    late = _child(0.5, False)  # never polls: the grace deadline ends it
    t0 = time.monotonic()
    late.send_signal(signal.SIGTERM)
    late.communicate(timeout=30)
    assert late.returncode == 143 and time.monotonic() - t0 < 30


def test_the_grace_deadline_waits_for_protected_work(monkeypatch):
    """The forced exit of a stuck loop never cuts a checkpoint being written (real models: GBs)."""
    import threading

    from eligibility import _signals

    exits: list[tuple[float, int]] = []
    monkeypatch.setattr(
        _signals.os, "_exit", lambda status: exits.append((time.monotonic(), status))
    )
    with stop_on_signals(install=False) as stop:
        with _signals.protected():
            timer = threading.Thread(target=_signals._exit_when_unprotected, args=(stop, 130))
            timer.start()
            time.sleep(0.3)
            assert exits == []  # the deadline passed during the write: it waits
            written = time.monotonic()
        timer.join(timeout=10)
    assert len(exits) == 1 and exits[0][1] == 130 and exits[0][0] >= written


_PROTECTED_CHILD = """
import time
from eligibility._signals import protected, stop_on_signals
with stop_on_signals(grace=0.2):
    print("ready", flush=True)
    with protected():
        time.sleep(1.5)
        print("written", flush=True)
    time.sleep(60)  # stuck after the write: the deadline, now past, ends it
"""


@pytest.mark.slow  # fast: test_the_grace_deadline_waits_for_protected_work
def test_a_signal_during_a_protected_write_exits_after_it():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_PROTECTED_CHILD)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert out == "written\n" and proc.returncode == 130


def test_sigterm_ignored_inside_the_commands_block_stays_ignored_after_it():
    """A run whose rank was lost ignores SIGTERM while it says why (the launcher sends it to
    the ranks left): the command's block then leaves it ignored, so the rank exits with its
    own status and not by the launcher's signal; otherwise the block gives SIGTERM back."""
    from eligibility._signals import terminate_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    try:
        with terminate_as_interrupt():
            assert signal.getsignal(signal.SIGTERM) not in (before, signal.SIG_IGN)
        assert signal.getsignal(signal.SIGTERM) == before
        with terminate_as_interrupt():
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)
