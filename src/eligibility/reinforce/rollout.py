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

Bounded work: an episode that reaches ``max_episode_steps`` without ending is an
:class:`EnvError` (an env with no time limit would otherwise run, and grow, forever), a batch
that would take more than ``max_steps`` steps is dropped (:class:`StepBudgetSpent`), and a
:class:`~eligibility._signals.Stop` is polled at every vector step. What the env returns is
checked as it arrives: a non-finite observation or reward, or an action mask that allows
nothing, is an :class:`EnvError` naming the env, the step and the component.
"""

from __future__ import annotations

import collections
import traceback
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from eligibility._signals import Stop
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


MAX_EVAL_ENVS = 100
"""Sub-envs of an evaluation's vector env: all episodes at once, up to this many."""

DEFAULT_MAX_EPISODE_STEPS = 100_000
"""The step cap of an episode of an env that has no time limit of its own (``--max-episode-steps``
sets a time limit instead)."""


class EnvError(ValueError):
    """The env broke its contract: the message names the env and what to fix.

    Non-finite values, no valid action, an episode that never ends, an exception in its own code.
    """


class StepBudgetSpent(Exception):
    """The step budget ran out before the batch's episodes ended; the batch is dropped."""


def env_error(name: str, call: str, err: BaseException) -> EnvError:
    """An exception raised inside the env's ``call`` as one line: its type, text and place."""
    frames = traceback.extract_tb(err.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    text = str(err).splitlines()[0] if str(err) else ""
    return EnvError(f"{name}: {call} raised {type(err).__name__}: {text}{where}; fix the env")


def _autoreset_mode(envs: Any) -> str:
    mode = getattr(envs, "metadata", {}).get("autoreset_mode", None)
    return "NextStep" if mode is None else str(getattr(mode, "value", mode))


def _quota(n_episodes: int, n_envs: int) -> tuple[np.ndarray, np.ndarray]:
    """qᵢ = ⌊n/N⌋ or ⌈n/N⌉ episodes for sub-env i (Σ qᵢ = n), and the id of its first episode."""
    quota = np.full(n_envs, n_episodes // n_envs)
    quota[: n_episodes % n_envs] += 1
    return quota, np.concatenate([[0], np.cumsum(quota)[:-1]])


def _observe(
    obs_map: ObservationMap | None, obs: Any, info: dict[str, Any], n: int, name: str
) -> tuple[np.ndarray, np.ndarray | None]:
    """x (n, obs_dim) float64 and the action mask (from the observation, else from ``info``)."""
    try:
        if obs_map is None:
            x, mask = np.asarray(obs, dtype=np.float64).reshape(n, -1), None
        else:
            x, mask = obs_map.batch(obs, n)
        if mask is None and MASK_KEY in info:
            mask = np.asarray(info[MASK_KEY]).astype(bool).reshape(n, -1)
    except (TypeError, ValueError) as err:
        raise EnvError(
            f"{name} returned an observation that is not numbers of the observation "
            f"space's shape ({err}); fix the env"
        ) from None
    return x, mask


def _one(obs_map: ObservationMap | None, obs: Any) -> np.ndarray:
    """x of a single observation (a SAME_STEP ``final_obs``)."""
    if obs_map is None:
        return np.asarray(obs, dtype=np.float64).ravel()
    return obs_map.one(obs)[0][0]


def _check_finite(
    name: str, what: str, values: np.ndarray, rows: np.ndarray, t: np.ndarray
) -> None:
    """EnvError naming the first non-finite entry of ``values`` (n, k) among ``rows``."""
    bad = ~np.isfinite(values) & rows.reshape(-1, *([1] * (values.ndim - 1)))
    if bad.any():
        i, *j = (int(v) for v in np.argwhere(bad)[0])
        part = f"component {j[0]} is " if j else ""
        raise EnvError(
            f"{name} returned a non-finite {what} at step {t[i]} of an episode (sub-env {i}): "
            f"{part}{values[(i, *j)]}; fix the env, or wrap it to replace or end on such values"
        )


class _Step(NamedTuple):
    """One vector step: what each sub-env saw and did, and which episodes it ended."""

    obs: np.ndarray
    mask: np.ndarray | None
    a: np.ndarray
    r: np.ndarray
    ep_id: np.ndarray
    t: np.ndarray
    valid: np.ndarray
    ended: np.ndarray
    term: np.ndarray
    final_obs: np.ndarray | None


def _play(
    envs: Any,
    act: Act,
    n_episodes: int,
    *,
    seed: int | None,
    to_env: Callable[[np.ndarray], np.ndarray] | None,
    obs_map: ObservationMap | None,
    name: str,
    stop: Stop | None,
    max_episode_steps: int | None,
    max_steps: int | None,
) -> Iterator[_Step]:
    """The vector steps of exactly ``n_episodes`` episodes (the contract of collect_episodes)."""
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

    raw, info = _call(envs.reset, name, "reset()", seed=seed)
    obs, mask = _observe(obs_map, raw, info, n_envs, name)
    done = np.zeros(n_envs, dtype=np.int64)  # episodes finished per sub-env
    t = np.zeros(n_envs, dtype=np.int64)  # time index within the current episode
    resetting = np.zeros(n_envs, dtype=bool)  # NEXT_STEP: this step only resets the sub-env
    taken = 0
    while (done < quota).any():
        if stop is not None:
            stop.check()
        valid = (done < quota) & ~resetting
        _check_finite(name, "observation", obs, valid, t)
        if mask is not None:
            empty = ~mask.any(axis=1)
            if (empty & valid).any():
                i = int(np.argmax(empty & valid))
                raise EnvError(
                    f"{name} gave an action mask that allows no action at step {t[i]} of an "
                    f"episode (sub-env {i}); end the episode there, or allow at least one action"
                )
            if empty.any():  # a sub-env whose step is not recorded: any action will do
                mask = mask | empty[:, None]
        a = act(obs, mask)
        raw, r, term, trunc, info = _call(
            envs.step, name, "step()", a if to_env is None else to_env(a)
        )
        r = np.asarray(r, dtype=np.float64)
        _check_finite(name, "reward", r, valid, t)
        next_obs, next_mask = _observe(obs_map, raw, info, n_envs, name)
        term = np.asarray(term)
        ended = valid & (term | np.asarray(trunc))
        final = None
        if ended.any():
            if next_step or mode == "Disabled":
                final = next_obs[ended]
            else:
                final = np.stack([_one(obs_map, o) for o in info["final_obs"][ended]])
            _check_finite(name, "final observation", final, np.ones(len(final), bool), t[ended] + 1)
        yield _Step(obs, mask, a, r, first_id + done, t, valid, ended, term, final)
        taken += int(valid.sum())
        if max_steps is not None and taken > max_steps:
            raise StepBudgetSpent
        t = np.where(ended, 0, t + valid)
        if max_episode_steps is not None and (t >= max_episode_steps).any():
            raise EnvError(
                f"{name}: an episode ran {max_episode_steps} steps without ending and the env "
                f"has no time limit; pass --max-episode-steps N to truncate its episodes at N "
                "steps (or end them in the env)"
            )
        done += ended
        resetting = ended if next_step else np.zeros_like(ended)
        obs, mask = next_obs, next_mask


def _call(fn: Callable[..., Any], name: str, call: str, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, an exception from the env's own code as an :class:`EnvError`."""
    try:
        return fn(*args, **kwargs)
    except EnvError:
        raise
    except Exception as err:  # the user's env: whatever it raises is its message
        raise env_error(name, call, err) from None


def _check_sums(name: str, returns: np.ndarray) -> None:
    """EnvError when a return overflowed (every reward was finite, their sum is not)."""
    if not np.isfinite(returns).all():
        raise EnvError(
            f"{name}'s rewards are too large to sum: an episode's return overflows float64; "
            "scale the rewards down (e.g. gymnasium.wrappers.TransformReward)"
        )


def collect_episodes(
    envs: Any,
    act: Act,
    n_episodes: int,
    *,
    seed: int | None = None,
    to_env: Callable[[np.ndarray], np.ndarray] | None = None,
    obs_map: ObservationMap | None = None,
    name: str = "the env",
    stop: Stop | None = None,
    max_episode_steps: int | None = None,
    max_steps: int | None = None,
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
        name: the env's name in error messages.
        stop: polled at every vector step (raises :class:`~eligibility._signals.Interrupted`).
        max_episode_steps: an episode this long that has not ended is an :class:`EnvError`.
        max_steps: the step budget of the batch (:class:`StepBudgetSpent` past it).

    Returns:
        The :class:`Batch`, episodes ordered by sub-env, then by time.

    Raises:
        ValueError: ``n_episodes`` < 1, or an autoreset mode that cannot give the episodes.
        EnvError: the env misbehaved (see the module docstring).
        StepBudgetSpent: more than ``max_steps`` steps.
    """
    steps = list(
        _play(
            envs,
            act,
            n_episodes,
            seed=seed,
            to_env=to_env,
            obs_map=obs_map,
            name=name,
            stop=stop,
            max_episode_steps=max_episode_steps,
            max_steps=max_steps,
        )
    )
    terminated = np.zeros(n_episodes, dtype=bool)
    final_obs = np.zeros((n_episodes, steps[0].obs.shape[1]))
    for s in steps:
        if s.final_obs is not None:
            terminated[s.ep_id[s.ended]] = s.term[s.ended]
            final_obs[s.ep_id[s.ended]] = s.final_obs
    valid = np.stack([s.valid for s in steps])  # (S, N): S vector steps
    ep = np.stack([s.ep_id for s in steps])[valid]
    tt = np.stack([s.t for s in steps])[valid]
    horizon = int(tt.max()) + 1
    a_all = np.stack([s.a for s in steps])
    out_obs = np.zeros((n_episodes, horizon, steps[0].obs.shape[1]))
    out_obs[ep, tt] = np.stack([s.obs for s in steps])[valid]
    out_a = np.zeros((n_episodes, horizon, *a_all.shape[2:]), dtype=a_all.dtype)
    out_a[ep, tt] = a_all[valid]
    out_r = np.zeros((n_episodes, horizon))
    out_r[ep, tt] = np.stack([s.r for s in steps])[valid]
    with np.errstate(over="ignore"):
        _check_sums(name, out_r.sum(axis=1))
    mask = np.zeros((n_episodes, horizon), dtype=bool)
    mask[ep, tt] = True
    out_m = None
    if steps[0].mask is not None:
        m_all = np.stack([s.mask for s in steps])
        out_m = np.ones((n_episodes, horizon, m_all.shape[2]), dtype=bool)
        out_m[ep, tt] = m_all[valid]
    return Batch(out_obs, out_a, out_r, mask, terminated, final_obs, out_m)


def evaluate_returns(envs: Any, act: Act, n_episodes: int, **options: Any) -> np.ndarray:
    """The undiscounted returns of ``n_episodes`` complete episodes (sub-env i plays qᵢ of them).

    The episodes of :func:`collect_episodes` (same quota, autoreset handling, masks and
    checks; ``options`` are its keywords but ``max_steps``), summed as they are played: memory
    is one float per episode, however long they are.
    """
    (g, _, _), *_ = collections.deque(returns_as_played(envs, act, n_episodes, **options), 1)
    return g


def returns_as_played(
    envs: Any, act: Act, n_episodes: int, **options: Any
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`evaluate_returns` one vector step at a time: after each, (Gᵢ, tᵢ, dᵢ) so far.

    Gᵢ is the return episode i has earned, tᵢ its steps, dᵢ whether it has ended, each (n,);
    the same arrays are updated in place from step to step. A caller that stops iterating
    stops playing (a sequential test, :mod:`eligibility.reinforce.stopping`).
    """
    name = options.get("name", "the env")
    g, t = np.zeros(n_episodes), np.zeros(n_episodes, dtype=np.int64)
    ended = np.zeros(n_episodes, dtype=bool)
    for s in _play(envs, act, n_episodes, **{**_PLAY_DEFAULTS, **options}):
        with np.errstate(over="ignore"):
            np.add.at(g, s.ep_id[s.valid], s.r[s.valid])
        t[s.ep_id[s.valid]] += 1
        ended[s.ep_id[s.ended]] = True
        yield g, t, ended
    _check_sums(name, g)


_PLAY_DEFAULTS: dict[str, Any] = dict(
    seed=None,
    to_env=None,
    obs_map=None,
    name="the env",
    stop=None,
    max_episode_steps=None,
    max_steps=None,
)
