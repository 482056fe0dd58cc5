"""One time-to-solve run of one system, in this process, with one thread.

    python bench/solve.py SYSTEM --env CartPole-v1 --seed 0 --cap 120 [--max-steps N]

Prints ``RESULT {json}`` as its last line: solved, train_s (wall time without evaluation),
eval_s, env_steps, episodes, updates, evals, final_eval_return, error. The driver
(``bench/run_all.py``) starts one such process per (system, seed).

Systems:
  eligibility-numpy, eligibility-torch  this project, ``Config.for_env`` defaults;
  tianshou        Tianshou REINFORCE, the configuration of Tianshou's CartPole test
                  (test/discrete/test_reinforce.py), greedy evaluation by our evaluator;
  sb3-a2c         Stable-Baselines3 A2C with rl-zoo's hyperparameters (hyperparams/a2c.yml);
  torch-example   REINFORCE in the style of pytorch/examples reinforcement_learning/reinforce.py.
"""

from __future__ import annotations

# First: common pins the BLAS/OpenMP pools to one thread before numpy or torch loads.
import common

# isort: split
import argparse
import signal
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from common import EVAL_EVERY, TARGETS, EvalCadence, GreedyEvaluator, emit, one_thread_torch

SYSTEMS = ("eligibility-numpy", "eligibility-torch", "tianshou", "sb3-a2c", "torch-example")


class CapReached(Exception):
    """The run's wall cap (training + evaluation) expired."""


def _alarm(_signum: int, _frame: object) -> None:
    raise CapReached


class Run:
    """Bookkeeping for one run: counters, the evaluator, the clock."""

    def __init__(self, system: str, env_id: str, seed: int) -> None:
        self.record: dict[str, Any] = {
            "system": system,
            "env": env_id,
            "seed": seed,
            "solved": False,
            "env_steps": 0,
            "episodes": 0,
            "updates": 0,
            "evals": 0,
            "error": None,
        }
        self.evaluator: GreedyEvaluator | None = None
        self.cadence = EvalCadence(EVAL_EVERY)
        self.t0 = time.perf_counter()
        self.cap_s = float("inf")

    def start(self) -> None:
        """Start the clock and the wall cap: after the imports, before any env is made."""
        self.t0 = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, self.cap_s)

    def check(self, act: Callable[[np.ndarray], np.ndarray]) -> bool:
        """At an update boundary: evaluate if a 10k multiple was crossed; True once solved."""
        assert self.evaluator is not None
        if not self.cadence.due(self.record["env_steps"]):
            return False
        solved = self.evaluator(act)
        self.record["evals"] = self.evaluator.calls
        self.record["final_eval_return"] = self.evaluator.last_mean
        self.record["solved"] = solved
        return solved

    def finish(self) -> dict[str, Any]:
        total = time.perf_counter() - self.t0
        eval_s = self.evaluator.wall_s if self.evaluator is not None else 0.0
        self.record.setdefault("train_s", total - eval_s)
        self.record.setdefault("eval_s", eval_s)
        return self.record


# --------------------------------------------------------------------------- this project


def run_eligibility(run: Run, backend: str, env_id: str, seed: int, max_steps: int) -> None:
    import dataclasses

    from eligibility.reinforce import Config, train

    one_thread_torch()
    cfg = Config.for_env(env_id, seed=seed, backend=backend, out=None, progress=False)
    run.record["default_eval_every"] = cfg.eval_every
    run.record["default_eval_episodes"] = cfg.eval_episodes
    # The trainer's own evaluation, on the shared criterion and cadence: after the update that
    # crosses each multiple of EVAL_EVERY env steps, 100 greedy episodes.
    fields = {f.name for f in dataclasses.fields(cfg)}
    cadence = {"eval_every": EVAL_EVERY}
    run.record["cadence"] = f"every {EVAL_EVERY} env steps"
    overrides = {
        **cadence,
        "eval_episodes": common.EVAL_EPISODES,
        "target_return": TARGETS[env_id],
        "total_steps": max_steps,
    }
    cfg = dataclasses.replace(cfg, **{k: v for k, v in overrides.items() if k in fields})
    # The cap interrupts train() without a result: its counters are then unknown.
    run.record.update(env_steps=None, episodes=None, updates=None)
    run.start()
    res = train(cfg)
    run.record.update(
        evals=sum(row.get("eval_return") is not None for row in res.history),
        solved=bool(res.solved),
        env_steps=int(res.env_steps),
        episodes=int(res.episodes),
        updates=int(res.updates),
        train_s=float(res.wall_s - res.eval_wall_s),
        eval_s=float(res.eval_wall_s),
        final_eval_return=res.final_eval_return,
    )
    if not res.solved:
        run.record["error"] = "step budget"


# --------------------------------------------------------------------------- Tianshou


def build_tianshou(
    env_id: str, seed: int, num_envs: int, lr: float, gamma: float, hidden: list[int]
):
    """Tianshou's REINFORCE as its CartPole test builds it: (net, policy, algorithm, train envs)."""
    import gymnasium as gym
    import torch
    from tianshou.algorithm import Reinforce
    from tianshou.algorithm.modelfree.reinforce import ProbabilisticActorPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.env import DummyVectorEnv
    from tianshou.utils.net.common import Net

    # Tianshou's collector samples through the global numpy RNG; its test seeds it the same way.
    np.random.seed(seed)  # noqa: NPY002
    torch.manual_seed(seed)
    env = gym.make(env_id)
    train_envs = DummyVectorEnv([lambda: gym.make(env_id) for _ in range(num_envs)])
    train_envs.seed(seed)
    net = Net(
        state_shape=env.observation_space.shape,
        action_shape=env.action_space.n,
        hidden_sizes=hidden,
        softmax=True,
    )
    policy = ProbabilisticActorPolicy(
        actor=net,
        dist_fn=torch.distributions.Categorical,
        action_space=env.action_space,
        action_scaling=False,
    )
    algorithm = Reinforce(
        policy=policy, optim=AdamOptimizerFactory(lr=lr), gamma=gamma, return_standardization=True
    )
    for m in net.modules():
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.orthogonal_(m.weight, gain=np.sqrt(2))
            torch.nn.init.zeros_(m.bias)
    return net, policy, algorithm, train_envs


def run_tianshou(run: Run, env_id: str, seed: int, max_steps: int) -> None:
    import torch
    from tianshou.data import Collector, CollectStats, VectorReplayBuffer
    from tianshou.utils.torch_utils import policy_within_training_step

    one_thread_torch()
    run.start()
    # Tianshou's CartPole REINFORCE test configuration (test/discrete/test_reinforce.py).
    num_envs, episodes_per_collect, repeat, minibatch = 8, 8, 2, 64
    net, policy, algorithm, train_envs = build_tianshou(
        env_id, seed, num_envs, lr=1e-3, gamma=0.95, hidden=[64, 64]
    )
    collector = Collector[CollectStats](algorithm, train_envs, VectorReplayBuffer(20_000, num_envs))
    collector.reset()
    run.evaluator = GreedyEvaluator(env_id, seed)

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        probs, _ = net(obs)
        return probs.argmax(-1).numpy()

    while run.record["env_steps"] < max_steps:
        with policy_within_training_step(policy):
            stats = collector.collect(n_episode=episodes_per_collect)
            algorithm.update(buffer=collector.buffer, batch_size=minibatch, repeat=repeat)
            collector.reset_buffer(keep_statistics=True)
        run.record["env_steps"] += int(stats.n_collected_steps)
        run.record["episodes"] += int(stats.n_collected_episodes)
        run.record["updates"] += 1
        net.eval()
        solved = run.check(act)
        net.train()
        if solved:
            return
    run.record["error"] = "step budget"


# --------------------------------------------------------------------------- Stable-Baselines3


def run_sb3(run: Run, env_id: str, seed: int, max_steps: int) -> None:
    from stable_baselines3 import A2C
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    one_thread_torch()
    run.start()
    # rl-baselines3-zoo hyperparams/a2c.yml: CartPole-v1 n_envs 8, ent_coef 0.0;
    # Acrobot-v1 n_envs 16, normalize true, ent_coef 0.0; everything else SB3's A2C defaults.
    zoo = {"CartPole-v1": (8, False), "Acrobot-v1": (16, True)}
    n_envs, normalize = zoo[env_id]
    venv = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    if normalize:
        venv = VecNormalize(venv)
    model = A2C("MlpPolicy", venv, ent_coef=0.0, seed=seed, device="cpu", verbose=0)
    run.evaluator = GreedyEvaluator(env_id, seed)

    def act(obs: np.ndarray) -> np.ndarray:
        if normalize:
            obs = venv.normalize_obs(obs)
        return model.predict(obs, deterministic=True)[0]

    class Check(BaseCallback):
        stop = False

        def _on_rollout_start(self) -> None:
            # Called before each rollout, i.e. right after the previous update.
            if self.num_timesteps == 0:
                return
            run.record["env_steps"] = int(self.num_timesteps)
            run.record["updates"] += 1
            self.stop = run.check(act)

        def _on_step(self) -> bool:
            run.record["episodes"] += int(np.sum(self.locals["dones"]))
            return not self.stop

    cb = Check()
    model.learn(total_timesteps=max_steps, callback=cb)
    if not run.record["solved"]:
        run.record["error"] = "step budget"


# --------------------------------------------------------------------------- plain PyTorch


def run_torch_example(run: Run, env_id: str, seed: int, max_steps: int) -> None:
    import gymnasium as gym
    import torch
    from torch import nn

    one_thread_torch()
    run.start()
    torch.manual_seed(seed)
    env = gym.make(env_id)
    obs_dim, n_actions = env.observation_space.shape[0], int(env.action_space.n)
    # The shape of the canonical example: 128 hidden units, dropout, a softmax over actions,
    # Adam at 1e-2, one update per episode on normalised reward-to-go.
    policy = nn.Sequential(
        nn.Linear(obs_dim, 128),
        nn.Dropout(p=0.6),
        nn.ReLU(),
        nn.Linear(128, n_actions),
        nn.Softmax(dim=-1),
    )
    opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
    gamma, eps = 0.99, float(np.finfo(np.float32).eps)
    run.evaluator = GreedyEvaluator(env_id, seed)

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        return policy(torch.from_numpy(obs)).argmax(-1).numpy()

    obs, _ = env.reset(seed=seed)
    while run.record["env_steps"] < max_steps:
        log_probs, rewards = [], []
        done = False
        while not done:
            probs = policy(torch.from_numpy(obs.astype(np.float32)))
            dist = torch.distributions.Categorical(probs)
            a = dist.sample()
            log_probs.append(dist.log_prob(a))
            obs, r, term, trunc, _ = env.step(int(a))
            rewards.append(float(r))
            done = term or trunc
        obs, _ = env.reset()
        g, returns = 0.0, []
        for r in reversed(rewards):
            g = r + gamma * g
            returns.append(g)
        g_t = torch.tensor(returns[::-1])
        g_t = (g_t - g_t.mean()) / (g_t.std() + eps)
        loss = -(torch.stack(log_probs) * g_t).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        run.record["env_steps"] += len(rewards)
        run.record["episodes"] += 1
        run.record["updates"] += 1
        policy.eval()
        solved = run.check(act)
        policy.train()
        if solved:
            return
    run.record["error"] = "step budget"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("system", choices=SYSTEMS)
    p.add_argument("--env", default="CartPole-v1", choices=sorted(TARGETS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cap", type=float, default=120.0, help="wall cap, s (training + evaluation)")
    p.add_argument("--max-steps", type=int, default=1_000_000, help="env-step budget")
    args = p.parse_args(argv)

    run = Run(args.system, args.env, args.seed)
    run.cap_s = args.cap
    signal.signal(signal.SIGALRM, _alarm)
    try:
        if args.system.startswith("eligibility-"):
            backend = args.system.removeprefix("eligibility-")
            run_eligibility(run, backend, args.env, args.seed, args.max_steps)
        elif args.system == "tianshou":
            run_tianshou(run, args.env, args.seed, args.max_steps)
        elif args.system == "sb3-a2c":
            run_sb3(run, args.env, args.seed, args.max_steps)
        else:
            run_torch_example(run, args.env, args.seed, args.max_steps)
    except CapReached:
        run.record["solved"] = False
        run.record["error"] = "wall cap"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    emit(run.finish())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
