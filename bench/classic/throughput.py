"""Throughput against the limit: training env-steps/s vs random-action env-steps/s, same env.

    python bench/classic/throughput.py --backend numpy --num-envs 1 8 64 --steps 100000

For each num_envs: first the random-action loop on the vector env the trainer itself builds
(``eligibility.reinforce.envs.make_vec_env``, same vectorisation mode), then this project's
``train`` with that num_envs, no evaluation, for the same number of env steps. Prints
``RESULT {json}`` (a list of rows) as its last line.
"""

from __future__ import annotations

# First: common pins the BLAS/OpenMP pools to one thread before numpy or torch loads.
import common  # noqa: F401

# isort: split
import argparse
import dataclasses
import time

import numpy as np

from common import emit, one_thread_torch


def random_steps_per_s(env_id: str, num_envs: int, steps: int, seed: int) -> float:
    """N·k / wall of k vector steps under uniformly random actions (autoreset included)."""
    from eligibility.reinforce.envs import make_vec_env

    envs = make_vec_env(env_id, num_envs)
    rng = np.random.default_rng(seed)
    n_calls = max(1, steps // num_envs)
    envs.reset(seed=seed)
    space = envs.single_action_space
    actions = rng.integers(0, int(space.n), size=(n_calls, num_envs))
    t0 = time.perf_counter()
    for k in range(n_calls):
        envs.step(actions[k])
    wall = time.perf_counter() - t0
    envs.close()
    return n_calls * num_envs / wall


def train_steps_per_s(env_id: str, backend: str, num_envs: int, steps: int, seed: int) -> dict:
    """Env steps of training (complete-episode steps, as the trainer counts them) per second."""
    from eligibility.reinforce import Config, train

    cfg = Config.for_env(env_id, seed=seed, backend=backend, out=None, progress=False)
    # A batch must hold at least one episode per sub-env or the extra sub-envs idle.
    cfg = dataclasses.replace(
        cfg,
        num_envs=num_envs,
        episodes_per_batch=max(cfg.episodes_per_batch, num_envs),
        eval_every=0,
        total_steps=steps,
    )
    res = train(cfg)
    train_s = res.wall_s - res.eval_wall_s
    return {
        "episodes_per_batch": cfg.episodes_per_batch,
        "train_env_steps": res.env_steps,
        "train_s": train_s,
        "train_steps_per_s": res.env_steps / train_s,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--backend", default="numpy", choices=("numpy", "torch"))
    p.add_argument("--num-envs", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--steps", type=int, default=100_000, help="env steps per measurement")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    one_thread_torch()
    rows = []
    for n in args.num_envs:
        rand = random_steps_per_s(args.env, n, args.steps, args.seed)
        tr = train_steps_per_s(args.env, args.backend, n, args.steps, args.seed)
        rows.append(
            {
                "env": args.env,
                "backend": args.backend,
                "num_envs": n,
                "random_steps_per_s": rand,
                **tr,
                "ratio": tr["train_steps_per_s"] / rand,
            }
        )
    emit({"rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
