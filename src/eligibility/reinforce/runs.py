"""Loading a training run: its config, its agent with the last checkpoint, its policy.

``policy = eligibility.load("runs/CartPole-v1-…")``, then ``policy.predict(obs)``;
:func:`evaluate_run` plays its episodes for ``eligibility evaluate``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np

from eligibility import runs
from eligibility.reinforce.config import IDENTITY, MAX_EPISODES, Config
from eligibility.reinforce.envs import EnvSpaces, episode_limit, make_vec_env, spaces_of
from eligibility.reinforce.policy import Policy
from eligibility.reinforce.rollout import MAX_EVAL_ENVS, evaluate_returns

__all__ = ["evaluate_run", "load", "load_agent", "load_config"]


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


def evaluate_run(
    run_dir: str | Path,
    *,
    episodes: int = 100,
    greedy: bool = True,
    seed: int = 0,
    video: str | None = None,
    show_system: bool = False,
) -> dict[str, Any]:
    """The returns of a run's policy over ``episodes`` episodes (``eligibility evaluate``).

    Args:
        run_dir: a directory written by ``eligibility train``.
        episodes: episodes to play, in parallel envs (at most ``MAX_EVAL_ENVS`` at once).
        greedy: the distribution's mode at every step, or actions sampled from the policy.
        seed: seed of the envs and the samples.
        video: also write one episode to this file as an animated GIF (first, so that an env
            that cannot render fails before the episodes).
        show_system: refused: a Gymnasium run's policy reads no prompt (``finetune``'s).

    Returns:
        The summary: ``env_id``, ``episodes``, ``policy``, the returns' mean, std, min and max
        (and ``video``, ``video_frames``).

    Raises:
        ValueError: not a run, no checkpoint, a bad ``episodes``, ``show_system``.
        Interrupted: SIGINT/SIGTERM while the episodes were played (nothing is written).
    """
    if not 1 <= episodes <= MAX_EPISODES:
        raise ValueError(f"--episodes must be in [1, {MAX_EPISODES}], got {episodes}")
    if show_system:
        raise ValueError("--show-system is for finetune runs: a train run's policy reads no prompt")
    policy = load(run_dir, seed=seed)
    config, agent, spaces = policy.config, policy.agent, policy.spaces
    rng = np.random.default_rng(seed)
    shown: dict[str, Any] = {}
    if video is not None:
        from eligibility.reinforce.video import episode_frames, write_video

        frames = episode_frames(policy, deterministic=greedy, seed=seed)
        shown = {"video": str(write_video(frames, video)), "video_frames": len(frames)}
    limit, _ = episode_limit(config.env_id, config.max_episode_steps)
    with (
        runs.stop_on_signals() as stop,
        contextlib.closing(
            make_vec_env(
                config.env_id,
                min(episodes, MAX_EVAL_ENVS),
                config.vectorization_mode,
                config.env_kwargs,
                config.max_episode_steps,
            )
        ) as envs,
    ):
        returns = evaluate_returns(
            envs,
            lambda s, m: agent.policy.act(s, rng, greedy=greedy, mask=m),
            episodes,
            seed=seed,
            to_env=spaces.head.to_env,
            obs_map=spaces.obs,
            name=config.env_id,
            stop=stop,
            max_episode_steps=limit,
        )
    return {
        "env_id": config.env_id,
        "episodes": int(episodes),
        "policy": "greedy" if greedy else "sample",
        "mean_return": float(returns.mean()),
        "std_return": float(returns.std()),
        "min_return": float(returns.min()),
        "max_return": float(returns.max()),
        **shown,
    }
