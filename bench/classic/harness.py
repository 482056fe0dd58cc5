"""Pure parts of the benchmark harness: the solve criterion, summaries, the markdown report.

Nothing here imports torch, gymnasium or a peer library, so the unit test runs without the
``bench`` extra. The runners (``bench/classic/solve.py`` and friends) and the driver
(``bench/classic/run_all.py``) import this module; it holds no state.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# One criterion for every system: mean return over EVAL_EPISODES greedy episodes ≥ target,
# checked every EVAL_EVERY env steps (at the first update boundary at or after each multiple)
# and whenever the mean return of the training episodes of an update crosses the target.
EVAL_EVERY = 2_000
EVAL_EPISODES = 100
EVAL_ENVS = 100  # the sub-envs a test plays its episodes on: Config.eval_envs's default
TARGETS = {"CartPole-v1": 475.0, "Acrobot-v1": -100.0, "InvertedPendulum-v5": 950.0}
"""Each env's registered ``reward_threshold``: the solve criterion of every system."""
BOX_ENV = "InvertedPendulum-v5"
"""The Box-action env of the bench: MuJoCo's, the one with a registered target that runs here."""
# Disjoint seed sets: the defaults were chosen on TUNING_SEEDS (docs/training.md); the bench
# reports on HELD_OUT_SEEDS only. The bench's seeds before this protocol, 0-9, are in neither.
TUNING_SEEDS = tuple(range(1000, 1050))
HELD_OUT_SEEDS = tuple(range(2000, 2020))

SYSTEMS = ("eligibility-numpy", "eligibility-torch", "tianshou", "sb3-a2c", "torch-example")
SYSTEM_LABELS = {
    "eligibility-numpy": "eligibility (numpy backend)",
    "eligibility-torch": "eligibility (torch backend)",
    "tianshou": "Tianshou REINFORCE",
    "sb3-a2c": "Stable-Baselines3 A2C (rl-zoo)",
    "torch-example": "plain-PyTorch REINFORCE (pytorch/examples style)",
    # Per-update cost only: Tianshou's update as its CartPole test configures it.
    "tianshou-config": "Tianshou REINFORCE, its test's configuration",
}


@dataclass
class EvalCadence:
    """When the greedy evaluation is due: once per crossed multiple of ``every`` env steps.

    A system that updates every k env steps calls :meth:`due` after each update with its running
    env-step count; the evaluation then happens at the first update boundary at or after each
    multiple of ``every``. Several multiples crossed by one long update give one evaluation.
    """

    every: int = EVAL_EVERY
    next_at: int = EVAL_EVERY
    target: float | None = None
    previous: float | None = None  # the mean training return of the last update that had one

    def __post_init__(self) -> None:
        if self.every <= 0:
            raise ValueError(f"every must be a positive number of env steps, got {self.every}")
        self.next_at = self.every

    def due(self, env_steps: int, train_mean: float | None = None) -> bool:
        """True when ``env_steps`` has reached the next multiple of ``every`` (and advance it),
        or when ``train_mean``, the mean return of the episodes that ended in this update,
        crosses ``target`` from below (:func:`eligibility.reinforce.stopping.crossed`, the rule
        ``train`` uses; None: no episode ended, no crossing).
        """
        from eligibility.reinforce.stopping import crossed

        cross = False
        if train_mean is not None:
            cross = crossed(self.previous, train_mean, self.target)
            self.previous = train_mean
        if env_steps < self.next_at:
            return cross
        self.next_at = (env_steps // self.every + 1) * self.every
        return True


def is_solved(returns: Sequence[float], target: float, episodes: int = EVAL_EPISODES) -> bool:
    """Solved ⇔ (1/N) Σᵢ Rᵢ ≥ target over exactly N = ``episodes`` evaluation episodes."""
    if len(returns) != episodes:
        raise ValueError(f"expected {episodes} evaluation returns, got {len(returns)}")
    return math.fsum(returns) / episodes >= target


def _stats(xs: Sequence[float]) -> dict[str, float | None]:
    if not xs:
        return {"median": None, "min": None, "max": None}
    return {"median": float(statistics.median(xs)), "min": float(min(xs)), "max": float(max(xs))}


def summarize(runs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Success rate and median/min/max of wall time, env steps and episodes over solved runs.

    Failed runs (not solved, capped, crashed, timed out) count in the denominator of the success
    rate and are listed by their reason; their times are not mixed into the solved statistics.
    ``train_s`` is wall time without evaluation; ``eval_s`` the evaluation time, counted apart.
    """
    runs = list(runs)
    solved = [r for r in runs if r.get("solved")]
    failures: dict[str, int] = {}
    for r in runs:
        if not r.get("solved"):
            reason = str(r.get("error") or "not solved")
            failures[reason] = failures.get(reason, 0) + 1
    return {
        "runs": len(runs),
        "solved": len(solved),
        "success_rate": (len(solved) / len(runs)) if runs else None,
        "train_s": _stats([float(r["train_s"]) for r in solved]),
        "eval_s": _stats([float(r["eval_s"]) for r in solved]),
        "env_steps": _stats([float(r["env_steps"]) for r in solved]),
        "env_steps_iqm": iqm([float(r["env_steps"]) for r in solved]),
        "eval_env_steps": _stats([float(r.get("eval_env_steps", 0)) for r in solved]),
        "episodes": _stats([float(r["episodes"]) for r in solved]),
        "process_wall_s": _stats(
            [float(r["process_wall_s"]) for r in solved if r.get("process_wall_s")]
        ),
        "process_cpu_s": _stats(
            [float(r["process_cpu_s"]) for r in solved if r.get("process_cpu_s")]
        ),
        "failures": failures,
    }


def iqm(xs: Sequence[float]) -> float | None:
    """The interquartile mean: the mean of the middle half, ⌊n/4⌋ dropped from each end."""
    if not xs:
        return None
    k = len(xs) // 4
    mid = sorted(xs)[k : len(xs) - k]
    return math.fsum(mid) / len(mid)


def _fmt(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "–"
    if digits == 0 and not float(x).is_integer():
        digits = 1  # the median of an even number of counts ends in .5: show it, don't round it
    return f"{x:,.{digits}f}"


def _mmm(s: Mapping[str, float | None], digits: int = 1) -> str:
    if s["median"] is None:
        return "–"
    return f"{_fmt(s['median'], digits)} ({_fmt(s['min'], digits)}–{_fmt(s['max'], digits)})"


def solve_table(env_result: Mapping[str, Any]) -> str:
    """Markdown table of one environment's time-to-solve results, one row per system."""
    lines = [
        "| system | solved | env steps to solve, median (min–max) | IQM | "
        "eval env steps, median | process wall s, median | process CPU s, median | "
        "train wall s, median |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, sysres in env_result["systems"].items():
        s = sysres["summary"]
        label = SYSTEM_LABELS.get(name, name)
        solved = f"{s['solved']}/{s['runs']}"
        if s["failures"]:
            solved += " (" + ", ".join(f"{k}: {v}" for k, v in sorted(s["failures"].items())) + ")"
        lines.append(
            f"| {label} | {solved} | {_mmm(s['env_steps'], 0)} | "
            f"{_fmt(s.get('env_steps_iqm'), 0)} | "
            f"{_fmt(s.get('eval_env_steps', {}).get('median'), 0)} | "
            f"{_fmt(s.get('process_wall_s', {}).get('median'), 2)} | "
            f"{_fmt(s.get('process_cpu_s', {}).get('median'), 2)} | "
            f"{_fmt(s['train_s']['median'], 2)} |"
        )
    return "\n".join(lines)


def paired_ratio(
    env_result: Mapping[str, Any], ours: str, peer: str, key: str
) -> tuple[float, int] | None:
    """Median over seeds of peer's ``key`` ÷ ours (seeds both solved), and how many seeds."""

    def by_seed(name: str) -> dict[int, float]:
        runs = env_result["systems"][name]["runs"]
        return {r["seed"]: float(r[key]) for r in runs if r.get("solved") and r.get(key)}

    a, b = by_seed(ours), by_seed(peer)
    both = sorted(set(a) & set(b))
    if not both:
        return None
    return float(statistics.median(b[s] / a[s] for s in both)), len(both)


def ratios(env_result: Mapping[str, Any], ours: str, peers: Sequence[str]) -> list[str]:
    """Sentences: ours is r× faster than each peer, r the median of per-seed paired ratios."""
    systems = env_result["systems"]
    out = []
    if ours not in systems:
        return out
    for peer in peers:
        if peer not in systems:
            continue
        wall = paired_ratio(env_result, ours, peer, "process_wall_s")
        cpu = paired_ratio(env_result, ours, peer, "process_cpu_s")
        if wall is None or cpu is None:
            out.append(f"{SYSTEM_LABELS.get(peer, peer)}: no seed solved by both, no ratio.")
            continue
        out.append(
            f"{SYSTEM_LABELS.get(ours, ours)} is {wall[0]:.1f}× faster in process wall and "
            f"{cpu[0]:.1f}× in process CPU than {SYSTEM_LABELS.get(peer, peer)} (median of the "
            f"per-seed ratios over the {wall[1]} seeds both solved)."
        )
    return out


def throughput_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown table: training env-steps/s against random-action env-steps/s, per num_envs."""
    lines = [
        "| backend | num_envs | training env-steps/s | random-action env-steps/s | ratio |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['num_envs']} | {r['train_steps_per_s']:,.0f} | "
            f"{r['random_steps_per_s']:,.0f} | {r['ratio']:.0%} |"
        )
    return "\n".join(lines)


def update_cost_table(cost: Mapping[str, Any]) -> str:
    """Markdown table of the time of one policy update on the same number of transitions."""
    lines = [
        "| system | what one update does | ms per update, median (min–max) |",
        "|---|---|---|",
    ]
    for name, r in cost["systems"].items():
        if "error" in r:
            lines.append(f"| {SYSTEM_LABELS.get(name, name)} | {r['error']} | – |")
            continue
        lines.append(
            f"| {SYSTEM_LABELS.get(name, name)} | {r['what']} | "
            f"{r['ms']['median']:.2f} ({r['ms']['min']:.2f}–{r['ms']['max']:.2f}) |"
        )
    return "\n".join(lines)


def _moved(command: str) -> str:
    """A recorded command with the driver at its present path (it was ``bench/run_all.py``)."""
    return command.replace("bench/run_all.py", "bench/classic/run_all.py")


def _header(meta: Mapping[str, Any]) -> list[str]:
    """The page's title, machine, run and load lines."""
    out = [
        "# Benchmarks",
        "",
        "Generated by `bench/classic/run_all.py` from `bench/results/results.json`; do not edit by "
        "hand.",
        f"Regenerate with `{_moved(meta['command'])}` (`make bench` runs the full protocol).",
        "",
        "## Machine",
        "",
        "```",
        *meta["machine"],
        "```",
        "",
        f"Run started {meta['started']}, took {meta.get('elapsed_s', 0.0) / 60:.1f} min; "
        f"{meta['jobs']} run(s) at a time; every run in its own process with one thread "
        "(OMP/MKL/OPENBLAS_NUM_THREADS=1, torch.set_num_threads(1)).",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(meta["versions"].items())) + ".",
    ]
    if meta.get("load_average"):
        loads = "; ".join(" ".join(f"{x:.1f}" for x in la) for la in meta["load_average"])
        out += [
            "",
            f"Load average (1, 5, 15 min) sampled during the run: {loads}. On a "
            "loaded machine wall times stretch; CPU times (user + system) much less.",
        ]
    if meta.get("quick"):
        out += ["", "**Quick smoke run (`--quick`): few seeds, small caps; not the real figures.**"]
    if meta.get("carried"):
        out += [
            "",
            "Not measured by this run, kept from the run that measured them: "
            + ", ".join(f"{k} (run started {v})" for k, v in sorted(meta["carried"].items()))
            + ".",
        ]
    return out


def _protocol(meta: Mapping[str, Any]) -> list[str]:
    """The protocol section: the criterion, the test's triggers and rule, the clocks, seeds."""
    return [
        "",
        "## Protocol",
        "",
        f"Solved = mean return over {EVAL_EPISODES} greedy (mode-of-the-policy) evaluation "
        "episodes ≥ target. Every system is tested by the same rule: after the update that "
        f"crosses each multiple of {EVAL_EVERY:,} env steps, and after an update whose training "
        "episodes' mean return crosses the target from below. The test stops as soon as its "
        "verdict is certain (docs/training.md: a fail once even perfect remaining steps cannot "
        "bring the mean to the target), and its env steps are counted apart from training's "
        "(*eval env steps*). *env steps to solve* are training env steps. *process wall* and "
        "*process CPU* (user + system) are the run's whole process, from its start (imports "
        "included) to the solving test, the trainer called from Python "
        "(`bench/classic/solve.py`), as "
        "each peer's is; for this project that leaves out what `eligibility train` adds as a "
        "command: its run directory (config.json, metrics.csv, TensorBoard events, the "
        "checkpoint) and learning_curve.png (matplotlib). *train wall* leaves the tests out. "
        "The peers are "
        "tested by one evaluator (`bench/classic/common.py`: the trainer's own sequential test on "
        f"{EVAL_EPISODES} episodes on {EVAL_ENVS} environments, seeds distinct from training); "
        "this project by its trainer. Runs are interleaved across systems (seed-major order, "
        "the system order rotated per seed); the speed ratios are medians of per-seed ratios. "
        "A run that hits its wall cap or step budget counts as a failure. Seeds: held-out "
        f"{HELD_OUT_SEEDS[0]}–{HELD_OUT_SEEDS[-1]} (the defaults were chosen on "
        f"{TUNING_SEEDS[0]}–{TUNING_SEEDS[-1]}, docs/training.md).",
        "",
        *[f"- {line}" for line in meta.get("systems_notes", [])],
    ]


def _solve_section(env_id: str, env_result: Mapping[str, Any]) -> list[str]:
    """One env's time-to-solve section: the table, the paired ratios, the chart."""
    out = [
        "",
        f"## Time to solve {env_id} (target {env_result['target']:g})",
        "",
        f"Seeds {env_result['seeds']}; wall cap {env_result['cap_s']:g} s per run "
        "(training + evaluation).",
        "",
        solve_table(env_result),
    ]
    peers = ["tianshou", "sb3-a2c", "torch-example"]
    lines = ratios(env_result, "eligibility-numpy", peers)
    if lines:
        out += ["", *[f"- {line}" for line in lines]]
    if env_result.get("chart"):
        out += ["", f"![time to solve {env_id}]({env_result['chart']})"]
    return out


def render_markdown(results: Mapping[str, Any], loss_markdown: str | None = None) -> str:
    """The whole docs/measurements/classic.md from a results dict (see ``run_all.py``)."""
    out = _header(results["meta"]) + _protocol(results["meta"])
    for env_id, env_result in results.get("solve", {}).items():
        out += _solve_section(env_id, env_result)
    if results.get("throughput"):
        out += [
            "",
            "## Throughput against the limit",
            "",
            "Training env-steps/s of this project's trainer (no evaluation) against random-action "
            "env-steps/s of the same vectorised env, measured back to back in the same process.",
            "",
            throughput_table(results["throughput"]),
        ]
    if results.get("update_cost"):
        cost = results["update_cost"]
        out += [
            "",
            f"## Cost of one policy update ({cost['transitions']:,} transitions)",
            "",
            "One gradient step of the policy on the same number of CartPole-v1 transitions; "
            "collection not included.",
            "",
            update_cost_table(cost),
        ]
    if loss_markdown:
        out += [
            "",
            "## Analytic REINFORCE losses for PyTorch (`eligibility.torch`)",
            "",
            "Forward + backward of `reinforce_loss` (the closed-form eligibility as the backward "
            "pass) against `-(A * Categorical(logits=L).log_prob(a)).mean()` with autograd, and "
            "of `fused_linear_reinforce_loss` against materialising the logits; "
            "method and discussion in [torch-losses.md](../torch-losses.md).",
            "",
            loss_markdown.strip(),
        ]
    return "\n".join(out) + "\n"


README_START = "<!-- generated from bench/results/results.json: start -->"
README_END = "<!-- generated from bench/results/results.json: end -->"

SECTION_OF_ENV = {"CartPole-v1": "cartpole", "Acrobot-v1": "acrobot", BOX_ENV: "box"}
"""``run_all.py --sections`` name of each time-to-solve env."""


def readme_section(results: Mapping[str, Any]) -> str:
    """The README's one measured sentence: CartPole-v1, ours against the peers, with its command.

    Every number comes from ``results`` (the measurement record, docs/measurements/classic.md):
    solved seeds, median env steps and process wall of the NumPy backend, and the range of the
    paired process-wall ratios against the peers that solved the same seeds.
    """
    env_id = "CartPole-v1"
    env = results["solve"][env_id]
    ours = env["systems"]["eligibility-numpy"]["summary"]
    peers = [p for p in ("tianshou", "sb3-a2c", "torch-example") if p in env["systems"]]
    walls = [paired_ratio(env, "eligibility-numpy", p, "process_wall_s") for p in peers]
    found = [w[0] for w in walls if w is not None]
    started = results["meta"].get("carried", {}).get("cartpole", results["meta"]["started"])
    command = (
        f"python bench/classic/run_all.py --sections {SECTION_OF_ENV[env_id]} "
        f"--seeds {len(env['seeds'])} --cap {env['cap_s']:g}"
    )
    names = ", ".join(SYSTEM_LABELS.get(p, p) for p in peers)
    return (
        f"On {env_id} the NumPy backend solved {ours['solved']} of {ours['runs']} held-out seeds "
        f"in a median of {_fmt(ours['env_steps']['median'], 0)} env steps and "
        f"{ours['process_wall_s']['median']:.2f} s of process wall, "
        f"{min(found):.1f}–{max(found):.1f}× faster than {names} "
        f"(medians of per-seed ratios; `{command}`, {started[:10]}).\n"
    )


def splice_readme(readme: str, section: str) -> str:
    """``readme`` with the text between :data:`README_START` and :data:`README_END` replaced."""
    head, start, rest = readme.partition(README_START)
    _, end, tail = rest.partition(README_END)
    if not start or not end:
        raise ValueError(f"README.md lacks the markers {README_START!r} … {README_END!r}")
    return f"{head}{README_START}\n{section}{README_END}{tail}"


def readme_block(readme: str) -> str:
    """The generated text between the README's markers."""
    return readme.partition(README_START)[2].partition(README_END)[0].lstrip("\n")
