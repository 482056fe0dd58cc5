"""``eligibility finetune --max-staleness k`` against the alternating loop and TRL's
``GRPOTrainer``: updates per hour, the held-out target in wall time, the learning per update; and
how this machine's threads scale on a sampling and a scoring pass (the bound for two roles).

    make kit
    python bench/lm/lm_async.py scaling --json bench/results/lm_async_scaling.json
    python bench/lm/lm_async.py run --setting completions --seeds 0 1 2 \
        --systems sync async-1 async-2 trl --json bench/results/lm_async_completions.json
    python bench/lm/lm_async.py run --setting agent --tool-delay 0.5 --seeds 0 1 2 \
        --systems sync async-1 async-2 trl --json bench/results/lm_async_agent.json
    python bench/lm/lm_async.py report bench/results/lm_async_*.json --target 0.5
    python bench/lm/lm_async.py run --setting agent --dry-run   # wiring: one seed, 2 updates
    python bench/lm/lm_async.py run --setting agent --tool-delay 0.5 --seeds 0 1 2 \
        --systems sync async-1 --max-env-workers 1 --json bench/results/lm_async_agent_one.json

``run``: every seed × system, each a whole process of its own (``lm_trl.child``: its wall and CPU
seconds, its peak memory), the systems' order alternating from one seed to the next, on the
same model directory, files, reward, rate, G completions of P prompts an update and threads:

- ``sync``: ``eligibility finetune`` as it is, sampling and learning in turn;
- ``async-K``: the same with ``--max-staleness K`` (``--stale-batches wait``) and
  ``--importance-sampling exact`` (the unbiased weight of a stale batch), each of its two
  processes at ``--async-threads`` (1: the two roles on two cores, one each);
- ``trl``: ``GRPOTrainer`` with TRL 1.16's defaults, as ``lm_real_race.py`` (``--setting
  completions``) and ``lm_tool_race.py`` (``--setting agent``) run it.

``--setting completions``: the kit's ``--task`` (``multiply``) on SmolLM2-135M-Instruct, the
held-out exact match every ``--eval-every`` updates (``lm_real_race.py``'s runs). ``--setting
agent``: the calculator task of ``lm_tool_race.py`` (``multiply-tool-S``, ``--shots S``) on the
kit's tool model, ``bench/lm/calculator.py:Calculator`` the environment, each of its calls made
to take ``--tool-delay`` seconds (``CALCULATOR_DELAY_S``, read by the calculator: both systems
wait alike). Ours makes a turn's calls of every episode at once by default; ``--max-env-workers
1`` makes them one after another (as TRL 1.16 makes a batch's synchronous calls), so the same
run with and without it is what running the calls at once buys.

Per run (the race scripts' measures): the held-out accuracy at each evaluation against the
training seconds at it (evaluations taken out), ``train_s``, the updates, and the process's
seconds. ``report``: per system, updates per hour (updates × 3600 / ``train_s``) and its ratio to
``sync`` on the same seed (the paired ratio; their geometric mean over seeds), the training
seconds to the first evaluation at or past ``--target`` and its ratio to ``sync``'s and
``trl``'s where both reach it, and the held-out accuracy at each evaluated update (the learning
per update, stale or not).

``scaling``: a sampling pass (``lm.sample.sample``: G completions of P prompts, T tokens) and a
scoring pass (``lm.sample.token_logps`` with its backward) of the kit's model, each timed in a
process of its own at 1 and at 2 threads, alternating, ``--repeats`` times: the speed-up of 2
threads over 1 is what one role loses when the two share two cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
KIT = Path(os.environ.get("ELIGIBILITY_KIT", Path.home() / ".cache" / "eligibility-kit"))


def systems(names: list[str]) -> list[tuple[str, int | None]]:
    """(name, k) of each system: ``sync`` None, ``async-K`` K, ``trl`` None."""
    out = []
    for name in names:
        if name in ("sync", "trl"):
            out.append((name, None))
        elif name.startswith("async-") and name[6:].isdigit():
            out.append((name, int(name[6:])))
        else:
            raise SystemExit(f"lm_async.py: unknown system {name!r} (sync, async-K, trl)")
    return out


def env_of(args: argparse.Namespace, threads: int) -> dict[str, str]:
    """The children's environment: threads, the calculator's delay, the race scripts' path."""
    n = str(threads)
    env = {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}
    env["TOKENIZERS_PARALLELISM"] = "false"
    env["CALCULATOR_DELAY_S"] = str(args.tool_delay)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    return env


def race_args(args: argparse.Namespace, k: int | None) -> argparse.Namespace:
    """The race scripts' settings of one run (``lm_real_race.ours`` reads them)."""
    extra = [] if k is None else ["--max-staleness", str(k), "--importance-sampling", "exact"]
    ns = argparse.Namespace(
        model=args.model, lr=args.lr, g=args.g, prompts=args.prompts, t_max=args.t_max,
        updates=args.updates, eval_every=args.eval_every, lora_r=16,
        threads=args.threads if k is None else args.async_threads,
        reward="reward", dtype=args.dtype, stop_at=args.stop_at, eval_on_start=False,
        shots=args.shots, factors=2, env_task="multiply", max_tool_calls=args.max_tool_calls,
    )  # fmt: skip
    ns.extra = extra
    return ns


def one(args: argparse.Namespace, system: str, k: int | None, seed: int) -> dict:
    """One run of ``system`` (a whole process): a row."""
    import lm_real_race
    import lm_tool_race

    ns = race_args(args, k)
    env = env_of(args, ns.threads)
    if args.setting == "completions":
        if system == "trl":
            row = lm_real_race.one(ns, "trl", args.task, seed)
        else:
            row = lm_real_race.one(ns, "eligibility", args.task, seed)
    elif system == "trl":  # the calculator's delay reaches GRPOTrainer's process too
        row = lm_tool_race.one(ns, "trl", seed, env)
    else:
        name, env_file, env_class, reward_file, reward_fn = lm_tool_race.setting(ns)
        ns.reward_spec, ns.episodes = f"{reward_file}:{reward_fn}", True
        tools = ["--env", f"{env_file}:{env_class}", "--max-tool-calls", str(args.max_tool_calls)]
        if args.max_env_workers is not None:  # how many episodes' calls at once (none: all)
            tools += ["--max-env-workers", str(args.max_env_workers)]
        ns.extra = tools + ns.extra
        row = lm_real_race.ours(ns, name, seed, False, env)
        if "train_s" in row:
            row["s_per_update"] = row["train_s"] / max(row["updates"], 1)
    workers = args.max_env_workers if args.setting == "agent" and system != "trl" else None
    return {**row, "system": system, "k": k, "seed": seed, "setting": args.setting,
            "max_env_workers": workers}  # fmt: skip


def run(args: argparse.Namespace) -> list[dict]:
    """Every seed × system, the order alternating; rows saved as they end."""
    from lm_trl import save_rows

    chosen, rows = systems(args.systems), []
    for n, seed in enumerate(args.seeds):
        for system, k in chosen if n % 2 == 0 else chosen[::-1]:
            rows.append(one(args, system, k, seed))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            save_rows(args.json, rows)
    return rows


def to_target(row: dict, target: float | None) -> float | None:
    """The training seconds at the first evaluation at or past ``target`` (None: never)."""
    if target is None:
        return None
    return next((wall for _, acc, wall in row.get("curve", []) if acc >= target), None)


def paired(rows: list[dict], measure, against: str) -> dict[str, list[float]]:
    """Per system, ``measure(row) / measure(against's row)`` on each seed where both exist."""
    by = {(r["system"], r["seed"]): r for r in rows if "error" not in r}
    out: dict[str, list[float]] = {}
    for (system, seed), r in by.items():
        base = by.get((against, seed))
        if system == against or base is None:
            continue
        a, b = measure(r), measure(base)
        if a is not None and b:
            out.setdefault(system, []).append(a / b)
    return out


def report(rows: list[dict], target: float | None) -> None:
    """The tables (markdown): rates and paired ratios, time to target, accuracy by update."""

    def rate(r: dict) -> float | None:
        return r["updates"] * 3600 / r["train_s"] if r.get("train_s") else None

    def geo(xs: list[float]) -> str:
        return f"{math.exp(statistics.fmean(math.log(x) for x in xs)):.3g}" if xs else "–"

    errors = [r for r in rows if "error" in r]
    rows = [r for r in rows if "error" not in r]
    names = list(dict.fromkeys(r["system"] for r in rows))
    per_hour, sooner = (
        paired(rows, rate, "sync"),
        paired(rows, lambda r: to_target(r, target), "sync"),
    )
    vs_trl = paired(rows, lambda r: to_target(r, target), "trl")
    print("| system | seeds | updates/hour (median) | ÷ sync (paired, geo. mean) | s to target "
          "(median) | ÷ sync | ÷ trl |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name in names:
        mine = [r for r in rows if r["system"] == name]
        rates = [x for r in mine if (x := rate(r)) is not None]
        reach = [x for r in mine if (x := to_target(r, target)) is not None]
        med = f"{statistics.median(rates):.4g}" if rates else "–"
        hit = f"{statistics.median(reach):.4g} ({len(reach)}/{len(mine)})" if reach else "–"
        print(f"| {name} | {len(mine)} | {med} | {geo(per_hour.get(name, []))} | {hit} | "
              f"{geo(sooner.get(name, []))} | {geo(vs_trl.get(name, []))} |")  # fmt: skip
    print("\n| system | seed | held-out accuracy by update |\n|---|---|---|")
    for r in rows:
        curve = ", ".join(f"{u}: {acc:.3g}" for u, acc, _ in r.get("curve", []))
        print(f"| {r['system']} | {r['seed']} | {curve} |")
    for r in errors:
        print(f"\n{r['system']} seed {r['seed']} failed: {r['error'][-300:]}", file=sys.stderr)


# -- thread scaling ----------------------------------------------------------------------------


def scaling_child(args: argparse.Namespace) -> dict:
    """One process at ``--threads``: the seconds of each sampling and scoring pass."""
    import numpy as np
    import torch

    from eligibility.lm import FinetuneConfig
    from eligibility.lm.build import task_and_policy
    from eligibility.lm.sample import sample, token_logps

    torch.set_num_threads(args.threads)
    if args.model == "tiny":
        config = FinetuneConfig("repeat", group_size=args.g, prompts_per_batch=args.prompts,
                                max_completion_length=args.t_max, progress=False)  # fmt: skip
    else:
        t = KIT / "tasks" / args.task
        config = FinetuneConfig(f"{KIT / 'tasks' / 'rewards.py'}:reward",
                                model=str(KIT / "models" / args.model),
                                prompts=str(t / "train.jsonl"), group_size=args.g,
                                prompts_per_batch=args.prompts, max_completion_length=args.t_max,
                                dtype="float32", progress=False)  # fmt: skip
    _, task, policy, t_max = task_and_policy(config, measure=False)
    prompts = [task.prompts[i % len(task.prompts)] for i in range(args.prompts)]
    rows = [p for p in prompts for _ in range(args.g)]
    rng = np.random.default_rng(0)
    out: dict[str, list[float]] = {"sample_s": [], "score_s": []}
    with policy, policy.precision():
        for _ in range(args.repeats + 1):  # the first of each: warm-up, not kept
            t0 = time.perf_counter()
            batch = sample(policy, rows, vocab_size=task.vocab_size, max_new_tokens=t_max,
                           temperature=1.0, rng=rng, eos_id=task.eos_id)  # fmt: skip
            t1 = time.perf_counter()
            ell = token_logps(policy, batch, vocab_size=task.vocab_size, temperature=1.0)
            (ell * batch.completion_mask).sum().backward()
            t2 = time.perf_counter()
            out["sample_s"].append(t1 - t0)
            out["score_s"].append(t2 - t1)
    return {"threads": args.threads, **{k: v[1:] for k, v in out.items()}}


def scaling(args: argparse.Namespace) -> dict:
    """1 and 2 threads, alternating, each a process of its own; the speed-ups."""
    from lm_trl import child

    runs = []
    for n in range(args.rounds):
        for threads in (1, 2) if n % 2 == 0 else (2, 1):
            env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
            argv = [sys.executable, __file__, "scaling-child", "--threads", str(threads),
                    *shared(args)]  # fmt: skip
            res, use = child(argv, env)
            runs.append({**res, **use})
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    summary = {}
    for part in ("sample_s", "score_s"):
        one_t = [x for r in runs if r.get("threads") == 1 for x in r[part]]
        two_t = [x for r in runs if r.get("threads") == 2 for x in r[part]]
        if one_t and two_t:
            a, b = statistics.median(one_t), statistics.median(two_t)
            summary[part] = {"1": a, "2": b, "speedup": a / b}
    out = {"argv": sys.argv, "runs": runs, "summary": summary}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    print(json.dumps(summary, indent=1))
    return out


def shared(args: argparse.Namespace) -> list[str]:
    """The scaling settings, as a child's arguments."""
    keys = ("model", "task", "g", "prompts", "t_max", "repeats")
    return [x for k in keys for x in (f"--{k.replace('_', '-')}", str(getattr(args, k)))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="the systems side by side")
    s = sub.add_parser("scaling", help="a sampling and a scoring pass at 1 and 2 threads")
    c = sub.add_parser("scaling-child", help=argparse.SUPPRESS)
    rep = sub.add_parser("report", help="the tables of result files")
    for q in (r, s, c):
        q.add_argument("--task", default="multiply", help="the kit's task (completions)")
        q.add_argument("--g", type=int, default=8)
        q.add_argument("--prompts", type=int, default=4)
        q.add_argument("--t-max", type=int, default=8)
        q.add_argument("--dry-run", action="store_true",
                       help="wiring: one seed (round), 2 updates, G 2, P 1, T 4")  # fmt: skip
    for q in (s, c):
        q.add_argument("--model", default="smollm2-135m-instruct", help="a kit model, or tiny")
        q.add_argument("--repeats", type=int, default=5)
    s.add_argument("--rounds", type=int, default=4, help="processes at each thread count")
    s.add_argument("--json", default=None)
    c.add_argument("--threads", type=int, required=True)
    r.add_argument("--setting", choices=("completions", "agent"), default="completions")
    r.add_argument("--model", default=None, help="a kit model (default: the setting's)")
    r.add_argument("--lr", type=float, default=1e-5)
    r.add_argument("--updates", type=int, default=30)
    r.add_argument("--eval-every", type=int, default=5)
    r.add_argument("--threads", type=int, default=2, help="threads of sync's and trl's process")
    r.add_argument("--async-threads", type=int, default=1,
                   help="threads of each of async-K's two processes")  # fmt: skip
    r.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    r.add_argument("--stop-at", type=float, default=None)
    r.add_argument("--tool-delay", type=float, default=0.5, help="seconds a calculator call takes")
    r.add_argument("--max-tool-calls", type=int, default=1)
    r.add_argument("--max-env-workers", type=int, default=None,
                   help="ours' --max-env-workers (agent; none: every episode's calls at once, "
                   "1: one call after another)")  # fmt: skip
    r.add_argument("--shots", type=int, default=0, help="worked examples (multiply-tool-S)")
    r.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    r.add_argument("--systems", nargs="+", default=["sync", "async-1", "async-2", "trl"])
    r.add_argument("--json", default=None)
    rep.add_argument("files", nargs="+")
    rep.add_argument("--target", type=float, default=None)
    args = p.parse_args()
    if getattr(args, "dry_run", False):
        args.g, args.prompts, args.t_max = 2, 1, 4
        if args.cmd == "run":
            args.updates, args.eval_every, args.seeds = 2, 1, args.seeds[:1]
        elif args.cmd == "scaling":
            args.rounds, args.repeats = 1, 1
    if args.cmd == "run":
        if args.model is None:
            args.model = (
                "smollm2-135m-tools" if args.setting == "agent" else "smollm2-135m-instruct"
            )
        report(run(args), args.stop_at)
    elif args.cmd == "scaling":
        scaling(args)
    elif args.cmd == "scaling-child":
        print(json.dumps(scaling_child(args)))
    else:
        rows = [row for f in args.files for row in json.loads(Path(f).read_text())["runs"]]
        report(rows, args.target)


if __name__ == "__main__":
    main()
