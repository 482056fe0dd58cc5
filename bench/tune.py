"""Steps and wall time to solve an env for a few settings of the trainer, over many seeds.

    python bench/tune.py CartPole-v1 '[{}, {"lr": 0.05}]' --seeds 40 --first-seed 100

How the tuned defaults in ``eligibility.reinforce.config`` were chosen (docs/training.md
quotes its output). Each line: the overrides, solved/seeds, median and max env steps to
solve, median and max wall time (evaluation included), with the trainer's default cadence.
"""

from __future__ import annotations

# First: common pins the BLAS/OpenMP pools to one thread before numpy or torch loads.
import common  # noqa: F401

# isort: split
import argparse
import json
import statistics


def main(argv: list[str] | None = None) -> int:
    from eligibility.reinforce import Config, train

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("env_id")
    p.add_argument("grid", help="JSON list of Config overrides, e.g. '[{}, {\"lr\": 0.05}]'")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--backend", default="numpy", choices=("numpy", "torch"))
    p.add_argument("--total-steps", type=int, default=300_000)
    args = p.parse_args(argv)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for overrides in json.loads(args.grid):
        runs = [
            train(
                Config.for_env(
                    args.env_id,
                    seed=s,
                    backend=args.backend,
                    out=None,
                    progress=False,
                    total_steps=args.total_steps,
                    **overrides,
                )
            )
            for s in seeds
        ]
        steps = [r.env_steps for r in runs]
        walls = [r.wall_s for r in runs]
        print(
            f"{overrides}: solved {sum(r.solved for r in runs)}/{len(runs)}, env steps median "
            f"{statistics.median(steps):.0f} max {max(steps)}, wall median "
            f"{statistics.median(walls):.2f} s max {max(walls):.2f} s "
            f"(seeds {seeds.start}–{seeds.stop - 1})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
