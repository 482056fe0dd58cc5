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

from harness import EVAL_EPISODES, TARGETS, is_solved  # noqa: E402

__all__ = ["GreedyEvaluator", "emit", "one_thread_torch"]

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


class GreedyEvaluator:
    """R̄ = (1/N) Σᵢ Rᵢ over the first episode of each of N sync-vector envs under act(obs).

    One evaluator object per run; every call resets with the same seeds, so every evaluation of
    a run scores the policy on the same N start states. ``act`` maps a float32 (N, obs_dim)
    batch to N actions and must be greedy (the mode of the policy). The episodes are played by
    the project's own ``evaluate_returns``, one per env.
    """

    def __init__(self, env_id: str, seed: int, episodes: int = EVAL_EPISODES) -> None:
        from eligibility.reinforce.envs import make_vec_env

        self.envs = make_vec_env(env_id, episodes, "sync")
        self.seed = seed + EVAL_SEED_OFFSET
        self.episodes = episodes
        self.target = TARGETS[env_id]
        self.wall_s = 0.0
        self.calls = 0
        self.last_mean: float | None = None

    def __call__(self, act: Callable[[np.ndarray], np.ndarray]) -> bool:
        """Evaluate, add the time to ``wall_s``, and say whether the criterion holds."""
        from eligibility.reinforce.rollout import evaluate_returns

        t0 = time.perf_counter()
        # evaluate_returns hands act float64 observations; the peers' networks are float32.
        ret = evaluate_returns(
            self.envs, lambda obs, mask: act(obs.astype(np.float32)), self.episodes, seed=self.seed
        )
        self.wall_s += time.perf_counter() - t0
        self.calls += 1
        self.last_mean = float(ret.mean())
        return is_solved(ret.tolist(), self.target, self.episodes)


def emit(record: dict[str, Any]) -> None:
    """Print the run's result as the last stdout line (the driver parses it)."""
    sys.stdout.write("\nRESULT " + json.dumps(record) + "\n")
    sys.stdout.flush()
