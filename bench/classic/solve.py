"""One time-to-solve run of one system, in this process, with one thread.

    python bench/classic/solve.py SYSTEM --env CartPole-v1 --seed 0 --cap 120 [--max-steps N]

Prints ``RESULT {json}`` as its last line: solved, train_s (wall time without evaluation),
eval_s, env_steps (training), eval_env_steps (the greedy tests'), episodes, updates, evals,
final_eval_return, process_wall_s and process_cpu_s (the whole process, imports included),
error. The driver (``bench/classic/run_all.py``) starts one such process per (system, seed).

Systems:
  eligibility-numpy, eligibility-torch  this project, ``Config.for_env`` defaults;
  tianshou        Tianshou REINFORCE, the configuration of Tianshou's CartPole test
                  (test/discrete/test_reinforce.py), on a Box env that of its MuJoCo example
                  (examples/mujoco/mujoco_reinforce.py), greedy evaluation by our evaluator;
  sb3-a2c         Stable-Baselines3 A2C with rl-zoo's hyperparameters (hyperparams/a2c.yml),
                  SB3's defaults on an env the zoo does not list;
  torch-example   REINFORCE in the style of pytorch/examples reinforcement_learning/reinforce.py,
                  with a Gaussian (mean from the MLP, a learnt log σ) on a Box env.
"""

from __future__ import annotations

# First: common pins the BLAS/OpenMP pools to one thread before numpy or torch loads.
import common  # noqa: F401

# isort: split
import argparse
import signal
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from common import GreedyEvaluator, emit, one_thread_torch, process_clock
from harness import EVAL_EPISODES, EVAL_EVERY, SYSTEMS, TARGETS, EvalCadence

# Tianshou's CartPole REINFORCE test configuration (test/discrete/test_reinforce.py).
TIANSHOU_NUM_ENVS, TIANSHOU_EPISODES_PER_COLLECT = 8, 8
TIANSHOU_REPEAT, TIANSHOU_MINIBATCH = 2, 64
# Tianshou's MuJoCo REINFORCE example (examples/mujoco/mujoco_reinforce.py): 10 train envs,
# 2 048 env steps per collection, one full-batch step; lr decays linearly to 0 over
# ceil(30 000 / 2 048) × 100 = 1 500 updates (its step_per_epoch, step_per_collect, epochs).
TIANSHOU_BOX_ENVS, TIANSHOU_BOX_STEPS, TIANSHOU_BOX_EPOCHS, TIANSHOU_BOX_EPOCH_STEPS = (
    10,
    2048,
    100,
    30_000,
)
# rl-baselines3-zoo hyperparams/a2c.yml: env -> (n_envs, VecNormalize); ent_coef 0.0 for both,
# everything else SB3's A2C defaults. An env the zoo does not list (InvertedPendulum-v5) runs
# with SB3's defaults: make_vec_env's one env, no VecNormalize.
SB3_ZOO = {"CartPole-v1": (8, False), "Acrobot-v1": (16, True)}
SB3_DEFAULTS = (1, False)


def is_box(env_id: str) -> bool:
    """True when ``env_id``'s actions are a Box (the peers then use a Gaussian policy)."""
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        return isinstance(env.action_space, gym.spaces.Box)
    finally:
        env.close()


class CapReached(BaseException):
    """The run's wall cap (training + evaluation) expired.

    A BaseException, as KeyboardInterrupt is: an interrupt, which the env wrappers' ``except
    Exception`` (an env's own error, reported as a crash) must let through.
    """


def _alarm(_signum: int, _frame: object) -> None:
    raise CapReached


class Run:
    """Bookkeeping for one run: counters, the evaluator, the clock."""

    def __init__(self, system: str, env_id: str, seed: int, cap_s: float) -> None:
        self.record: dict[str, Any] = {
            "system": system,
            "env": env_id,
            "seed": seed,
            "solved": False,
            "env_steps": 0,
            "episodes": 0,
            "updates": 0,
            "evals": 0,
            "eval_env_steps": 0,
            "error": None,
        }
        self.evaluator: GreedyEvaluator | None = None
        self.cadence = EvalCadence(EVAL_EVERY, target=TARGETS[env_id])
        self.t0 = time.perf_counter()
        self.cap_s = cap_s

    def start(self) -> None:
        """Start the clock and the wall cap: after the imports, before any env is made."""
        self.t0 = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, self.cap_s)

    def check(
        self,
        act: Callable[[np.ndarray], np.ndarray],
        module: Any = None,
        train_mean: float | None = None,
    ) -> bool:
        """At an update boundary: test if the cadence or the training returns say so; True once
        solved.

        ``module``, a torch module, is put in eval mode (dropout off) for the evaluation only;
        ``train_mean`` is the mean return of the training episodes that ended in this update
        (None: none ended).
        """
        assert self.evaluator is not None
        if not self.cadence.due(self.record["env_steps"], train_mean):
            return False
        if module is not None:
            module.eval()
        solved = self.evaluator(act)
        if module is not None:
            module.train()
        self.record["evals"] = self.evaluator.calls
        self.record["eval_env_steps"] = self.evaluator.env_steps
        self.record["final_eval_return"] = self.evaluator.last_mean
        self.record["solved"] = solved
        return solved

    def updated(
        self,
        env_steps: int,
        returns: np.ndarray,
        act: Callable[[np.ndarray], np.ndarray],
        module: Any,
    ) -> bool:
        """Count one update on ``env_steps`` steps of the episodes with ``returns``, then
        :meth:`check`."""
        self.record["env_steps"] += env_steps
        self.record["episodes"] += len(returns)
        self.record["updates"] += 1
        return self.check(act, module, float(np.mean(returns)) if len(returns) else None)

    def finish(self) -> dict[str, Any]:
        total = time.perf_counter() - self.t0
        eval_s = self.evaluator.wall_s if self.evaluator is not None else 0.0
        self.record.setdefault("train_s", total - eval_s)
        self.record.setdefault("eval_s", eval_s)
        self.record["process_wall_s"], self.record["process_cpu_s"] = process_clock()
        return self.record


# --------------------------------------------------------------------------- this project


def run_eligibility(run: Run, backend: str, env_id: str, seed: int, max_steps: int) -> None:
    import dataclasses

    from eligibility.reinforce import Config, train

    cfg = Config.for_env(env_id, seed=seed, backend=backend, out=None, progress=False)
    run.record["default_eval_every"] = cfg.eval_every
    run.record["default_eval_episodes"] = cfg.eval_episodes
    # The trainer's own greedy test, on the shared criterion and triggers: after the update that
    # crosses each multiple of EVAL_EVERY env steps or whose batch crosses the target.
    run.record["cadence"] = f"every {EVAL_EVERY} env steps and on crossing the target"
    cfg = dataclasses.replace(
        cfg,
        eval_every=EVAL_EVERY,
        eval_episodes=EVAL_EPISODES,
        target_return=TARGETS[env_id],
        total_steps=max_steps,
        sampled_report=False,  # a report after training that the peers do not make
    )
    # The cap interrupts train() without a result: its counters are then unknown.
    run.record.update(env_steps=None, episodes=None, updates=None)
    run.start()
    res = train(cfg)
    run.record.update(
        evals=sum(row.get("eval_return") is not None for row in res.history),
        eval_env_steps=int(res.eval_env_steps),
        solved=bool(res.solved),
        env_steps=int(res.env_steps),
        episodes=int(res.episodes),
        updates=int(res.updates),
        train_s=float(res.wall_s - res.eval_wall_s),
        eval_s=float(res.eval_wall_s),
        final_eval_return=res.final_eval_return,
    )


# --------------------------------------------------------------------------- Tianshou


def build_tianshou(env_id: str, seed: int):
    """Tianshou's REINFORCE as its CartPole test builds it: (net, policy, algorithm, train envs).

    The test's settings: ``TIANSHOU_NUM_ENVS`` envs, MLP 64-64 with a softmax, Adam 1e-3,
    γ 0.95, return standardisation, orthogonal init.
    """
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
    train_envs = DummyVectorEnv([lambda: gym.make(env_id) for _ in range(TIANSHOU_NUM_ENVS)])
    train_envs.seed(seed)
    net = Net(
        state_shape=env.observation_space.shape,
        action_shape=env.action_space.n,
        hidden_sizes=[64, 64],
        softmax=True,
    )
    policy = ProbabilisticActorPolicy(
        actor=net,
        dist_fn=torch.distributions.Categorical,
        action_space=env.action_space,
        action_scaling=False,
    )
    algorithm = Reinforce(
        policy=policy,
        optim=AdamOptimizerFactory(lr=1e-3),
        gamma=0.95,
        return_standardization=True,
    )
    for m in net.modules():
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.orthogonal_(m.weight, gain=np.sqrt(2))
            torch.nn.init.zeros_(m.bias)
    return net, policy, algorithm, train_envs


def build_tianshou_box(env_id: str, seed: int):
    """Tianshou's REINFORCE as its MuJoCo example builds it: (actor, policy, algorithm, envs).

    ``examples/mujoco/mujoco_reinforce.py``: observations normalised by running statistics,
    MLP 64-64 tanh, a state-independent log σ initialised to −0.5, orthogonal init with the
    mean layer scaled by 0.01, Adam 1e-3 with linear decay, γ 0.99, return standardisation,
    actions squashed by tanh and scaled to the bounds.
    """
    import gymnasium as gym
    import torch
    from tianshou.algorithm import Reinforce
    from tianshou.algorithm.modelfree.reinforce import ProbabilisticActorPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory, LRSchedulerFactoryLinear
    from tianshou.env import DummyVectorEnv, VectorEnvNormObs
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic

    np.random.seed(seed)  # noqa: NPY002
    torch.manual_seed(seed)
    env = gym.make(env_id)
    envs = DummyVectorEnv([lambda: gym.make(env_id) for _ in range(TIANSHOU_BOX_ENVS)])
    envs.seed(seed)
    envs = VectorEnvNormObs(envs)
    net = Net(
        state_shape=env.observation_space.shape, hidden_sizes=[64, 64], activation=torch.nn.Tanh
    )
    actor = ContinuousActorProbabilistic(
        preprocess_net=net, action_shape=env.action_space.shape, unbounded=True
    )
    torch.nn.init.constant_(actor.sigma_param, -0.5)
    for m in actor.modules():
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.orthogonal_(m.weight, gain=np.sqrt(2))
            torch.nn.init.zeros_(m.bias)
    for m in actor.mu.modules():
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.zeros_(m.bias)
            m.weight.data.copy_(0.01 * m.weight.data)

    def dist(loc_scale: tuple[torch.Tensor, torch.Tensor]) -> torch.distributions.Distribution:
        loc, scale = loc_scale
        return torch.distributions.Independent(torch.distributions.Normal(loc, scale), 1)

    policy = ProbabilisticActorPolicy(
        actor=actor,
        dist_fn=dist,
        action_space=env.action_space,
        action_scaling=True,
        action_bound_method="tanh",
    )
    optim = AdamOptimizerFactory(lr=1e-3).with_lr_scheduler_factory(
        LRSchedulerFactoryLinear(TIANSHOU_BOX_EPOCHS, TIANSHOU_BOX_EPOCH_STEPS, TIANSHOU_BOX_STEPS)
    )
    algorithm = Reinforce(policy=policy, optim=optim, gamma=0.99, return_standardization=True)
    return actor, policy, algorithm, envs


def run_tianshou_box(run: Run, env_id: str, seed: int, max_steps: int) -> None:
    import torch
    from tianshou.data import Collector, CollectStats, VectorReplayBuffer
    from tianshou.utils.torch_utils import policy_within_training_step

    run.start()
    actor, policy, algorithm, envs = build_tianshou_box(env_id, seed)
    buffer = VectorReplayBuffer(2 * TIANSHOU_BOX_STEPS, TIANSHOU_BOX_ENVS)
    collector = Collector[CollectStats](algorithm, envs, buffer, exploration_noise=True)
    collector.reset()
    run.evaluator = GreedyEvaluator(env_id, seed)

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        (mu, _), _ = actor(envs.get_obs_rms().norm(obs).astype(np.float32))
        return policy.map_action(mu.numpy())  # the mean, squashed and scaled as in training

    while run.record["env_steps"] < max_steps:
        with policy_within_training_step(policy):
            stats = collector.collect(n_step=TIANSHOU_BOX_STEPS)
            algorithm.update(buffer=collector.buffer, batch_size=None, repeat=1)
            collector.reset_buffer(keep_statistics=True)
        returns = np.asarray(stats.returns, dtype=float)
        if run.updated(int(stats.n_collected_steps), returns, act, actor):
            return


def run_tianshou(run: Run, env_id: str, seed: int, max_steps: int) -> None:
    import torch
    from tianshou.data import Collector, CollectStats, VectorReplayBuffer
    from tianshou.utils.torch_utils import policy_within_training_step

    if is_box(env_id):
        run_tianshou_box(run, env_id, seed, max_steps)
        return
    run.start()
    net, policy, algorithm, train_envs = build_tianshou(env_id, seed)
    buffer = VectorReplayBuffer(20_000, TIANSHOU_NUM_ENVS)
    collector = Collector[CollectStats](algorithm, train_envs, buffer)
    collector.reset()
    run.evaluator = GreedyEvaluator(env_id, seed)

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        probs, _ = net(obs)
        return probs.argmax(-1).numpy()

    while run.record["env_steps"] < max_steps:
        with policy_within_training_step(policy):
            stats = collector.collect(n_episode=TIANSHOU_EPISODES_PER_COLLECT)
            algorithm.update(
                buffer=collector.buffer, batch_size=TIANSHOU_MINIBATCH, repeat=TIANSHOU_REPEAT
            )
            collector.reset_buffer(keep_statistics=True)
        steps = int(stats.n_collected_steps)
        if run.updated(steps, np.asarray(stats.returns, dtype=float), act, net):
            return


# --------------------------------------------------------------------------- Stable-Baselines3


def build_sb3(env_id: str, seed: int, **a2c_kwargs: Any):
    """SB3's A2C with rl-zoo's hyperparameters for ``env_id`` (``SB3_ZOO``): (venv, model)."""
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    n_envs, normalize = SB3_ZOO.get(env_id, SB3_DEFAULTS)
    venv = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    if normalize:
        venv = VecNormalize(venv)
    model = A2C("MlpPolicy", venv, ent_coef=0.0, seed=seed, device="cpu", verbose=0, **a2c_kwargs)
    return venv, model


def run_sb3(run: Run, env_id: str, seed: int, max_steps: int) -> None:
    from stable_baselines3.common.callbacks import BaseCallback

    run.start()
    venv, model = build_sb3(env_id, seed)
    normalize = SB3_ZOO.get(env_id, SB3_DEFAULTS)[1]
    run.evaluator = GreedyEvaluator(env_id, seed)

    def act(obs: np.ndarray) -> np.ndarray:
        if normalize:
            obs = venv.normalize_obs(obs)
        return model.predict(obs, deterministic=True)[0]

    class Check(BaseCallback):
        stop = False
        returns: list[float] = []  # noqa: RUF012 (one callback per run)

        def _on_rollout_start(self) -> None:
            # Called before each rollout, i.e. right after the previous update.
            if self.num_timesteps == 0:
                return
            run.record["env_steps"] = int(self.num_timesteps)
            run.record["updates"] += 1
            train_mean = float(np.mean(self.returns)) if self.returns else None
            self.returns = []
            self.stop = run.check(act, None, train_mean)

        def _on_step(self) -> bool:
            run.record["episodes"] += int(np.sum(self.locals["dones"]))
            # make_vec_env's Monitor puts each ended episode's return in info["episode"]["r"].
            self.returns += [i["episode"]["r"] for i in self.locals["infos"] if "episode" in i]
            return not self.stop

    model.learn(total_timesteps=max_steps, callback=Check())


# --------------------------------------------------------------------------- plain PyTorch


def build_torch_example(env_id: str, seed: int):
    """The canonical example's policy and optimiser: (env, policy, Adam, distribution of out).

    128 hidden units, dropout, Adam at 1e-2; a softmax over actions (``Categorical``), or on a
    Box env the action's mean with a learnt state-independent log σ (``Normal``).
    """
    import gymnasium as gym
    import torch
    from torch import nn

    torch.manual_seed(seed)
    env = gym.make(env_id)
    obs_dim = env.observation_space.shape[0]
    box = isinstance(env.action_space, gym.spaces.Box)
    n_out = int(np.prod(env.action_space.shape)) if box else int(env.action_space.n)
    policy = nn.Sequential(
        nn.Linear(obs_dim, 128),
        nn.Dropout(p=0.6),
        nn.ReLU(),
        nn.Linear(128, n_out),
        *([] if box else [nn.Softmax(dim=-1)]),
    )
    if not box:
        return (
            env,
            policy,
            torch.optim.Adam(policy.parameters(), lr=1e-2),
            torch.distributions.Categorical,
        )
    policy.log_sigma = nn.Parameter(torch.zeros(n_out))  # a Sequential ignores it in forward

    def normal(mu: torch.Tensor) -> torch.distributions.Distribution:
        return torch.distributions.Independent(
            torch.distributions.Normal(mu, policy.log_sigma.exp()), 1
        )

    return env, policy, torch.optim.Adam(policy.parameters(), lr=1e-2), normal


def run_torch_example(run: Run, env_id: str, seed: int, max_steps: int) -> None:
    import gymnasium as gym
    import torch

    run.start()
    # One update per episode on normalised reward-to-go, as in the example.
    env, policy, opt, dist_of = build_torch_example(env_id, seed)
    gamma, eps = 0.99, float(np.finfo(np.float32).eps)
    run.evaluator = GreedyEvaluator(env_id, seed)
    space = env.action_space
    box = isinstance(space, gym.spaces.Box)

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        out = policy(torch.from_numpy(obs)).numpy()
        return np.clip(out, space.low, space.high) if box else out.argmax(-1)

    obs, _ = env.reset(seed=seed)
    while run.record["env_steps"] < max_steps:
        log_probs, rewards = [], []
        done = False
        while not done:
            dist = dist_of(policy(torch.from_numpy(obs.astype(np.float32))))
            a = dist.sample()
            log_probs.append(dist.log_prob(a))
            a_env = np.clip(a.numpy(), space.low, space.high) if box else int(a)
            obs, r, term, trunc, _ = env.step(a_env)
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
        if run.updated(len(rewards), np.array([sum(rewards)]), act, policy):
            return


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("system", choices=SYSTEMS)
    p.add_argument("--env", default="CartPole-v1", choices=sorted(TARGETS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cap", type=float, default=120.0, help="wall cap, s (training + evaluation)")
    p.add_argument("--max-steps", type=int, default=1_000_000, help="env-step budget")
    args = p.parse_args(argv)

    run = Run(args.system, args.env, args.seed, args.cap)
    if args.system != "eligibility-numpy":  # torch's import (about 0.8 s) only where it runs
        one_thread_torch()
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
        if not run.record["solved"]:
            run.record["error"] = "step budget"
    except CapReached:
        run.record["solved"] = False
        run.record["error"] = "wall cap"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    emit(run.finish())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
