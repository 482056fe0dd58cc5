"""Every classic benchmark: bench/results/results.json, docs/measurements/classic.md, charts.

    python bench/classic/run_all.py               # the full protocol (`make bench`): 20 seeds
    python bench/classic/run_all.py --seeds 8     # the first 8 held-out seeds only
    python bench/classic/run_all.py --quick       # smoke run: 2 seeds, small caps; a preview only
    python bench/classic/run_all.py --only tianshou --only eligibility-numpy --sections cartpole
    python bench/classic/run_all.py --render-only # the page again from results.json, no runs

Every run is its own process (``bench/classic/solve.py`` etc.) with one thread; ``--jobs`` runs
go at once (default 1: one run at a time), pulled from one queue in seed-major order with the system
order rotated per seed, so load that changes during the run is shared across systems. The
time-to-solve seeds are the held-out ones (``harness.HELD_OUT_SEEDS``), never the tuning ones.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from eligibility._io import atomic_write_text, save_figure
from harness import (
    BOX_ENV,
    EVAL_EVERY,
    HELD_OUT_SEEDS,
    SYSTEM_LABELS,
    SYSTEMS,
    TARGETS,
    readme_section,
    render_markdown,
    splice_readme,
    summarize,
)

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parents[1]
RESULTS = ROOT / "bench" / "results"
LOSSES = ROOT / "bench" / "losses"
SOLVE_ENVS = {"cartpole": "CartPole-v1", "acrobot": "Acrobot-v1", "box": BOX_ENV}
"""The time-to-solve sections: each times every system on its env, on the held-out seeds."""
SECTIONS = (*SOLVE_ENVS, "throughput", "update", "loss")
SYSTEMS_NOTES = [
    "**eligibility**: `train(Config.for_env(env, seed=s, backend=b, out=None, progress=False))`, "
    f"tuned defaults, tested by its own trainer (`eval_every={EVAL_EVERY}`, on crossing the "
    "target, the sequential test of 100 greedy episodes) without the sampled report after "
    "training (`sampled_report=False`: the peers make none).",
    "**Tianshou 2.0.1 REINFORCE**: `Reinforce` + `ProbabilisticActorPolicy(Categorical)` "
    "with the configuration of Tianshou's CartPole test (`test/discrete/test_reinforce.py`): "
    "8 envs, 8 episodes per collection, 2 epochs of 64-minibatches per update, Adam 1e-3, "
    "γ 0.95, return standardisation, MLP 64-64 softmax, orthogonal init; our own loop "
    "(`bench/classic/solve.py`) calls its collector and `update`.",
    f"On {BOX_ENV}, Tianshou's MuJoCo REINFORCE configuration (`examples/mujoco/"
    "mujoco_reinforce.py`): 10 envs with observation normalisation (`VectorEnvNormObs`), "
    "2 048 env steps per collection, one full-batch step per update, MLP 64-64 tanh, a "
    "Gaussian (`Independent(Normal)`) with a state-independent σ (log σ initialised to −0.5), "
    "orthogonal init with the mean layer scaled by 0.01, Adam 1e-3 decaying linearly over its "
    "1 500 updates, γ 0.99, return standardisation, actions squashed by tanh and scaled to the "
    "bounds; the greedy action is the mean, squashed and scaled the same way.",
    "**Stable-Baselines3 2.9.2 A2C** with rl-baselines3-zoo's hyperparameters "
    "(`hyperparams/a2c.yml`: CartPole-v1 n_envs 8, ent_coef 0.0; Acrobot-v1 n_envs 16, "
    "VecNormalize, ent_coef 0.0; the rest SB3 defaults: n_steps 5, RMSprop 7e-4, γ 0.99). "
    f"The zoo lists no {BOX_ENV}: there A2C runs with SB3's defaults (one env, no "
    "VecNormalize, a Gaussian with a state-independent log σ initialised to 0; the greedy "
    "action is the mean, clipped to the bounds).",
    "**plain-PyTorch REINFORCE** in the style of pytorch/examples `reinforce.py`, written for "
    "this benchmark: one env, MLP 128 units with dropout 0.6 and a softmax, `Categorical(probs)`, "
    "one update per episode on normalised reward-to-go, Adam 1e-2, γ 0.99. On "
    f"{BOX_ENV} the softmax becomes a Gaussian: the MLP gives the mean, a state-independent "
    "log σ (initialised to 0) is learnt beside it, the sampled action is clipped to the bounds "
    "by the env step; the greedy action is the mean.",
]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH), env.get("PYTHONPATH")]))
    return env


def _python(args: list[str], timeout: float) -> subprocess.CompletedProcess[str] | None:
    """``python <args>`` with one thread and ``bench/`` importable; None if it timed out."""
    try:
        return subprocess.run(
            [sys.executable, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_env(),
            cwd=ROOT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None


def _last_line(p: subprocess.CompletedProcess[str]) -> str:
    tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
    return tail[0][:200]


def run_process(args: list[str], timeout: float) -> dict[str, Any]:
    """Run ``python bench/<args>``; parse its ``RESULT`` line, or describe how it failed."""
    p = _python(args, timeout)
    if p is None:
        return {"error": "timeout"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line.removeprefix("RESULT "))
    return {"error": f"crash: {_last_line(p)}"}


def run_process_plain(args: list[str], timeout: float) -> str | None:
    """Run a script that writes its own JSON; None on success, else what went wrong."""
    p = _python(args, timeout)
    if p is None:
        return "timeout"
    if p.returncode != 0:
        return f"exit {p.returncode}: {_last_line(p)}"
    return None


def loss_markdown(loss: Any) -> str | None:
    """The loss benchmark's own markdown (its ``to_markdown``), imported from its script."""
    try:
        if str(LOSSES) not in sys.path:
            sys.path.append(str(LOSSES))
        import reinforce_loss

        return reinforce_loss.to_markdown(loss)
    except Exception as exc:  # its section must not sink the whole report
        return f"## Loss benchmark\n\n(rendering failed: {exc!r})"


def solve_section(
    env_id: str, systems: list[str], seeds: list[int], cap: float, max_steps: int, jobs: int
) -> dict[str, Any]:
    """Time-to-solve runs of ``systems`` × ``seeds``, interleaved, ``jobs`` at a time."""
    tasks = []
    for i, seed in enumerate(seeds):
        order = systems[i % len(systems) :] + systems[: i % len(systems)]
        tasks += [(system, seed) for system in order]
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}

    def one(task: tuple[str, int]) -> tuple[str, dict[str, Any]]:
        system, seed = task
        argv = [
            str(BENCH / "solve.py"),
            system,
            "--env",
            env_id,
            "--seed",
            str(seed),
            "--cap",
            str(cap),
            "--max-steps",
            str(max_steps),
        ]
        rec = run_process(argv, timeout=cap + 60)  # the runner enforces cap; this is a backstop
        rec.setdefault("system", system)
        rec.setdefault("seed", seed)
        rec.setdefault("solved", False)
        return system, rec

    with cf.ThreadPoolExecutor(max_workers=jobs) as pool:
        for system, rec in pool.map(one, tasks):
            runs[system].append(rec)
            status = "solved" if rec.get("solved") else f"FAILED ({rec.get('error')})"
            print(
                f"  {env_id} {system:18s} seed {rec['seed']}: {status} "
                f"train {rec.get('train_s', float('nan')):.2f} s, "
                f"{rec.get('env_steps', 0)} steps",
                flush=True,
            )
    return {
        "target": TARGETS[env_id],
        "seeds": seeds,
        "cap_s": cap,
        "max_steps": max_steps,
        "systems": {s: {"summary": summarize(r), "runs": r} for s, r in runs.items()},
    }


def chart(env_id: str, env_result: dict[str, Any], path: Path) -> None:
    """Strip plot of train wall time to solve per system (failures marked at the cap)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(env_result["systems"])
    fig, ax = plt.subplots(figsize=(8, 0.7 * len(names) + 1.5))
    for i, name in enumerate(names):
        runs = env_result["systems"][name]["runs"]
        ok = [r["train_s"] for r in runs if r.get("solved")]
        bad = len(runs) - len(ok)
        ax.scatter(ok, [i] * len(ok), color="C0", alpha=0.7, zorder=3)
        if ok:
            med = statistics.median(ok)
            ax.plot([med, med], [i - 0.3, i + 0.3], color="k", lw=2, zorder=4)
        if bad:
            ax.scatter([env_result["cap_s"]], [i], marker="x", color="C3", zorder=3)
            ax.annotate(
                f"{bad} failed",
                (env_result["cap_s"], i),
                textcoords="offset points",
                xytext=(6, 6),
                color="C3",
                fontsize=8,
            )
    ax.set_yticks(range(len(names)), [SYSTEM_LABELS.get(n, n) for n in names], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("train wall time to solve, s (log; evaluation excluded; bar: median)")
    ax.set_title(f"{env_id}: time to solve, one point per seed")
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)


def machine() -> list[str]:
    lines = [
        f"{platform.platform()}",
        f"python {platform.python_version()}",
        f"os.cpu_count() = {os.cpu_count()}",
    ]
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        keep = (
            "Model name",
            "CPU(s):",
            "Thread(s) per core",
            "Core(s) per socket",
            "L2 cache",
            "L3 cache",
            "Hypervisor vendor",
        )
        lines += [" ".join(ln.split()) for ln in out.splitlines() if ln.startswith(keep)]
    except OSError:
        pass
    try:
        mem = Path("/proc/meminfo").read_text().splitlines()[0]
        lines.append(" ".join(mem.split()))
    except OSError:
        pass
    return lines


def versions() -> dict[str, str]:
    out = {}
    for dist in ("eligibility", "numpy", "torch", "gymnasium", "tianshou", "stable_baselines3"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


def render_only(results_json: Path, docs: Path) -> None:
    """Write ``docs`` from an existing results file, measuring nothing (charts left as they are).

    The loss section is rendered from ``results["loss"]``, as in a full run.
    """
    results = json.loads(results_json.read_text())
    loss_md = loss_markdown(results["loss"]) if results.get("loss") else None
    write_atomic(docs, render_markdown(results, loss_md))
    if docs == ROOT / "docs" / "measurements" / "classic.md":
        write_readme(results)


CARRIED = {"throughput": ("throughput",), "update": ("update_cost",), "loss": ("loss",)}
"""The sections a run may leave out and take from the previous results.json: key(s) each.

The time-to-solve sections (:data:`SOLVE_ENVS`) are carried too, each its env's entry of
``results["solve"]``."""


def carry_over(results: dict[str, Any], previous: Path, ran: list[str]) -> None:
    """Copy the sections not run this time from the previous ``results.json``, and say so.

    The page then shows each with the date of the run that measured it
    (``meta["carried"]``: section → that run's start).
    """
    if not previous.exists():
        return
    old = json.loads(previous.read_text())
    for section, keys in CARRIED.items():
        if section in ran or not all(k in old for k in keys):
            continue
        for k in keys:
            results[k] = old[k]
        started = old["meta"].get("carried", {}).get(section, old["meta"]["started"])
        results["meta"].setdefault("carried", {})[section] = started
    for section, env_id in SOLVE_ENVS.items():
        if section in ran or env_id not in old.get("solve", {}):
            continue
        results["solve"][env_id] = old["solve"][env_id]
        started = old["meta"].get("carried", {}).get(section, old["meta"]["started"])
        results["meta"].setdefault("carried", {})[section] = started
    # The page lists the envs in SOLVE_ENVS's order, whichever ran this time.
    order = [e for e in SOLVE_ENVS.values() if e in results["solve"]]
    results["solve"] = {e: results["solve"][e] for e in order}


def write_readme(results: dict[str, Any]) -> None:
    """README.md's benchmark table from the same results (full runs only, never --quick)."""
    if results["meta"].get("quick"):
        return
    readme = ROOT / "README.md"
    write_atomic(readme, splice_readme(readme.read_text(), readme_section(results)))


def update_cost(systems: list[str], quick: bool) -> dict[str, Any]:
    """The cost of one policy update per system (``update_cost.py``, one process each)."""
    n, reps = 4096, (5 if quick else 30)
    cost: dict[str, Any] = {"transitions": n, "systems": {}}
    for system in [*systems, "tianshou-config"] if "tianshou" in systems else systems:
        argv = [str(BENCH / "update_cost.py"), system, "--transitions", str(n)]
        cost["systems"][system] = run_process([*argv, "--reps", str(reps)], timeout=300)
    return cost


def run_loss(quick: bool) -> dict[str, Any]:
    """``bench/losses/reinforce_loss.py``'s results: ``{"loss": …}`` or ``{"loss_error": why}``."""
    # A quick run must not overwrite the full run's loss results.
    loss_json = RESULTS / ("reinforce_loss_quick.json" if quick else "reinforce_loss.json")
    script = LOSSES / "reinforce_loss.py"
    if not script.exists():
        return {"loss_error": "bench/losses/reinforce_loss.py not found"}
    rec = run_process_plain([str(script), "--json", str(loss_json)] + (["--quick"] * quick), 600)
    if rec is None and loss_json.exists():
        return {"loss": json.loads(loss_json.read_text())}
    return {"loss_error": rec or "no JSON written"}


def _parser() -> argparse.ArgumentParser:
    """The command line of ``run_all.py``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke run: 2 seeds, small caps")
    p.add_argument(
        "--only",
        action="append",
        choices=SYSTEMS,
        default=None,
        help="time-to-solve only this system (repeatable)",
    )
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help=f"the first N held-out seeds (default all {len(HELD_OUT_SEEDS)}; --quick 2)",
    )
    p.add_argument("--cap", type=float, default=None, help="wall cap per time-to-solve run, s")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    p.add_argument(
        "--docs",
        type=Path,
        default=None,
        help="markdown to write (default docs/measurements/classic.md; "
        "bench/results/benchmarks_quick.md with --quick)",
    )
    p.add_argument(
        "--render-only",
        action="store_true",
        help="measure nothing: write the markdown again from bench/results/results.json "
        "(results_quick.json with --quick)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    t_start = time.perf_counter()
    quick = args.quick
    n_seeds = args.seeds or (2 if quick else len(HELD_OUT_SEEDS))
    seeds = list(HELD_OUT_SEEDS[:n_seeds])
    cap = args.cap or (30.0 if quick else 120.0)
    docs = args.docs or (
        RESULTS / "benchmarks_quick.md" if quick else ROOT / "docs" / "measurements" / "classic.md"
    )
    results_json = RESULTS / ("results_quick.json" if quick else "results.json")
    if args.render_only:
        render_only(results_json, docs)
        print(f"wrote {docs} from {results_json}")
        return 0
    img_dir = docs.parent
    systems = list(args.only or SYSTEMS)
    RESULTS.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "meta": {
            "command": shlex.join(
                [
                    "python",
                    "bench/classic/run_all.py",
                    *(argv if argv is not None else sys.argv[1:]),
                ]
            ),
            "started": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "quick": quick,
            "jobs": args.jobs,
            "load_average": [os.getloadavg()],
            "machine": machine(),
            "versions": versions(),
            "systems_notes": SYSTEMS_NOTES,
        },
        "solve": {},
    }

    for section, env_id in SOLVE_ENVS.items():
        if section in args.sections:
            print(f"{env_id}: {systems} × seeds {seeds}, cap {cap:g} s, {args.jobs} at a time")
            res = solve_section(env_id, systems, seeds, cap, 1_000_000, args.jobs)
            results["solve"][env_id] = res
    if "throughput" in args.sections:
        print("throughput")
        steps = 20_000 if quick else 100_000
        rec = run_process([str(BENCH / "throughput.py"), "--steps", str(steps)], timeout=600)
        results["throughput"] = rec.get("rows", [])
        if "error" in rec:
            results["throughput_error"] = rec["error"]
    if "update" in args.sections:
        print("per-update cost")
        results["update_cost"] = update_cost(systems, quick)
    if "loss" in args.sections:
        print("loss benchmark (bench/losses/reinforce_loss.py)")
        results.update(run_loss(quick))

    if not quick:
        carry_over(results, results_json, args.sections)
    for env_id, env_result in results["solve"].items():
        png = img_dir / f"benchmarks_{env_id.split('-')[0].lower()}.png"
        chart(env_id, env_result, png)
        env_result["chart"] = png.name
    loss_md = loss_markdown(results["loss"]) if results.get("loss") else None
    results["meta"]["elapsed_s"] = time.perf_counter() - t_start
    results["meta"]["load_average"].append(os.getloadavg())
    write_atomic(results_json, json.dumps(results, indent=1))
    write_atomic(docs, render_markdown(results, loss_md))
    if docs == ROOT / "docs" / "measurements" / "classic.md":
        write_readme(results)
    print(f"wrote {docs} in {results['meta']['elapsed_s'] / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
