"""Loading a training run: its config, its agent with the last checkpoint, its policy.

``policy = eligibility.load("runs/CartPole-v1-…")``, then ``policy.predict(obs)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from eligibility import runs
from eligibility.reinforce.config import IDENTITY, Config
from eligibility.reinforce.envs import EnvSpaces, make_vec_env, spaces_of
from eligibility.reinforce.policy import Policy

__all__ = ["load", "load_agent", "load_config"]


def load_config(run_dir: str | Path) -> Config:
    """The Config saved in ``run_dir``, ``out`` at it (see :func:`eligibility.runs.load_config`).

    Raises:
        ValueError: no run there, or a config.json that is not a valid config (naming the file
            and the field).
    """
    return runs.load_config(run_dir, Config)


def env_spaces(config: Config) -> EnvSpaces:
    """The observation map and action head of the run's env (made once, closed)."""
    envs = make_vec_env(config.env_id, 1, config.vectorization_mode, config.env_kwargs)
    try:
        return spaces_of(envs, config.continuous_head)
    finally:
        envs.close()


def load_agent(run_dir: str | Path) -> tuple[Config, Any, EnvSpaces]:
    """The run's Config, its agent with the last checkpoint's weights, and the env's spaces.

    Raises:
        ValueError: no run or no checkpoint in ``run_dir``, or a checkpoint that does not fit
            the network the config describes (a module passed in Python and not recorded).
    """
    from eligibility.backends import make_agent

    config = load_config(run_dir)
    if not (Path(run_dir) / runs.CHECKPOINT).is_file():
        raise ValueError(f"no checkpoint in {str(run_dir)!r}: {runs.CHECKPOINT} is missing")
    spaces = env_spaces(config)
    agent = make_agent(config, spaces.obs_dim, spaces.head, np.random.default_rng(0))
    try:
        expected = agent.state_dict()
        state, _ = runs.read_checkpoint(Path(run_dir), expected, config.to_dict(), IDENTITY)
        agent.load_state_dict({k: v for k, v in state.items() if not k.startswith("baseline.")})
    except (KeyError, RuntimeError, ValueError) as err:
        hint = ""
        if config.backend == "torch" and config.module is None:
            hint = (
                "; if it was trained with module= in Python, that module was not recorded: "
                "record it as a factory, Config(module='pkg.mod:factory') or --module "
                "pkg.mod:factory with factory(obs_dim, n_out) -> nn.Module"
            )
        raise ValueError(f"{err}{hint}") from None
    return config, agent, spaces


def load(run_dir: str | Path, *, seed: int = 0) -> Policy:
    """The trained policy of a run, ready to act: ``load(run).predict(obs)``.

    Args:
        run_dir: a directory written by ``eligibility train`` (or ``train(Config(out=...))``).
        seed: seed of the sampled actions (``predict(obs, deterministic=False)``).

    Raises:
        ValueError: not a run, no checkpoint, or one that does not fit its config.
    """
    config, agent, spaces = load_agent(run_dir)
    return Policy(config, agent, spaces, np.random.default_rng(seed))
