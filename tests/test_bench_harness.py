"""The benchmark harness's pure parts: cadence, solve criterion, summaries, markdown."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "classic"))

import harness


def test_cadence_fires_once_per_crossed_multiple():
    c = harness.EvalCadence(every=10_000)
    steps = [3_000, 9_999, 10_000, 12_000, 19_999, 20_500, 45_000, 49_000, 50_000]
    fired = [s for s in steps if c.due(s)]
    # 45_000 crosses both 30k and 40k: one evaluation, next due at 50k.
    assert fired == [10_000, 20_500, 45_000, 50_000]


def test_cadence_matches_plain_loop_reference():
    # Reference: evaluate at an update boundary iff some multiple of `every` lies in (prev, cur].
    every, prev, ref = 1_000, 0, []
    lengths = [137, 880, 12, 2_500, 999, 1, 1_000, 3, 600, 401]
    c, got, cur = harness.EvalCadence(every=every), [], 0
    for n in lengths:
        cur += n
        ref.append(cur // every > prev // every)
        got.append(c.due(cur))
        prev = cur
    assert got == ref


def test_cadence_also_fires_when_the_training_returns_cross_the_target():
    c = harness.EvalCadence(every=10_000, target=475.0)
    calls = [(1_000, 200.0), (2_000, None), (3_000, 480.0), (4_000, 490.0), (5_000, 400.0)]
    calls += [(6_000, 475.0), (10_000, 100.0)]
    # 480 crosses from below; 490 is already above; 475 crosses again; 10k is the cadence.
    assert [s for s, m in calls if c.due(s, m)] == [3_000, 6_000, 10_000]


def test_seed_sets_are_disjoint_and_the_bench_uses_held_out():
    assert not set(harness.TUNING_SEEDS) & set(harness.HELD_OUT_SEEDS)
    assert len(harness.TUNING_SEEDS) >= 50 and len(harness.HELD_OUT_SEEDS) >= 20


def test_cadence_rejects_nonpositive():
    with pytest.raises(ValueError, match="every"):
        harness.EvalCadence(every=0)


def test_is_solved_threshold_and_count():
    assert harness.is_solved([475.0] * 100, 475.0)
    assert not harness.is_solved([475.0] * 99 + [474.0], 475.0)
    assert harness.is_solved([-100.0] * 100, -100.0)
    with pytest.raises(ValueError, match="100"):
        harness.is_solved([500.0] * 99, 475.0)


def _run(solved, train_s, steps=1000, episodes=10, error=None, seed=0):
    return {
        "seed": seed,
        "solved": solved,
        "train_s": train_s,
        "eval_s": 0.5,
        "env_steps": steps,
        "eval_env_steps": 2 * steps,
        "episodes": episodes,
        "process_wall_s": train_s + 1.0,
        "process_cpu_s": train_s + 0.5,
        "error": error,
    }


def test_summarize_counts_failures_and_keeps_them_out_of_times():
    runs = [
        _run(True, 3.0, 30_000),
        _run(True, 1.0, 10_000),
        _run(True, 2.0, 20_000),
        _run(False, 120.0, error="wall cap"),
        _run(False, 5.0, error="wall cap"),
        _run(False, 9.0),
    ]
    s = harness.summarize(runs)
    assert (s["runs"], s["solved"]) == (6, 3)
    assert s["success_rate"] == pytest.approx(0.5)
    assert s["train_s"] == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert s["env_steps"]["median"] == statistics.median([30_000, 10_000, 20_000])
    assert s["failures"] == {"wall cap": 2, "not solved": 1}


def test_summarize_all_failed():
    s = harness.summarize([_run(False, 1.0, error="timeout")])
    assert s["solved"] == 0 and s["train_s"]["median"] is None
    assert s["failures"] == {"timeout": 1}


def _fake_results():
    ours = [_run(True, t, 20_000 + i, seed=i) for i, t in enumerate([1.0, 2.0, 3.0])]
    peer = [_run(True, t, 90_000, seed=i) for i, t in enumerate((20.0, 30.0))]
    peer.append(_run(False, 120.0, error="wall cap", seed=2))
    env = {
        "target": 475.0,
        "seeds": [0, 1, 2],
        "cap_s": 120.0,
        "max_steps": 10**6,
        "chart": "benchmarks_cartpole.png",
        "systems": {
            "eligibility-numpy": {"summary": harness.summarize(ours), "runs": ours},
            "tianshou": {"summary": harness.summarize(peer), "runs": peer},
        },
    }
    return {
        "meta": {
            "command": "python bench/classic/run_all.py",
            "started": "2026-01-01T00:00:00",
            "elapsed_s": 600.0,
            "quick": False,
            "jobs": 2,
            "machine": ["Model name: X"],
            "versions": {"numpy": "2.4"},
            "systems_notes": ["note A"],
        },
        "solve": {"CartPole-v1": env},
        "throughput": [
            {
                "backend": "numpy",
                "num_envs": 8,
                "train_steps_per_s": 50_000.0,
                "random_steps_per_s": 100_000.0,
                "ratio": 0.5,
            }
        ],
        "update_cost": {
            "transitions": 4096,
            "systems": {
                "tianshou": {"what": "update", "ms": {"median": 6.0, "min": 5.0, "max": 7.0}},
                "sb3-a2c": {"error": "crash: boom"},
            },
        },
    }


def test_render_markdown_from_fake_results():
    md = harness.render_markdown(_fake_results(), "## Loss\n\nloss table")
    assert "## Time to solve CartPole-v1 (target 475)" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| Tianshou"))
    # solved, env steps (min–max), IQM, eval env steps, process wall, process CPU, train wall
    assert row.endswith(
        "| 2/3 (wall cap: 1) | 90,000 (90,000–90,000) | 90,000 | 180,000 | 26.00 | 25.50 | 25.00 |"
    )
    ours = "| eligibility (numpy backend) | 3/3 | 20,001 (20,000–20,002) | 20,001 | 40,002 | 3.00 |"
    assert ours in md
    # paired by seed: wall 21/2 and 31/3 → median 10.42; CPU 20.5/1.5 and 30.5/2.5 → 12.93
    assert "10.4× faster in process wall and 12.9× in process CPU" in md
    assert "over the 2 seeds both solved" in md
    assert "goal" not in md.lower()  # the record states measurements, not a project's goals
    assert "| numpy | 8 | 50,000 | 100,000 | 50% |" in md
    assert "crash: boom" in md and "6.00 (5.00–7.00)" in md
    assert "![time to solve CartPole-v1](benchmarks_cartpole.png)" in md
    assert "Model name: X" in md and "python bench/classic/run_all.py" in md
    assert md.rstrip().endswith("loss table")
    assert "Quick smoke run" not in md


def test_render_markdown_flags_quick_runs():
    res = _fake_results()
    res["meta"]["quick"] = True
    assert "Quick smoke run" in harness.render_markdown(res)


def test_counts_keep_the_half_of_an_even_median():
    # Medians of an even number of runs end in .5: shown as such, not rounded to even.
    runs = [_run(True, 1.0, steps=20_120, episodes=254), _run(True, 2.0, 20_121, 255)]
    res = _fake_results()
    res["solve"]["CartPole-v1"]["systems"]["tianshou"] = {
        "summary": harness.summarize(runs),
        "runs": runs,
    }
    row = next(ln for ln in harness.render_markdown(res).splitlines() if ln.startswith("| Tian"))
    assert "| 20,120.5 (20,120–20,121) | 20,120.5 | 40,241 |" in row


def test_render_only_writes_the_docs_from_results_json(tmp_path):
    import run_all

    res = _fake_results()
    res["loss"] = {
        "machine": {"torch": "2.x", "device": "cpu", "cpu_count": 2},
        "rows": [
            {
                "kind": "categorical",
                "size": [4096, 1000],
                "dtype": "float32",
                "threads": 1,
                "rounds": 30,
                "ours_ms": 2.7,
                "time_ratio": {"cross_entropy": 1.91, "compiled": 1.25, "categorical": 27.6},
                "ours_peak_mib": 15.7,
                "memory_ratio": {"cross_entropy": 0.33, "categorical": 0.25},
            }
        ],
    }
    results_json, docs = tmp_path / "results.json", tmp_path / "benchmarks.md"
    results_json.write_text(json.dumps(res))
    run_all.render_only(results_json, docs)
    md = docs.read_text()
    assert md.startswith(harness.render_markdown(res).rstrip())  # the same page, then the loss
    lines = md.splitlines()
    head = next(ln for ln in lines if ln.startswith("| `reinforce_loss` (B, V) |"))
    assert "cross_entropy ÷ ours | compiled CE ÷ ours | Categorical ÷ ours" in head
    assert "| (4 096, 1 000) | float32 | 1 | 2.7 | 1.91 | 1.25 | 27.60 |" in lines
    assert "| (4 096, 1 000) | 15.7 | 0.33 | 0.25 |" in lines


def test_readme_benchmark_table_is_generated_from_results_json():
    root = Path(__file__).resolve().parents[1]
    results = json.loads((root / "bench" / "results" / "results.json").read_text())
    readme = (root / "README.md").read_text()
    assert harness.readme_block(readme) == harness.readme_section(results), (
        "README.md's CartPole sentence disagrees with bench/results/results.json; regenerate it "
        "with: python bench/classic/run_all.py --render-only"
    )


def test_readme_splice_replaces_only_between_the_markers():
    text = f"a\n{harness.README_START}\nold\n{harness.README_END}\nb\n"
    out = harness.splice_readme(text, "new\n")
    assert out == f"a\n{harness.README_START}\nnew\n{harness.README_END}\nb\n"
    assert harness.readme_block(out) == "new\n"
    with pytest.raises(ValueError, match="markers"):
        harness.splice_readme("no markers", "x")


def test_a_run_of_one_env_keeps_the_other_envs_from_the_previous_results(tmp_path):
    import run_all

    old = _fake_results()
    old["solve"]["Acrobot-v1"] = old["solve"]["CartPole-v1"]
    previous = tmp_path / "results.json"
    previous.write_text(json.dumps(old))
    box = dict(old["solve"]["CartPole-v1"], target=950.0)
    new = {"meta": {"started": "2026-02-02T00:00:00"}, "solve": {harness.BOX_ENV: box}}
    run_all.carry_over(new, previous, ["box"])
    # every env in the page's order; the carried ones dated by the run that measured them
    assert list(new["solve"]) == ["CartPole-v1", "Acrobot-v1", harness.BOX_ENV]
    assert new["meta"]["carried"]["cartpole"] == "2026-01-01T00:00:00"
    assert "box" not in new["meta"]["carried"]
    md = harness.render_markdown(new | {"meta": old["meta"] | new["meta"]})
    assert f"## Time to solve {harness.BOX_ENV} (target 950)" in md
    assert harness.readme_section(new).startswith("On CartPole-v1 the NumPy backend solved")
