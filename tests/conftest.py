"""Shared test settings: hypothesis profiles; GPUs hidden but for ``make gpu``.

``HYPOTHESIS_PROFILE=thorough pytest ...`` (``make nightly``) runs 1000 examples a property; the
default, 10, is what ``make test`` runs.
"""

from __future__ import annotations

import atexit
import gc
import os
import tempfile
from pathlib import Path

# The suite runs on the CPU, as CI does, on any machine: a GPU in sight would move every
# `--device auto` run there, and a backward pass on a machine with one starts autograd's device
# threads, after which no forked worker (the check's, a reward's) can run one. The tests marked
# `gpu` see it under `make gpu` (ELIGIBILITY_GPU_TESTS=1), set before torch looks.
if not os.environ.get("ELIGIBILITY_GPU_TESTS"):
    os.environ["CUDA_VISIBLE_DEVICES"] = ""

# The defaults' measurements a run keeps (eligibility.lm.measure.cache_dir): the suite's own,
# in a directory of its own, never the user's (a run in a subprocess inherits it).
os.environ["ELIGIBILITY_CACHE_DIR"] = tempfile.mkdtemp(prefix="eligibility-test-cache-")

import pytest

# At its exit an interpreter that ran the suite collects every object the tests left (torch's,
# transformers', each run's): 3 s of each xdist worker's exit, which the controller waits for
# before it reports. Frozen, the final collection skips them (after every test, so no test runs
# without the collector): on one run of the whole suite, the controller's end came 0.4 s after
# the workers' last atexit handler instead of 3.3 s.
atexit.register(gc.freeze)


def _runs_tests(config: pytest.Config) -> bool:
    """Whether this process runs tests: an xdist worker, or pytest without workers (xdist's
    controller only hands the tests out and reports)."""
    return hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)


def pytest_configure(config: pytest.Config) -> None:
    """The settings of a process that runs tests; the controller takes none of them (their
    imports, matplotlib's and hypothesis', were 0.35 CPU-s of its start, while the workers
    collect on the same two cores).

    No collector while the tests are collected: collection imports the tests' modules
    (torch, transformers' top level), makes little garbage, and every collection while it runs
    walks the modules already in (0.4-0.6 CPU-s of each worker's start). On again once the
    tests are in (below)."""
    if _runs_tests(config):
        gc.disable()
        _settings_of_a_test_process()


def _settings_of_a_test_process() -> None:
    """Hypothesis' profiles (before any test module is imported: ``@settings`` reads the one
    loaded), matplotlib in, and the learning curves drawn only where a test looks at them.

    A run in a process without matplotlib starts a painter (eligibility.runs.painter) to import
    it on the other core; in the suite's workers that would be a process per test that trains.
    The workers draw in process, once matplotlib is in; tests/test_painter.py runs the painter.
    """
    import matplotlib  # noqa: F401
    from hypothesis import HealthCheck, settings

    from eligibility.runs import directory

    # deadline=None: the first call of a torch op is slow (lazy initialisation), not the code.
    settings.register_profile(
        "default",
        max_examples=10,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile("thorough", max_examples=1000, deadline=None)
    settings.register_profile("quick", max_examples=5, deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
    _draw_curves[0] = directory.plot_curves
    directory.plot_curves = _plot_curves_where_looked_at


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The heap frozen before pytest's last two full collections (its unraisable-exception
    plugin's, at the session's end): each walked every object the tests left, 0.46-0.57 s a
    worker before it could exit, which the controller waits for. Cycles a test leaves are collected
    while the tests after it run; the last tests' are left, as at the interpreter's exit."""
    if _runs_tests(config):
        gc.freeze()


def pytest_collection_finish(session: pytest.Session) -> None:
    """The modules collection imported (torch's, the tests') frozen, and a young generation of
    20,000 objects instead of 700: every full collection of a worker otherwise walks the whole
    heap again (11 of 0.2 s each on a run of the suite). Measured by gc.callbacks on one run
    of the suite, each worker spent 2.8-3.0 CPU-s collecting, 1.3 s so (0.6 s of it while
    collecting the tests), at the same peak memory (0.8-1.0 GB a worker). Still collected:
    every object a test makes."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)
    gc.enable()


TESTS = Path(__file__).resolve().parent


def helper_modules() -> list[Path]:
    """The suite's own modules that are not tests: every ``.py`` under tests/ but ``test_*.py``
    and this file (workers for subprocesses, user code, references the tests import)."""
    return sorted(
        p for p in TESTS.rglob("*.py") if not p.name.startswith("test_") and p.name != "conftest.py"
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The helper modules are not collected: ``--doctest-modules tests`` would import each of
    them on every worker for no test (the ranks' workers import ``torch.distributed``'s
    checkpointing, and sympy with it: a second a worker). The tests that use one import it;
    none holds a doctest (``tests/test_docs.py`` asserts it)."""
    if collection_path.suffix == ".py" and collection_path.resolve() in _HELPERS:
        return True
    return None


_HELPERS = frozenset(helper_modules())


def _plot_curves_where_looked_at(*args: object, **kwargs: object) -> None:
    """A run's learning_curve.png is drawn in the tests marked ``curve``, and nowhere else.

    Drawing one takes about 0.1 s of matplotlib's layout and PNG writing, in the 130 or so
    tests whose runs finish in this process (and in the module-scoped fixtures that train
    one); the rest of them never look at it. Elsewhere the run's ``finish`` draws nothing
    (``runs.directory.plot_curves`` is this function, which passes the call on only while a
    marked test runs): the drawing, its file and its contents are the marked tests'; a run in
    a subprocess (the CLI's tests) draws as ever. Set once here and switched by a hook: an
    autouse fixture doing the same cost 0.26 ms of every test (1 CPU-s a run of the suite).
    """
    if _DRAWING[0]:
        _draw_curves[0](*args, **kwargs)


_draw_curves: list = [None]
"""``runs.directory.plot_curves`` itself (set with the replacement, in a test process)."""
_DRAWING = [False]
"""Whether the test running (its setup, call and teardown) is marked ``curve``."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """The drawing switched on for a test marked ``curve``, before any of its fixtures."""
    _DRAWING[0] = item.get_closest_marker("curve") is not None


@pytest.fixture
def sweep_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """``sweep``'s local launcher without its spawned pool: each job's ``run_one`` in turn here.

    A spawned worker starts a fresh interpreter (about 1.5 s of imports each); what a test of
    the grid, the records, resume or a failed run looks at is the same either way. The pool
    itself is tested by the tests that take ``sweep_launcher`` (both ways in ``make nightly``).
    """
    from eligibility.sweep import launch

    for var in launch.THREAD_VARS:  # run_one pins them to 1: restored after the test
        monkeypatch.setenv(var, os.environ.get(var, "1"))

    class InProcess(launch.LocalLauncher):
        def run(self, jobs, on_result, received, **kw):
            for job in jobs:
                if received:  # the sweep was told to stop: the rest stay unfinished
                    break
                on_result(launch.run_one(job, lambda: bool(received)))

    monkeypatch.setitem(launch.LAUNCHERS, "local", InProcess)


@pytest.fixture(params=["in-process", pytest.param("pool", marks=pytest.mark.slow)])
def sweep_launcher(request: pytest.FixtureRequest) -> str:
    """The local launcher in this process (``make test``) and as its real pool (nightly)."""
    if request.param == "in-process":
        request.getfixturevalue("sweep_in_process")
    return request.param


@pytest.fixture
def check_calls_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """``eligibility check``'s calls of the function checked made here, in turn, not in a worker.

    The check runs each problem's N calls in a forked worker (``check.isolate.run_calls``): a
    round trip of about 0.7 ms a call on top of the call itself, half of a statistical test's
    time at N in the thousands. What such a test asserts (the verdict, the diagnosis, the
    scale) is a function of the calls' gradients, and these are the same numbers either way:
    the same ``step(k)``, after the same ``setup()`` (torch seeded), with the check's one torch
    thread and its caller's RNG states put back (``isolate.caller_state_kept``);
    ``tests/test_check_isolation.py`` holds a report made here against the worker's, and tests
    the worker itself (timeouts, exits, signals, memory). A ``ValueError`` is the worker's
    (``… (call k)``); the tests that take this fixture call functions that return. Where torch
    is a CUDA build the check forks its workers ahead, each computing its own draw: those calls
    stay in them.
    """
    from eligibility.check import isolate

    in_worker = isolate.run_calls

    def run_calls(step, n, *, setup=lambda: None, worker=None, summary=None, **kw):
        if worker is not None:  # forked ahead (a CUDA build of torch): it holds its own draw
            return in_worker(step, n, setup=setup, worker=worker, summary=summary, **kw)
        setup()
        rows = []
        for k in range(n):
            try:
                rows.append(step(k))
            except ValueError as err:
                raise ValueError(f"{err} (call {k + 1})") from None
        if summary is not None:
            kw.get("on_summary", lambda s: None)(summary() or {})
        return rows

    monkeypatch.setattr(isolate, "run_calls", run_calls)
