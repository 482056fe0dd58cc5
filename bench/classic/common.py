"""What every benchmark runner process shares: one thread, a greedy evaluator, a JSON result line.

Import this module FIRST in a runner: it pins the BLAS/OpenMP pools to one thread before numpy
or torch is imported.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

# Before numpy/torch load: their thread pools read these once, at import.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402

from harness import EVAL_ENVS, EVAL_EPISODES, TARGETS  # noqa: E402

__all__ = ["GreedyEvaluator", "emit", "one_thread_torch", "process_clock"]

# Evaluation seeds live far from training seeds so a run is never scored on its training starts.
EVAL_SEED_OFFSET = 1_000_003


def one_thread_torch() -> None:
    """torch.set_num_threads(1) (and the inter-op pool), for the runners that use torch."""
    import torch

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or the pool already started: harmless
        pass


def process_clock() -> tuple[float, float]:
    """(wall, CPU) seconds of this process since it started: imports and interpreter included.

    Wall: now minus the process's start time in ``/proc/self/stat`` (clock ticks since boot);
    CPU: user + system time of this process (``os.times``).
    """
    t = os.times()
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/self/stat") as f:
        start = int(f.read().rpartition(")")[2].split()[19]) / ticks
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start, t.user + t.system


class GreedyEvaluator:
    """The greedy test of every peer: the trainer's own sequential test, on EVAL_ENVS sync envs.

    Solved ⇔ R̄ = (1/N) Σᵢ Rᵢ ≥ target over N episodes (EVAL_ENVS sub-envs, each playing
    N / EVAL_ENVS of them, as ``train`` plays its test) under act(obs);
    the episodes stop as soon as the verdict is certain
    (:func:`eligibility.reinforce.stopping.verdict`, the rule ``train`` uses), and their env
    steps are counted in ``env_steps``. One evaluator object per run; every call resets with the
    same seeds, so every evaluation of a run scores the policy on the same N start states.
    ``act`` maps a float32 (N, obs_dim) batch to N actions and must be greedy (the mode of the
    policy).
    """

    def __init__(self, env_id: str, seed: int, episodes: int = EVAL_EPISODES) -> None:
        from eligibility.reinforce.envs import episode_limit, make_vec_env
        from eligibility.reinforce.stopping import reward_range

        self.envs = make_vec_env(env_id, min(EVAL_ENVS, episodes), "sync")
        self.seed = seed + EVAL_SEED_OFFSET
        self.episodes = episodes
        self.target = TARGETS[env_id]
        self.r_range = reward_range(env_id)
        self.horizon = episode_limit(env_id)[0]
        self.wall_s = 0.0
        self.calls = 0
        self.env_steps = 0
        self.last_mean: float | None = None

    def __call__(self, act: Callable[[np.ndarray], np.ndarray]) -> bool:
        """Evaluate, add the time to ``wall_s``, and say whether the criterion holds."""
        from eligibility.reinforce.rollout import returns_as_played
        from eligibility.reinforce.stopping import mean_bounds, verdict

        t0 = time.perf_counter()
        # returns_as_played hands act float64 observations; the peers' networks are float32.
        played = returns_as_played(
            self.envs, lambda obs, mask: act(obs.astype(np.float32)), self.episodes, seed=self.seed
        )
        for g, t, ended in played:
            passed = verdict(g, t, ended, self.target, self.r_range, self.horizon)
            if passed is not None:
                played.close()
                break
        self.wall_s += time.perf_counter() - t0
        self.calls += 1
        self.env_steps += int(t.sum())
        lo, hi = mean_bounds(g, t, ended, self.r_range or (0.0, 0.0), self.horizon)
        self.last_mean = lo if passed else hi  # the mean itself once every episode has ended
        return bool(passed)


def emit(record: dict[str, Any]) -> None:
    """Print the run's result as the last stdout line (the driver parses it)."""
    sys.stdout.write("\nRESULT " + json.dumps(record) + "\n")
    sys.stdout.flush()
