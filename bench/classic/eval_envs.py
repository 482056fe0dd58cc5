"""What ``eval_envs`` costs: process CPU and test env steps of one CartPole run per setting.

    OMP_NUM_THREADS=1 PYTHONPATH=src python bench/classic/eval_envs.py --seeds 2000 2001 2002

For each seed, trains with the CartPole defaults at each ``eval_envs`` in turn (same training:
the tests draw from their own generator) and prints the training env steps, the tests' env steps
and the CPU seconds (user + system) of the ``train`` call. CPU, not wall: it is what a loaded
machine leaves least disturbed.
"""

from __future__ import annotations

import argparse
import time

from eligibility.reinforce import Config, train


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[2000, 2001, 2002])
    p.add_argument("--eval-envs", type=int, nargs="+", default=[100, 25, 10])
    args = p.parse_args(argv)
    print("seed  eval_envs  solved  env_steps  eval_env_steps  cpu_s")
    for seed in args.seeds:
        for n in args.eval_envs:
            config = Config.for_env(
                "CartPole-v1", seed=seed, progress=False, eval_envs=n, sampled_report=False
            )
            c0 = time.process_time()
            r = train(config)
            cpu = time.process_time() - c0
            print(f"{seed}  {n}  {r.solved}  {r.env_steps}  {r.eval_env_steps}  {cpu:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
