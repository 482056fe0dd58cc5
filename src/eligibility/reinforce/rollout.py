r"""Complete episodes from a Gymnasium vector env, padded into (episode, time) arrays.

Gymnasium 1.x vector envs reset a sub-env by themselves once its episode ends. In the default
``NEXT_STEP`` autoreset mode the *next* ``step`` call after ``terminated or truncated`` resets
that sub-env: the action passed for it is ignored, its reward is 0 and its observation is the
first state sₒ of the new episode; that step belongs to no episode and is not recorded here.
In ``SAME_STEP`` mode the step that ends an episode already returns the next episode's s₀ and
puts the last state in ``info["final_obs"]``.

Which episodes go in a batch is fixed before any is played: sub-env i plays exactly qᵢ episodes,
qᵢ = ⌊n/N⌋ or ⌈n/N⌉ with Σ qᵢ = n. Taking "the first n episodes to finish" instead would favour
short episodes, a biased sample of the policy's episodes. Every batch starts from a reset, so an
episode is never split across two policies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from eligibility.reinforce.spaces import MASK_KEY, ObservationMap

Act = Callable[[np.ndarray, "np.ndarray | None"], np.ndarray]
"""The policy as the collector calls it: ``act(x, mask)``, x (N, obs_dim), mask (N, k) or None."""


class Batch(NamedTuple):
    """E complete episodes, padded to the longest, T steps.

    Attributes:
        obs: s_et, float64 (E, T, obs_dim).
        actions: a_et (E, T, *action_shape), as the policy drew them (before ``to_env``).
        rewards: r_et, the reward that followed a_et, float64 (E, T).
        mask: True where step t belongs to episode e, bool (E, T).
        terminated: True where the episode ended in a terminal state, False where it was
            truncated (a time limit: the state sₜ is not terminal and the return is cut short).
        final_obs: s_eT, the state after the last step, float64 (E, obs_dim) (used to bootstrap
            a truncated return with V(s_eT)).
        action_mask: the valid actions at s_et, bool (E, T, k), or None when the env gives no
            mask (``info["action_mask"]`` or an ``action_mask`` key of a Dict observation).
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    mask: np.ndarray
    terminated: np.ndarray
    final_obs: np.ndarray | None = None
    action_mask: np.ndarray | None = None

    @property
    def lengths(self) -> np.ndarray:
        """Tₑ, the number of steps of each episode."""
        return self.mask.sum(axis=1)

    @property
    def returns(self) -> np.ndarray:
        """Σₜ r_et, the undiscounted return of each episode."""
        return self.rewards.sum(axis=1)


def _autoreset_mode(envs: Any) -> str:
    mode = getattr(envs, "metadata", {}).get("autoreset_mode", None)
    return "NextStep" if mode is None else str(getattr(mode, "value", mode))


def _quota(n_episodes: int, n_envs: int) -> tuple[np.ndarray, np.ndarray]:
    """qᵢ = ⌊n/N⌋ or ⌈n/N⌉ episodes for sub-env i (Σ qᵢ = n), and the id of its first episode."""
    quota = np.full(n_envs, n_episodes // n_envs)
    quota[: n_episodes % n_envs] += 1
    return quota, np.concatenate([[0], np.cumsum(quota)[:-1]])


def _observe(
    obs_map: ObservationMap | None, obs: Any, info: dict[str, Any], n: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """x (n, obs_dim) float64 and the action mask (from the observation, else from ``info``)."""
    if obs_map is None:
        x, mask = np.asarray(obs, dtype=np.float64).reshape(n, -1), None
    else:
        x, mask = obs_map.batch(obs, n)
    if mask is None and MASK_KEY in info:
        mask = np.asarray(info[MASK_KEY]).astype(bool).reshape(n, -1)
    return x, mask


def _one(obs_map: ObservationMap | None, obs: Any) -> np.ndarray:
    """x of a single observation (a SAME_STEP ``final_obs``)."""
    if obs_map is None:
        return np.asarray(obs, dtype=np.float64).ravel()
    return obs_map.one(obs)[0][0]


def collect_episodes(
    envs: Any,
    act: Act,
    n_episodes: int,
    *,
    seed: int | None = None,
    to_env: Callable[[np.ndarray], np.ndarray] | None = None,
    obs_map: ObservationMap | None = None,
) -> Batch:
    """Play exactly ``n_episodes`` complete episodes on ``envs`` with the policy ``act``.

    Args:
        envs: a Gymnasium ``VectorEnv`` (``NEXT_STEP`` or ``SAME_STEP`` autoreset; ``DISABLED``
            works when no sub-env has to play two episodes).
        act: ``act(x, mask)`` maps states (N, obs_dim) and the action masks (N, k) or None to
            actions (N, …); called once per vector step.
        n_episodes: E, the number of episodes to return.
        seed: passed to ``envs.reset`` (None continues the envs' own generators).
        to_env: maps the policy's actions to the env's (clipping, offsets); identity if None.
        obs_map: maps the env's observations to rows x (and masks); None: Box observations,
            reshaped.

    Returns:
        The :class:`Batch`, episodes ordered by sub-env, then by time.

    Raises:
        ValueError: ``n_episodes`` < 1, or an autoreset mode that cannot give the episodes.
    """
    if n_episodes < 1:
        raise ValueError(f"n_episodes must be at least 1, got {n_episodes}")
    n_envs = envs.num_envs
    quota, first_id = _quota(n_episodes, n_envs)
    mode = _autoreset_mode(envs)
    if mode == "Disabled" and quota.max() > 1:
        raise ValueError(
            f"{n_episodes} episodes on {n_envs} envs need autoreset; make the vector env with "
            "autoreset (the default NEXT_STEP mode) or use num_envs >= n_episodes"
        )
    next_step = mode == "NextStep"

    raw, info = envs.reset(seed=seed)
    obs, mask = _observe(obs_map, raw, info, n_envs)
    done = np.zeros(n_envs, dtype=np.int64)  # episodes finished per sub-env
    t = np.zeros(n_envs, dtype=np.int64)  # time index within the current episode
    resetting = np.zeros(n_envs, dtype=bool)  # NEXT_STEP: this step only resets the sub-env
    terminated = np.zeros(n_episodes, dtype=bool)
    final_obs = np.zeros((n_episodes, obs.shape[1]))
    rec_obs, rec_a, rec_r, rec_id, rec_t, rec_valid, rec_m = [], [], [], [], [], [], []

    while (done < quota).any():
        valid = (done < quota) & ~resetting
        a = act(obs, mask)
        step = envs.step(a if to_env is None else to_env(a))
        raw, r, term, trunc, info = step
        next_obs, next_mask = _observe(obs_map, raw, info, n_envs)
        ep_id = first_id + done  # the episode each sub-env is playing
        rec_obs.append(obs)
        rec_m.append(mask)
        rec_a.append(a)
        rec_r.append(np.asarray(r, dtype=np.float64))
        rec_id.append(ep_id)
        rec_t.append(t)  # t is rebound below, never changed in place: no copy needed
        rec_valid.append(valid)

        term = np.asarray(term)
        ended = valid & (term | np.asarray(trunc))
        if ended.any():
            ids = ep_id[ended]
            terminated[ids] = term[ended]
            if next_step or mode == "Disabled":
                final_obs[ids] = next_obs[ended]
            else:
                final_obs[ids] = np.stack([_one(obs_map, o) for o in info["final_obs"][ended]])
        t = np.where(ended, 0, t + valid)
        done += ended
        resetting = ended if next_step else np.zeros_like(ended)
        obs, mask = next_obs, next_mask

    valid = np.stack(rec_valid)  # (S, N): S vector steps
    ep = np.stack(rec_id)[valid]
    tt = np.stack(rec_t)[valid]
    horizon = int(tt.max()) + 1
    a_all = np.stack(rec_a)
    out_obs = np.zeros((n_episodes, horizon, obs.shape[1]))
    out_obs[ep, tt] = np.stack(rec_obs)[valid]
    out_a = np.zeros((n_episodes, horizon, *a_all.shape[2:]), dtype=a_all.dtype)
    out_a[ep, tt] = a_all[valid]
    out_r = np.zeros((n_episodes, horizon))
    out_r[ep, tt] = np.stack(rec_r)[valid]
    steps = np.zeros((n_episodes, horizon), dtype=bool)
    steps[ep, tt] = True
    out_m = None
    if rec_m[0] is not None:
        m_all = np.stack(rec_m)
        out_m = np.ones((n_episodes, horizon, m_all.shape[2]), dtype=bool)
        out_m[ep, tt] = m_all[valid]
    return Batch(out_obs, out_a, out_r, steps, terminated, final_obs, out_m)
