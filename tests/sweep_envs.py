"""An env that misbehaves on request, for the sweep's fault suite: ``sweep_envs:Hostile-v0``.

A 10-step task (reward 1 when the action equals the parity of the step) whose ``fault`` fires
at its ``after``-th step: ``raise`` (an exception in ``step``), ``exit`` (``os._exit(3)``),
``kill`` (SIGKILL of its own process: what the kernel's OOM killer does), ``hang`` (sleeps,
never returning) or ``print`` (writes to stdout at every step from then on, as chatty envs
do). With ``once=PATH`` the fault fires only while PATH does not exist (it is created first),
so a re-run of the sweep gets past it.

:class:`FinishedLauncher` stands in for a launcher where only the sweep's own bookkeeping is
under test.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Hostile(gym.Env):
    def __init__(self, fault: str = "none", after: int = 30, once: str | None = None):
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.fault, self.after, self.once = fault, after, once
        self.t = self.steps = 0

    def _obs(self):
        return np.array([self.t % 2, 1.0], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.steps += 1
        if self.fault != "none" and self.steps >= self.after and self._armed():
            if self.fault == "raise":
                raise RuntimeError("the env broke")
            if self.fault == "exit":
                os._exit(3)
            if self.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.fault == "hang":
                time.sleep(3600)
            if self.fault == "print":
                print(f"step {self.steps}: {{not json")
        reward = float(int(action) == self.t % 2)
        self.t += 1
        return self._obs(), reward, False, False, {}

    def _armed(self) -> bool:
        if self.once is None:
            return True
        if Path(self.once).exists():
            return False
        Path(self.once).touch()
        return True


gym.register("Hostile-v0", entry_point=Hostile, max_episode_steps=10)


class FinishedLauncher:
    """A test double of a launcher: every job ends ok at once, no process started (for the
    sweep's own bookkeeping: its last phase, its records)."""

    offset = 0.0

    def __init__(self, workers, address=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def run(self, jobs, on_result, received, **kw):
        for job in jobs:
            on_result(
                {
                    "ok": True,
                    "error": None,
                    "solved": False,
                    "target_return": 475.0,
                    "budget": 1000,
                    "env_steps": 1000,
                    "wall_s": 1.0,
                    "final_eval_return": 10.0 + job["index"] + self.offset,
                    "steps_to_target": None,
                    "curve": {"env_steps": [500, 1000], "mean_return": [5.0, 9.0], "eval": []},
                    "index": job["index"],
                    "seed": job["config"]["seed"],
                    "dir": job["config"]["out"],
                }
            )
