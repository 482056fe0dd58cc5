"""`eligibility sweep`: the grid, both launchers, resume, failures, statistics, pictures."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from eligibility.cli import main
from eligibility.reinforce.logs import TIMING_COLUMNS
from eligibility.runs import read_metrics
from eligibility.sweep import parse_set, sweep
from eligibility.sweep import stats as st
from eligibility.sweep.launch import RESULT

TINY = ["total_steps=1500", "eval_every=500", "eval_episodes=3", "hidden=8"]


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in read_metrics(run_dir)]


# -- the grid -------------------------------------------------------------------------------------


def test_values_are_read_as_the_command_line_reads_them():
    assert parse_set("lr=0.01,0.05") == ("lr", [0.01, 0.05])
    assert parse_set("baseline=none,rloo") == ("baseline", ["none", "rloo"])
    assert parse_set("hidden=32,64x64,none") == ("hidden", [(32,), (64, 64), ()])
    assert parse_set("normalize-advantages=true,false") == ("normalize_advantages", [True, False])
    assert parse_set("max_grad_norm=none,1") == ("max_grad_norm", [None, 1.0])


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("lr", "write KEY=V1,V2"),
        ("lrr=0.1", "unknown key 'lrr'; did you mean lr"),
        ("seed=1,2", "set by the sweep itself"),
        ("lr=fast", "lr takes float"),
        ("baseline=median", "baseline takes one of none, moving-average"),
        ("hidden=32xa", "widths joined by x"),
        ("lr=", "no values"),
        ("normalize_advantages=maybe", "true or false"),
    ],
)
def test_a_bad_set_names_the_key_and_its_type(item, needle):
    with pytest.raises(ValueError, match=None) as err:
        parse_set(item)
    assert needle in str(err.value)


def test_env_kwargs_take_json_objects_separated_by_semicolons():
    two = [{"is_slippery": True}, {"is_slippery": False, "map_name": "8x8"}]
    text = '{"is_slippery": true}; {"is_slippery": false, "map_name": "8x8"}'
    assert parse_set(f"env_kwargs={text}") == ("env_kwargs", two)
    assert parse_set(f"env_kwargs={text.replace(';', ',')}") == ("env_kwargs", two)
    assert parse_set('env-kwargs={"a": "x;y,z"}') == ("env_kwargs", [{"a": "x;y,z"}])


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("env_kwargs=is_slippery=False", "not JSON at character 1"),
        ("env_kwargs={'map_name': '8x8'}", "JSON objects separated by ;, e.g. --set 'env_kwargs={"),
        ('env_kwargs={"a": 1}; [1, 2]', "[1, 2] is not a JSON object"),
        ("env_kwargs=", "no values"),
    ],
)
def test_bad_env_kwargs_name_the_syntax(item, needle):
    with pytest.raises(ValueError) as err:
        parse_set(item)
    assert needle in str(err.value)


def test_a_value_given_twice_runs_once_with_a_warning():
    with pytest.warns(UserWarning, match=r"--set lr: the value 0\.1 is given twice; it runs once"):
        assert parse_set("lr=0.1,1e-1,0.2") == ("lr", [0.1, 0.2])
    with pytest.warns(UserWarning, match="given twice"):
        assert parse_set("hidden=32,32,none") == ("hidden", [(32,), ()])
    with pytest.warns(UserWarning, match="given twice"):
        assert parse_set('env_kwargs={"a": 1, "b": 2}; {"b": 2, "a": 1}') == (
            "env_kwargs",
            [{"a": 1, "b": 2}],
        )


# -- both launchers, identical runs ----------------------------------------------------------------


@pytest.mark.slow  # a local Ray and spawned workers: 15 s; fast: test_a_sweep_writes_its_record...
def test_local_and_ray_give_the_same_runs_and_the_pictures(tmp_path, monkeypatch):
    import tempfile

    from eligibility.sweep import launch

    made, real = [], tempfile.mkdtemp

    def mkdtemp(*args, **kw):  # launch.tempfile is the module: others (filelock) call it too
        path = real(*args, **kw)
        if Path(path).name.startswith("elg-ray-"):
            made.append(path)
        return path

    monkeypatch.setattr(launch.tempfile, "mkdtemp", mkdtemp)
    grid = dict(seeds=3, sets=["baseline=none,rloo", *TINY], jobs=2)
    local = sweep("CartPole-v1", out=tmp_path / "local", **grid)
    on_ray = sweep("CartPole-v1", out=tmp_path / "ray", launcher="ray", **grid)
    assert not local.failed and not on_ray.failed
    assert len(local.runs) == len(on_ray.runs) == 6
    for a, b in zip(local.runs, on_ray.runs, strict=True):
        assert Path(a["dir"]).relative_to(tmp_path / "local") == Path(b["dir"]).relative_to(
            tmp_path / "ray"
        )
        assert _metrics(Path(a["dir"])) == _metrics(Path(b["dir"]))
        assert a["final_eval_return"] == b["final_eval_return"]
    assert list(local.summary) == ["baseline=none", "baseline=rloo"]
    for name in ("curves.png", "profile.png", "sweep.json", "results.json"):
        assert (tmp_path / "local" / name).is_file(), name
    assert (tmp_path / "local" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    record = json.loads((tmp_path / "local" / "sweep.json").read_text())
    assert record["grid"]["axes"]["baseline"] == ["none", "rloo"] and record["versions"]["numpy"]
    assert len(made) == 1 and Path(made[0]).name.startswith("elg-ray-")
    assert not Path(made[0]).exists()  # the local Ray's own directory is removed


@pytest.mark.slow  # three spawned workers; fast: the pool against one process, below
def test_the_same_sweep_with_other_jobs_gives_the_same_numbers(tmp_path):
    a = sweep("CartPole-v1", seeds=[4, 5], sets=TINY, jobs=1, out=tmp_path / "a")
    b = sweep("CartPole-v1", seeds=[4, 5], sets=TINY, jobs=2, out=tmp_path / "b")
    assert [r["final_eval_return"] for r in a.runs] == [r["final_eval_return"] for r in b.runs]


def test_the_pool_gives_the_numbers_of_one_process(tmp_path, request):
    """The spawned workers and the in-process launcher the fast tests use give the same runs.

    No pictures (0.8 s of matplotlib a sweep): test_a_sweep_writes_its_record_and_pictures."""
    sets = ["total_steps=400", "eval_every=200", "eval_episodes=2", "hidden=8"]
    grid = dict(seeds=[4], sets=sets, jobs=1, pictures=False)
    pool = sweep("CartPole-v1", out=tmp_path / "a", **grid)  # 1 worker
    request.getfixturevalue("sweep_in_process")
    here = sweep("CartPole-v1", out=tmp_path / "b", **grid)
    assert not pool.failed and not here.failed
    for a, b in zip(pool.runs, here.runs, strict=True):
        assert _metrics(Path(a["dir"])) == _metrics(Path(b["dir"]))
        assert a["final_eval_return"] == b["final_eval_return"]


def test_a_sweep_writes_its_record_and_pictures(tmp_path, sweep_in_process):
    """Two settings of one seed each (the seeds' statistics: the tests of ``stats`` below and
    the sweeps of several seeds above and below)."""
    sets = ["baseline=none,rloo", "total_steps=300", "eval_every=150", "eval_episodes=2"]
    result = sweep("CartPole-v1", seeds=1, sets=sets, out=tmp_path / "sw")
    assert not result.failed and len(result.runs) == 2
    assert list(result.summary) == ["baseline=none", "baseline=rloo"]
    for name in ("curves.png", "profile.png", "sweep.json", "results.json"):
        assert (tmp_path / "sw" / name).is_file(), name
    assert (tmp_path / "sw" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    record = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert record["grid"]["axes"]["baseline"] == ["none", "rloo"] and record["versions"]["numpy"]


# -- resume, failures, refusals ------------------------------------------------------------------


@pytest.mark.slow  # a polled subprocess sweep; fast: test_an_unfinished_sweep_runs_only_the_rest
def test_a_killed_sweep_resumes_without_losing_or_repeating_a_run(tmp_path):
    out = tmp_path / "sw"
    argv = [
        "sweep",
        "CartPole-v1",
        "--seeds",
        "4",
        "--set",
        "baseline=none,rloo",
        "--set",
        "total_steps=3000",
        "--set",
        "eval_every=0",
        "--jobs",
        "1",
        "--out",
        str(out),
        "--no-pictures",
    ]
    cmd = [sys.executable, "-m", "eligibility.cli", *argv]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while len(list(out.glob(f"*/*/{RESULT}"))) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, "the sweep did not get going"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its workers, mid-run
    proc.wait()
    finished = {p: p.stat().st_mtime_ns for p in out.glob(f"*/*/{RESULT}")}
    assert 2 <= len(finished) < 8
    assert main(argv) == 0
    assert len(list(out.glob(f"*/*/{RESULT}"))) == 8
    for p, mtime in finished.items():
        assert p.stat().st_mtime_ns == mtime  # kept, not run again
    for run in out.glob("*/seed-*"):
        updates = [int(r["update"]) for r in read_metrics(run)]
        assert updates == list(range(1, len(updates) + 1))  # none lost, none twice
        summary = json.loads((run / RESULT).read_text())  # ended, its budget spent
        assert summary["env_steps"] == int(read_metrics(run)[-1]["env_steps"]) <= 3000


def test_an_unfinished_sweep_runs_only_the_rest(tmp_path, sweep_in_process):
    out = tmp_path / "sw"
    grid = dict(seeds=3, sets=["total_steps=300", "eval_every=0"], out=out, pictures=False)
    sweep("CartPole-v1", **grid)
    results = sorted(out.glob(f"*/*/{RESULT}"))
    kept = {p: p.stat().st_mtime_ns for p in results[:2]}
    results[2].unlink()  # as if the sweep had been killed during this run
    assert not sweep("CartPole-v1", **grid).failed
    assert results[2].is_file()
    assert {p: p.stat().st_mtime_ns for p in results[:2]} == kept  # kept, not run again
    for run in out.glob("*/seed-*"):
        updates = [int(r["update"]) for r in read_metrics(run)]
        assert updates == list(range(1, len(updates) + 1))  # none lost, none twice


def test_a_failing_run_does_not_stop_the_others(tmp_path, capsys, sweep_launcher):
    out = tmp_path / "sw"
    rc = main(
        [
            "sweep",
            "Acrobot-v1",
            "--seeds",
            "2",
            "--set",
            "vectorization_mode=sync,vector_entry_point",
            "--set",
            "total_steps=600",
            "--set",
            "eval_every=0",
            "--out",
            str(out),
            "--jobs",
            "2",
            "--no-pictures",
        ]
    )
    captured = capsys.readouterr()
    assert rc == 1
    assert "FAILED" in captured.out and "vector entry point" in captured.out
    done = sorted(p.parent.parent.name for p in out.glob(f"*/*/{RESULT}"))
    assert done == ["vectorization_mode=sync", "vectorization_mode=sync"]


def test_a_sweep_directory_of_another_grid_is_refused(tmp_path, capsys, monkeypatch):
    from eligibility.sweep import launch
    from sweep_envs import FinishedLauncher

    monkeypatch.setitem(launch.LAUNCHERS, "local", FinishedLauncher)
    out = tmp_path / "sw"
    base = ["sweep", "CartPole-v1", "--seeds", "1", "--out", str(out), "--no-pictures"]
    assert main([*base, "--set", "lr=0.05"]) == 0
    assert main([*base, "--set", "lr=0.01"]) == 0  # no run was ever started there: replaced
    assert json.loads((out / "sweep.json").read_text())["grid"]["axes"] == {"lr": [0.01]}
    (out / "defaults" / "seed-0").mkdir(parents=True)
    (out / "defaults" / "seed-0" / "config.json").write_text("{}")  # now one was
    capsys.readouterr()
    assert main([*base, "--set", "lr=0.05"]) == 2
    err = capsys.readouterr().err
    assert "holds a sweep of another grid" in err and "axes" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--set", "lrr=0.1"], "did you mean lr"),
        (["--set", "lr=fast"], "lr takes float"),
        (["--seeds", "0"], "the grid is empty"),
        (["--set", "lr=0.1", "--set", "lr=0.2"], "given twice"),
        (["--launcher", "ray", "--address", "127.0.0.1:1"], "no Ray head answers"),
        (["--address", "127.0.0.1:1"], "--address is for --launcher ray"),
        (["--jobs", "0"], "--jobs"),
        (["--set", "lr=0.1,0.2", "--set", "lr=0.1"], "given twice"),
        (["--set", "env_kwargs={}", "--set", "seeds=1"], "did you mean seed"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, needle):
    rc = main(["sweep", "CartPole-v1", "--out", str(tmp_path / "sw"), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err
    assert not (tmp_path / "sw").exists()  # nothing written, no cluster reached


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["NoSuchEnv-v0"], "unknown environment id 'NoSuchEnv-v0'"),
        (["FrozenLake-v1", "--set", 'env_kwargs={"map_name": "99x99"}'], "99x99"),
        (["FrozenLake-v1", "--set", 'env_kwargs={"slippery": true}'], "slippery"),
        (
            ["FrozenLake-v1", "--set", 'env_kwargs={"a/b": 1}; {"a_b": 1}'],
            "would share the run directory",
        ),
    ],
)
def test_envs_and_settings_are_checked_before_anything_is_written(tmp_path, capsys, argv, needle):
    rc = main(["sweep", *argv, "--seeds", "2", "--out", str(tmp_path / "sw")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err
    assert not (tmp_path / "sw").exists()


def test_ray_missing_names_the_pip_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    rc = main(
        ["sweep", "CartPole-v1", "--seeds", "1", "--launcher", "ray", "--out", str(tmp_path / "sw")]
    )
    assert rc == 2 and "pip install 'eligibility[ray]'" in capsys.readouterr().err


# -- the statistics -------------------------------------------------------------------------------


def test_iqm_by_hand():
    assert st.iqm(np.array([1.0, 2.0, 3.0, 4.0])) == 2.5  # drop 1 and 4
    assert st.iqm(np.array([10.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, -9.0])) == 2.5  # middle 4
    assert st.iqm(np.array([7.0, 1.0, 4.0])) == 4.0  # n < 4: the mean
    assert st.iqm(np.arange(9.0)) == pytest.approx(np.mean([2, 3, 4, 5, 6]))


def test_probability_of_improvement_by_hand():
    assert st.probability_of_improvement(np.array([3.0, 4.0]), np.array([1.0, 2.0])) == 1.0
    assert st.probability_of_improvement(np.array([1.0, 3.0]), np.array([2.0])) == 0.5
    assert st.probability_of_improvement(np.array([2.0]), np.array([2.0])) == 0.5


def test_bootstrap_intervals_cover_the_truth_about_95_percent():
    """IQM of a symmetric distribution is its centre: 300 data sets of 20 N(5, 1) draws; the
    95 % intervals should hold 5 in about 95 % of them (percentile bootstrap runs a little
    narrow at n = 20: the bound allows 0.88)."""
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(300):
        x = rng.normal(5.0, 1.0, size=20)
        lo, hi = st.bootstrap_ci(x, st.iqm, rng=rng, resamples=400)
        hits += lo <= 5.0 <= hi
    assert 0.88 <= hits / 300 <= 0.99, hits / 300


@pytest.mark.parametrize("name", list(st.STATISTICS))
@pytest.mark.parametrize("n", [2, 9, 20])
def test_the_bootstrap_of_every_statistic_is_its_plain_loop_over_the_resamples(name, n):
    """All B resamples reduced at once (the statistic over a (B, n) array) against it called on each
    resample in turn, the same resamples (one seed): the same interval, up to the order in
    which a row's mean adds its terms (numpy sums a row of a matrix and a vector apart)."""
    f = st.STATISTICS[name]
    x = np.random.default_rng(n).normal(size=n)
    x[0] = x[-1]  # a tie, for the sort and the median
    got = st.bootstrap_ci(x, f, rng=np.random.default_rng(1), resamples=300)
    idx = np.random.default_rng(1).integers(0, n, size=(300, n))
    plain = np.quantile(np.array([f(x[i]) for i in idx]), [0.025, 0.975])
    assert got == pytest.approx(tuple(plain), rel=1e-13, abs=1e-15)
    np.testing.assert_allclose(f(x[idx]), [f(x[i]) for i in idx], rtol=1e-13, atol=0)


def test_curves_on_a_common_grid_against_a_plain_loop():
    curves = [
        (np.array([10, 20, 30]), np.array([1.0, 2.0, 3.0])),
        (np.array([15, 40]), np.array([5.0, 7.0])),
    ]
    grid = np.array([5.0, 12.0, 20.0, 35.0, 50.0])
    mid, lo, hi = st.step_grid_mean(curves, grid)
    for j, g in enumerate(grid):
        seen = []
        for steps, values in curves:
            before = [v for s, v in zip(steps, values, strict=True) if s <= g]
            if before:
                seen.append(before[-1])
        if not seen:
            assert math.isnan(mid[j])
        else:
            assert mid[j] == pytest.approx(np.mean(seen))  # n < 4: IQM is the mean
            assert lo[j] <= mid[j] <= hi[j]


def test_censored_runs_enter_steps_to_target_at_their_budget(tmp_path):
    from eligibility.sweep.grid import Grid
    from eligibility.sweep.run import aggregate

    grid = Grid("CartPole-v1", {}, [0, 1])
    base = {"ok": True, "target_return": 475.0, "budget": 1000, "wall_s": 1.0, "curve": {}}
    runs = [
        {**base, "index": 0, "steps_to_target": 400, "final_eval_return": 480.0},
        {**base, "index": 1, "steps_to_target": None, "final_eval_return": 100.0},
    ]
    s = aggregate(tmp_path, grid, runs).summary["defaults"]
    assert s["success_rate"] == 0.5 and s["censored"] == 1
    assert s["steps_to_target"]["mean"] == 700.0  # (400 + 1000) / 2


def test_a_runs_summary_reads_its_whole_history():
    """A resumed run's history holds the rows before the resume; the final return is the last
    evaluation's, even when this process ran none and even when it is exactly 0.0."""
    from types import SimpleNamespace

    from eligibility.reinforce.config import Config
    from eligibility.reinforce.logs import SCHEMA
    from eligibility.sweep.launch import step_budget, summarise

    def row(steps, ev):
        return {"env_steps": steps, "mean_return": 1.0, "eval_return": ev}

    rows = [row(100, -3.0), row(200, None), row(300, 0.0), row(400, None)]
    result = SimpleNamespace(
        SCHEMA=SCHEMA,
        history=rows,
        target=-1.0,
        solved=False,
        steps=400,
        wall_s=1.0,
        final_eval=None,  # what a resumed process that evaluated nothing reports
    )
    s = summarise(result, step_budget(result, Config.for_env("CartPole-v1", total_steps=400)))
    assert s["final_eval_return"] == 0.0 and s["steps_to_target"] == 300
    assert s["curve"]["eval"] == [[100, -3.0], [300, 0.0]]


def test_a_failed_run_names_the_users_line_not_ours():
    from eligibility.reinforce.config import Config
    from eligibility.sweep.launch import describe_error

    def users_env_step():
        raise RuntimeError("the env broke\nsecond line")

    try:
        users_env_step()
    except RuntimeError as err:
        line = err.__traceback__.tb_next.tb_lineno
        assert describe_error(err) == f"RuntimeError: the env broke (at test_sweep.py:{line})"
    try:
        Config.for_env("CartPole-v1", lr=-1.0)
    except ValueError as err:  # raised inside eligibility: its message says what is wrong
        assert describe_error(err) == f"ValueError: {err}"
    assert describe_error(SystemExit(3)) == "the run called sys.exit(3)"


@pytest.mark.slow  # a spawned worker: 2 s; in process, warnings pass through eligibility.cli.main
def test_a_workers_warning_reaches_stderr_as_one_plain_line(tmp_path, capfd):
    argv = ["sweep", "CartPole-v1", "--seeds", "1", "--jobs", "1", "--no-pictures"]
    argv += ["--set", "lr=1000000", "--set", "total_steps=300", "--set", "eval_every=0"]
    assert main([*argv, "--out", str(tmp_path / "sw")]) == 0
    err = capfd.readouterr().err  # the worker writes to the inherited file descriptor 2
    (line,) = [x for x in err.splitlines() if "collapsed the policy's entropy" in x]
    assert line.startswith("eligibility sweep: warning: ") and "\x1b" not in err


# -- sweeping finetune's fields (--trainer finetune) --------------------------------------------

FT_TINY = ["max_updates=2", "eval_every=2", "d_model=8", "n_head=2", "group_size=2"]
FT_TINY += ["prompts_per_batch=1"]


def _ft_argv(out: Path, *extra: str) -> list[str]:
    argv = ["sweep", "--trainer", "finetune", "repeat", "--seed-list", "3", "--no-pictures"]
    argv += ["--set", "aggregation=sequence-mean,constant"]
    for item in FT_TINY:
        argv += ["--set", item]
    return [*argv, *extra, "--out", str(out), "--format", "json"]


def test_a_finetune_sweep_runs_its_grid_and_resumes(tmp_path, capsys, sweep_in_process):
    out = tmp_path / "sw"
    assert main(_ft_argv(out)) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["grid"]["trainer"] == "finetune" and doc["grid"]["task"] == "repeat"
    assert "env_id" not in doc["grid"]
    assert list(doc["summary"]) == ["aggregation=sequence-mean", "aggregation=constant"]
    assert [s["runs"] for s in doc["summary"].values()] == [1, 1]
    dirs = [Path(r["dir"]) for r in doc["runs"]]
    assert len(set(dirs)) == 2 and all(d.name == "seed-3" for d in dirs)
    for r, d in zip(doc["runs"], dirs, strict=True):  # each run is a finetune run of its own
        saved = json.loads((d / "config.json").read_text())
        assert saved["task"] == "repeat" and saved["seed"] == r["seed"]
        assert d.parent.name == f"aggregation={saved['aggregation']}"
        assert saved["max_updates"] == 2 and saved["d_model"] == 8
        assert r["env_steps"] > 0 and r["final_eval_return"] is not None
        assert r["budget"] == r["env_steps"]  # censored in tokens, the unit of steps_to_target
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] and results["summary"] == doc["summary"]
    # an unfinished run (its result.json gone, its checkpoint there) resumes; the rest are kept
    kept = (dirs[0] / RESULT).stat().st_mtime_ns
    (dirs[1] / RESULT).unlink()
    assert main(_ft_argv(out)) == 0
    again = json.loads(capsys.readouterr().out)
    assert (dirs[0] / RESULT).stat().st_mtime_ns == kept and (dirs[1] / RESULT).is_file()
    strip = ("wall_s", "index")
    assert [{k: v for k, v in r.items() if k not in strip} for r in again["runs"]] == [
        {k: v for k, v in r.items() if k not in strip} for r in doc["runs"]
    ]
    # a train sweep is refused a directory holding finetune runs, naming the difference
    assert main(["sweep", "CartPole-v1", "--seeds", "1", "--out", str(out)]) == 2
    assert "trainer: 'finetune' there, None now" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--set", "total_updates=5"], "unknown key 'total_updates' of FinetuneConfig; did you"),
        (["--set", "hidden=8"], "unknown key 'hidden' of FinetuneConfig"),
        (["--set", "aggregation=mean"], "aggregation takes one of sequence-sum, constant"),
        (["--set", "task=sum"], "task is set by the sweep itself"),
        (["--set", "lr=-1"], "lr (--lr) must be > 0"),
    ],
)
def test_a_bad_finetune_set_is_one_line_exit_2(tmp_path, capsys, argv, needle):
    out = tmp_path / "sw"
    rc = main(
        ["sweep", "--trainer", "finetune", "repeat", "--seeds", "1", *argv, "--out", str(out)]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and needle in err, err
    assert not out.exists()


def test_an_unknown_task_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "sw"
    rc = main(["sweep", "--trainer", "finetune", "nosuch", "--seeds", "1", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "unknown task 'nosuch'" in err and err.count("\n") == 1
    assert not out.exists()


def test_the_trainer_choices_are_the_tables_commands():
    import typing

    from eligibility.cli.sweep import SweepConfig
    from eligibility.sweep.grid import Grid
    from eligibility.trainers import TRAINERS, named

    hint = typing.get_type_hints(SweepConfig)["trainer"]
    assert typing.get_args(hint) == tuple(t.command for t in TRAINERS.values())
    assert [t.command for t in TRAINERS.values()] == ["train", "finetune"]
    assert named("train") == "reinforce" == named("reinforce") and named("finetune") == "finetune"
    with pytest.raises(ValueError, match="--trainer must be one of train, finetune"):
        named("evaluate")
    # train's grid record is the one it always was: no trainer key, env_id
    assert Grid("CartPole-v1", {}, [0]).to_json() == {
        "env_id": "CartPole-v1",
        "axes": {},
        "seeds": [0],
    }
