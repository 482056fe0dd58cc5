"""A video of one episode: frames from Gymnasium's ``render_mode="rgb_array"``, written as a GIF."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np

from eligibility._io import atomic_write_bytes, output_file


def episode_frames(policy: Any, *, deterministic: bool = True, seed: int = 0) -> list[np.ndarray]:
    """The RGB frames (H, W, 3) of one episode of ``policy`` (a :class:`Policy`), s₀ included.

    Raises:
        ValueError: the env cannot render RGB frames (its error, and what to install).
    """
    import gymnasium as gym

    from eligibility.reinforce.envs import resolve_id

    config = policy.config
    # Off-screen frames need no display: without these SDL (pygame, which draws the classic
    # control envs) prints "XDG_RUNTIME_DIR is invalid" on stderr where no session exists.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    name = resolve_id(config.env_id)
    entry = gym.envs.registry[name].entry_point
    creator = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    modes = getattr(creator, "metadata", {}).get("render_modes", [])
    if "rgb_array" not in modes:
        raise ValueError(
            f"{config.env_id} cannot render RGB frames (its metadata['render_modes'] is {modes}); "
            "--video needs an env that renders with render_mode='rgb_array'"
        )
    try:
        # The run's episode: it ends at the run's --max-episode-steps, as evaluate's do.
        limit = (
            {}
            if config.max_episode_steps is None
            else {"max_episode_steps": config.max_episode_steps}
        )
        env = gym.make(name, render_mode="rgb_array", **config.env_kwargs, **limit)
        obs, info = env.reset(seed=seed)
        frames = [env.render()]
        done = False
        while not done:
            mask = info.get("action_mask")
            a = policy.predict(obs, deterministic=deterministic, action_mask=mask)
            obs, _, term, trunc, info = env.step(a)
            frames.append(env.render())
            done = term or trunc
    except gym.error.DependencyNotInstalled as err:
        raise ValueError(f"rendering {config.env_id} needs: {err}") from None
    except Exception as err:  # the env's own rendering code: its error, in one line
        text = str(err).splitlines()[0] if str(err) else ""
        raise ValueError(
            f"rendering {config.env_id} failed: {type(err).__name__}: {text}"
        ) from None
    finally:
        if "env" in locals():
            env.close()
    if frames[0] is None:
        raise ValueError(f"{config.env_id} renders no RGB frames (render_mode='rgb_array')")
    return [np.asarray(f, dtype=np.uint8) for f in frames]


def write_video(frames: list[np.ndarray], path: str | Path, *, fps: int = 30) -> Path:
    """Write ``frames`` as an animated GIF (Pillow), atomically.

    Raises:
        ValueError: a suffix other than ``.gif``.
    """
    from PIL import Image

    path = output_file(path, option="--video")
    if path.suffix.lower() != ".gif":
        raise ValueError(f"--video writes a .gif file, got {path.name!r}")
    images = [Image.fromarray(f) for f in frames]
    buf = io.BytesIO()
    images[0].save(
        buf, format="GIF", save_all=True, append_images=images[1:], duration=1000 // fps, loop=0
    )
    atomic_write_bytes(path, buf.getvalue())
    return path
