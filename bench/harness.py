"""Pure parts of the benchmark harness: the solve criterion, summaries, the markdown report.

Nothing here imports torch, gymnasium or a peer library, so the unit test runs without the
``bench`` extra. The runners (``bench/solve.py`` and friends) and the driver
(``bench/run_all.py``) import this module; it holds no state.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# One criterion for every system: mean return over EVAL_EPISODES greedy episodes ≥ target,
# checked every EVAL_EVERY env steps (at the first update boundary at or after each multiple).
EVAL_EVERY = 10_000
EVAL_EPISODES = 100
TARGETS = {"CartPole-v1": 475.0, "Acrobot-v1": -100.0}

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

    def __post_init__(self) -> None:
        if self.every <= 0:
            raise ValueError(f"every must be a positive number of env steps, got {self.every}")
        self.next_at = self.every

    def due(self, env_steps: int) -> bool:
        """True when ``env_steps`` has reached the next multiple of ``every`` (and advance it)."""
        if env_steps < self.next_at:
            return False
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
        "episodes": _stats([float(r["episodes"]) for r in solved]),
        "failures": failures,
    }


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
        "| system | solved | train wall s, median (min–max) | eval wall s, median | "
        "env steps to solve, median (min–max) | episodes to solve, median (min–max) |",
        "|---|---|---|---|---|---|",
    ]
    for name, sysres in env_result["systems"].items():
        s = sysres["summary"]
        label = SYSTEM_LABELS.get(name, name)
        solved = f"{s['solved']}/{s['runs']}"
        if s["failures"]:
            solved += " (" + ", ".join(f"{k}: {v}" for k, v in sorted(s["failures"].items())) + ")"
        lines.append(
            f"| {label} | {solved} | {_mmm(s['train_s'], 2)} | {_fmt(s['eval_s']['median'], 2)} | "
            f"{_mmm(s['env_steps'], 0)} | {_mmm(s['episodes'], 0)} |"
        )
    return "\n".join(lines)


def ratios(env_result: Mapping[str, Any], ours: str, peers: Sequence[str]) -> list[str]:
    """Sentences "peer median / ours median" for the systems present in ``env_result``."""
    systems = env_result["systems"]
    out = []
    if ours not in systems or systems[ours]["summary"]["train_s"]["median"] is None:
        return out
    t_ours = systems[ours]["summary"]["train_s"]["median"]
    for peer in peers:
        if peer not in systems:
            continue
        t_peer = systems[peer]["summary"]["train_s"]["median"]
        if t_peer is None:
            out.append(f"{SYSTEM_LABELS.get(peer, peer)}: solved no seed, no ratio.")
        else:
            out.append(
                f"{SYSTEM_LABELS.get(ours, ours)} is {t_peer / t_ours:.1f}× faster (median train "
                f"wall) than {SYSTEM_LABELS.get(peer, peer)}."
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


def render_markdown(results: Mapping[str, Any], loss_markdown: str | None = None) -> str:
    """The whole docs/benchmarks.md from a results dict (see ``bench/run_all.py``)."""
    meta = results["meta"]
    out = [
        "# Benchmarks",
        "",
        "Generated by `bench/run_all.py` from `bench/results/results.json`; do not edit by hand.",
        f"Regenerate with `{meta['command']}` (`make bench` runs the full protocol).",
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
    if meta.get("quick"):
        out += ["", "**Quick smoke run (`--quick`): few seeds, small caps; not the real figures.**"]
    out += [
        "",
        "## Protocol",
        "",
        f"Solved = mean return over {EVAL_EPISODES} greedy (mode-of-the-policy) evaluation "
        f"episodes ≥ target, checked every {EVAL_EVERY:,} env steps: at the first update boundary "
        "at or after each multiple (every system here updates at least once per "
        f"{EVAL_EVERY:,} steps). Evaluation time is counted apart (*eval wall*); *train wall* is "
        "the wall time of training alone, from the first env reset to the update after which the "
        "criterion held. The peers are evaluated by one shared evaluator (`bench/common.py`: "
        f"{EVAL_EPISODES} environments, first episode of each, seeds distinct from "
        "training); this project uses its own `evaluate` with the same criterion. Runs are "
        "interleaved across systems (seed-major order). A run that hits its wall cap or step "
        "budget counts as a failure.",
        "",
        *[f"- {line}" for line in meta.get("systems_notes", [])],
    ]
    for env_id, env_result in results.get("solve", {}).items():
        out += [
            "",
            f"## Time to solve {env_id} (target {env_result['target']:g})",
            "",
            f"Seeds {env_result['seeds']}; wall cap {env_result['cap_s']:g} s per run "
            "(training + evaluation).",
            "",
            solve_table(env_result),
        ]
        lines = ratios(env_result, "eligibility-numpy", ["tianshou", "sb3-a2c", "torch-example"])
        if lines:
            out += ["", *[f"- {line}" for line in lines]]
        if env_result.get("chart"):
            out += ["", f"![time to solve {env_id}]({env_result['chart']})"]
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
            "method and discussion in [torch-losses.md](torch-losses.md).",
            "",
            loss_markdown.strip(),
        ]
    return "\n".join(out) + "\n"


README_START = "<!-- generated by bench/run_all.py from bench/results/results.json: start -->"
README_END = "<!-- generated by bench/run_all.py from bench/results/results.json: end -->"


def readme_section(results: Mapping[str, Any]) -> str:
    """The README's benchmark table and its sentences, from the same results as the docs."""
    cart = results["solve"]["CartPole-v1"]
    n = len(cart["seeds"])
    lines = [
        f"| CartPole-v1, median over {n} seeds | solved | train wall | env steps |",
        "|---|---|---|---|",
    ]
    med: dict[str, float | None] = {}
    for name, sysres in cart["systems"].items():
        s = sysres["summary"]
        med[name] = s["train_s"]["median"]
        wall = "–" if med[name] is None else f"{med[name]:.2f} s"
        lines.append(
            f"| {SYSTEM_LABELS.get(name, name)} | {s['solved']}/{s['runs']} | {wall} | "
            f"{_fmt(s['env_steps']['median'], 0)} |"
        )
    ours = med.get("eligibility-numpy")
    peers = [
        f"{t / ours:.2g}× faster than {SYSTEM_LABELS[p]}"
        for p in ("tianshou", "sb3-a2c", "torch-example")
        if ours and (t := med.get(p)) is not None
    ]
    text = []
    if peers:
        text.append("The NumPy backend is " + ", ".join(peers) + " (median train wall)")
    acro = results["solve"].get("Acrobot-v1", {}).get("systems", {}).get("eligibility-numpy")
    if acro:
        s = acro["summary"]
        wall = s["train_s"]["median"]
        text.append(
            f"it solves Acrobot-v1 on {s['solved']} of {s['runs']} seeds"
            + ("" if wall is None else f" (median {wall:.1f} s of training)")
        )
    wide = [
        r for r in results.get("throughput", []) if r["backend"] == "numpy" and r["num_envs"] == 64
    ]
    if wide:
        r = wide[0]
        text.append(
            f"at 64 sub-envs training runs at {r['ratio']:.0%} of random-action speed "
            f"(Gymnasium's vectorised CartPole steps 64 envs in about "
            f"{64e6 / r['random_steps_per_s']:.0f} µs; training takes about "
            f"{64e6 / r['train_steps_per_s']:.0f} µs per 64 env steps, so the trainer's own work "
            "dominates)"
        )
    return "\n".join(lines) + "\n\n" + "; ".join(text) + ".\n"


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
