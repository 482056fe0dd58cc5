"""Per-update cost: one policy gradient step on the same number of CartPole-v1 transitions.

    python bench/classic/update_cost.py SYSTEM --transitions 4096 --reps 20

Each system gathers at least ``--transitions`` transitions with its freshly initialised policy,
then times ``--reps`` updates on that batch (the first one, warm-up, is dropped). Collection is
not timed. Prints ``RESULT {json}`` as its last line.
"""

from __future__ import annotations

# First: common pins the BLAS/OpenMP pools to one thread before numpy or torch loads.
import common  # noqa: F401

# isort: split
import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from common import emit, one_thread_torch
from harness import SYSTEMS

ENV_ID = "CartPole-v1"


def _time(step: Callable[[], None], reps: int) -> list[float]:
    step()  # warm-up: lazy allocations, first-call dispatch
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def eligibility(backend: str, n: int, reps: int, seed: int) -> tuple[str, int, list[float]]:
    from eligibility.backends import make_agent
    from eligibility.reinforce import Config
    from eligibility.reinforce.envs import make_vec_env, spaces_of
    from eligibility.reinforce.estimator import collect_episodes, policy_gradient

    cfg = Config.for_env(ENV_ID, seed=seed, backend=backend, out=None, progress=False)
    envs = make_vec_env(ENV_ID, cfg.num_envs, cfg.vectorization_mode)
    spaces = spaces_of(envs)
    head = spaces.head
    agent = make_agent(cfg, spaces.obs_dim, head, np.random.default_rng(seed))
    rng = np.random.default_rng(seed + 1)
    episodes = 16
    while True:  # enough episodes of the initial policy to hold n transitions
        batch = collect_episodes(
            envs, lambda s, m: agent.policy.act(s, rng), episodes, seed=seed, to_env=head.to_env
        )
        lengths = np.cumsum(batch.mask.sum(axis=1))
        if lengths[-1] >= n:
            break
        episodes *= 2
    # The fewest whole episodes holding n transitions: equal batch size up to one episode.
    e = int(np.searchsorted(lengths, n)) + 1
    batch = type(batch)(*(None if x is None else x[:e] for x in batch))

    def step() -> None:
        grads, _ = policy_gradient(
            agent.policy, batch, gamma=cfg.gamma, baseline=cfg.baseline, baseline_state={}
        )
        agent.apply(grads)

    what = f"`policy_gradient` + {cfg.optimizer} step, {batch.mask.shape[0]} whole episodes"
    return what, int(batch.mask.sum()), _time(step, reps)


def tianshou(n: int, reps: int, seed: int, full_batch: bool) -> tuple[str, int, list[float]]:
    from tianshou.data import Collector, CollectStats, VectorReplayBuffer
    from tianshou.utils.torch_utils import policy_within_training_step

    from solve import TIANSHOU_MINIBATCH, TIANSHOU_NUM_ENVS, TIANSHOU_REPEAT, build_tianshou

    _, policy, algo, envs = build_tianshou(ENV_ID, seed)
    buffer = VectorReplayBuffer(4 * n, TIANSHOU_NUM_ENVS)
    collector = Collector[CollectStats](algo, envs, buffer)
    collector.reset()
    with policy_within_training_step(policy):
        collector.collect(n_step=n)
    size = len(collector.buffer)
    batch_size, repeat = (None, 1) if full_batch else (TIANSHOU_MINIBATCH, TIANSHOU_REPEAT)

    def step() -> None:
        with policy_within_training_step(policy):
            algo.update(buffer=collector.buffer, batch_size=batch_size, repeat=repeat)

    what = (
        "`Reinforce.update`, one full-batch step"
        if full_batch
        else "`Reinforce.update` as configured in its CartPole test: 2 epochs of 64-minibatches"
    )
    return what, size, _time(step, reps)


def sb3(n: int, reps: int, seed: int) -> tuple[str, int, list[float]]:
    from solve import SB3_ZOO, build_sb3

    n_envs = SB3_ZOO[ENV_ID][0]
    _, model = build_sb3(ENV_ID, seed, n_steps=n // n_envs)
    model.learn(total_timesteps=n)  # fills the rollout buffer (and does one update)
    what = "`A2C.train()`: policy + value loss, one RMSprop step on the rollout"
    return what, model.n_steps * n_envs, _time(model.train, reps)


def torch_example(n: int, reps: int, seed: int) -> tuple[str, int, list[float]]:
    import torch

    from solve import build_torch_example

    env, policy, opt = build_torch_example(ENV_ID, seed)
    rng = np.random.default_rng(seed)
    obs_list, act_list = [], []
    obs, _ = env.reset(seed=seed)
    while len(obs_list) < n:
        a = int(rng.integers(env.action_space.n))
        obs_list.append(obs)
        act_list.append(a)
        obs, _, term, trunc, _ = env.step(a)
        if term or trunc:
            obs, _ = env.reset()
    s = torch.as_tensor(np.array(obs_list), dtype=torch.float32)
    a = torch.as_tensor(act_list)
    g = torch.randn(n)

    def step() -> None:
        # Re-forward the stored states in one batch: cheaper than the example itself, which
        # back-propagates through n separate per-step forward graphs.
        dist = torch.distributions.Categorical(policy(s))
        loss = -(dist.log_prob(a) * g).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return "batched forward + backward + Adam on one sequence", n, _time(step, reps)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("system", choices=(*SYSTEMS, "tianshou-config"))
    p.add_argument("--transitions", type=int, default=4096)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    one_thread_torch()
    n, reps, seed = args.transitions, args.reps, args.seed
    if args.system.startswith("eligibility-"):
        what, size, ms = eligibility(args.system.removeprefix("eligibility-"), n, reps, seed)
    elif args.system == "tianshou":
        what, size, ms = tianshou(n, reps, seed, full_batch=True)
    elif args.system == "tianshou-config":
        what, size, ms = tianshou(n, reps, seed, full_batch=False)
    elif args.system == "sb3-a2c":
        what, size, ms = sb3(n, reps, seed)
    else:
        what, size, ms = torch_example(n, reps, seed)
    emit(
        {
            "system": args.system,
            "what": what,
            "transitions": size,
            "reps": reps,
            "ms": {"median": statistics.median(ms), "min": min(ms), "max": max(ms)},
        }
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
