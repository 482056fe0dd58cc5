r"""The training loop: collect E episodes, estimate ∇J, step, repeat (Williams' episodic REINFORCE).

    θ ← θ + α ĝ,   ĝ = (1/E) Σ_e Σ_t (G_et − b_et) ∇θ ln π(a_et | s_et)

One readable function, :func:`train`; the estimate itself is
:func:`eligibility.reinforce.estimator.policy_gradient`, the same code path the lab checks.
"""

from __future__ import annotations

import dataclasses
import math
import signal
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from eligibility.backends import make_agent
from eligibility.reinforce.config import Config, resumed
from eligibility.reinforce.envs import make_vec_env, resolve_id, spaces_of
from eligibility.reinforce.estimator import collect_episodes, policy_gradient
from eligibility.reinforce.evaluate import MAX_EVAL_ENVS, evaluate_returns
from eligibility.reinforce.policy import Policy


@dataclass
class TrainResult:
    """What a run did.

    Attributes:
        solved: the greedy evaluation reached ``target_return``.
        env_steps: environment steps taken in training (evaluation not counted).
        episodes: training episodes.
        updates: gradient steps.
        wall_s: total wall time of :func:`train`, evaluation included.
        eval_wall_s: the part of ``wall_s`` spent evaluating.
        final_eval_return: mean return of the last evaluation (None if none ran).
        out_dir: the run directory (None when nothing was written).
        target_return: the target used (None: none).
        history: one dict per update (the rows of metrics.csv).
        already_solved: a resumed run that had met its target: nothing was trained.
        policy: the trained policy (``policy.predict(obs)``), also when nothing was written.
        sampled_eval_return: mean return of the sampled policy at the end, when the greedy
            evaluation ran (None otherwise).
    """

    solved: bool
    env_steps: int
    episodes: int
    updates: int
    wall_s: float
    eval_wall_s: float
    final_eval_return: float | None
    out_dir: Path | None
    target_return: float | None = None
    history: list[dict[str, Any]] = field(default_factory=list, repr=False)
    already_solved: bool = False
    policy: Policy | None = field(default=None, repr=False)
    sampled_eval_return: float | None = None


class NonFiniteError(ValueError):
    """NaN or ±inf in the loss, the gradient or the value loss: the run stops, nothing is saved."""


class Interrupted(Exception):
    """SIGINT or SIGTERM stopped the run after the update in progress; a checkpoint was written.

    Attributes:
        signum: the signal.
        out_dir: the run directory to resume.
    """

    def __init__(self, signum: int, out_dir: Path) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum
        self.out_dir = out_dir


def _stop_on_signals(flag: list[int]) -> Callable[[], None]:
    """Make SIGINT/SIGTERM append their number to ``flag`` instead of killing; returns the undo.

    A second signal acts as usual (KeyboardInterrupt, or termination). Handlers are installed in
    the main thread only (Python delivers signals there); elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: Any) -> None:
        flag.append(signum)
        signal.signal(signum, previous[signum])  # the second one is not deferred

    for s in previous:
        signal.signal(s, handler)

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    return restore


def default_target(env_id: str) -> float | None:
    """The env's registered ``reward_threshold`` (CartPole-v1: 475), or None."""
    import gymnasium as gym

    spec = gym.envs.registry.get(resolve_id(env_id))
    return None if spec is None else spec.reward_threshold


def _non_finite(what: str, value: float, counters: dict[str, int], config: Config, run: Any) -> str:
    """Say which quantity went non-finite, what most likely caused it, and what is saved."""
    cause = {
        "value loss": f"--value-lr {config.value_lr} is likely too large",
        "loss": f"--lr {config.lr} is likely too large",
        "gradient norm": f"--lr {config.lr} is likely too large (or add --max-grad-norm)",
    }[what]
    if config.entropy_coef > 1 and what != "value loss":
        cause += f", or --entropy-coef {config.entropy_coef}"
    if run is not None and (run.path / "checkpoint.safetensors").exists():
        saved = f"the checkpoint in {run.path} (the last good one) is intact"
    else:
        saved = "no checkpoint was written yet"
    return f"the {what} became {value} at update {counters['updates'] + 1}: {cause}; {saved}"


def _warn_if_collapsed(h_before: float, h_after: float, config: Config) -> None:
    """Warn once when the first update collapsed the policy's entropy (lr far too large)."""
    if h_before > 0 and h_after < 0.01 * h_before:
        warnings.warn(
            f"the first update collapsed the policy's entropy from {h_before:.3g} to "
            f"{h_after:.3g}: --lr {config.lr} is likely far too large for this env",
            RuntimeWarning,
            stacklevel=3,
        )


def _global_norm(grads: dict[str, np.ndarray]) -> float:
    return math.sqrt(sum(float(np.sum(g * g)) for g in grads.values()))


def train(
    config: Config,
    *,
    module: Any = None,
    resume: str | Path | None = None,
    callback: Callable[[dict[str, Any]], bool | None] | None = None,
) -> TrainResult:
    """Train a policy with REINFORCE until it solves the env or spends ``total_steps``.

    Args:
        config: the run's settings (:meth:`Config.for_env` gives tuned ones).
        module: torch backend only: your own ``nn.Module`` mapping states to the head's z.
        resume: a run directory to continue from its last checkpoint. The run's saved config is
            used; only ``total_steps`` and ``progress`` are taken from ``config``.
        callback: called as ``callback(row)`` after each update with that update's metrics row
            (the columns of metrics.csv); returning ``False`` stops the run cleanly, with a
            checkpoint, as if its budget were spent. The hook sweeps and searches build on.

    Returns:
        The :class:`TrainResult`.

    Raises:
        ValueError: unknown env id, unsupported space, bad settings.
        NonFiniteError: NaN/inf in the loss or gradient (after the last good checkpoint).
    """
    t_start = time.perf_counter()
    from eligibility.reinforce import logs

    if resume is not None:  # the saved run is the identity; only changeable settings apply
        given = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
        given.pop("out")
        from eligibility.reinforce.runs import load_config

        config = resumed(load_config(resume), given)
    target = (
        config.target_return if config.target_return is not None else default_target(config.env_id)
    )
    if target == math.inf:  # switched off
        target = None

    # -- environment, distribution, agent ------------------------------------------------------
    envs = make_vec_env(
        config.env_id, config.num_envs, config.vectorization_mode, config.env_kwargs
    )
    try:
        spaces = spaces_of(envs, config.continuous_head)
    except BaseException:
        envs.close()
        raise
    head, obs_dim = spaces.head, spaces.obs_dim
    init_ss, act_ss, env_ss, eval_ss = np.random.SeedSequence(config.seed).spawn(4)
    agent = make_agent(config, obs_dim, head, np.random.default_rng(init_ss), module)
    act_rng = np.random.default_rng(act_ss)  # the policy's draws
    env_rng = np.random.default_rng(env_ss)  # one reset seed per batch: resumable envs
    eval_rng = np.random.default_rng(eval_ss)
    eval_envs = None

    counters = {"updates": 0, "env_steps": 0, "episodes": 0}
    baseline_state: dict[str, np.ndarray] = {}
    try:
        run = logs.RunDir.open(config, resume=resume is not None) if config.out else None
    except BaseException:
        envs.close()
        raise
    history: list[dict[str, Any]] = []
    if run is not None and resume is not None:
        try:
            history = run.restore(agent, counters, baseline_state, [act_rng, env_rng, eval_rng])
        except BaseException:
            run.close()
            envs.close()
            raise
        last_eval = next((r["eval_return"] for r in reversed(history) if r["eval_return"]), None)
        if target is not None and last_eval is not None and last_eval >= target:
            run.close()  # nothing to do: it met its target (raise it, or switch it off, to go on)
            envs.close()
            return TrainResult(
                policy=Policy(config, agent, spaces),
                solved=True,
                env_steps=counters["env_steps"],
                episodes=counters["episodes"],
                updates=counters["updates"],
                wall_s=time.perf_counter() - t_start,
                eval_wall_s=0.0,
                final_eval_return=last_eval,
                out_dir=run.path,
                target_return=target,
                history=history,
                already_solved=True,
            )
    progress = logs.Progress(config, counters) if config.progress else None
    signals: list[int] = []  # SIGINT/SIGTERM received: stop after this update, checkpointed

    eval_wall = 0.0
    final_eval: float | None = None
    solved = False
    stopped = False  # by the callback
    recent: list[float] = []
    t_loop = time.perf_counter()
    steps_at_loop = counters["env_steps"]
    restore_signals = _stop_on_signals(signals) if run is not None else (lambda: None)
    try:
        while counters["env_steps"] < config.total_steps and not (solved or stopped or signals):
            # -- collect E complete episodes under the current policy --------------------------
            batch = collect_episodes(
                envs,
                lambda s, m: agent.act(s, act_rng, mask=m),
                config.episodes_per_batch,
                seed=int(env_rng.integers(2**31 - 1)),
                to_env=head.to_env,
                obs_map=spaces.obs,
            )

            # -- the REINFORCE estimate (values from the fit before this batch) ----------------
            values = bootstrap = None
            if config.baseline == "value":
                values = agent.values(batch.obs.reshape(-1, obs_dim)).reshape(batch.mask.shape)
                if config.bootstrap_truncated:
                    bootstrap = np.where(batch.terminated, 0.0, agent.values(batch.final_obs))
            grads, info = policy_gradient(
                agent.policy,
                batch,
                gamma=config.gamma,
                baseline=config.baseline,
                baseline_state=baseline_state,
                values=values,
                bootstrap=bootstrap,
                discount_weighting=config.discount_weighting,
                decay=config.baseline_decay,
                normalize_advantages=config.normalize_advantages,
                entropy_coef=config.entropy_coef,
            )
            loss = -(info["surrogate"] + config.entropy_coef * info["entropy"])
            grad_norm = _global_norm(grads)
            for what, value in (("loss", loss), ("gradient norm", grad_norm)):
                if not math.isfinite(value):
                    raise NonFiniteError(_non_finite(what, value, counters, config, run))

            # -- step: clip, ascend, fit V ----------------------------------------------------
            if config.max_grad_norm is not None and grad_norm > config.max_grad_norm:
                grads = {k: g * (config.max_grad_norm / grad_norm) for k, g in grads.items()}
            agent.apply(grads)
            baseline_state = info["baseline_state"]
            value_loss = None
            if config.baseline == "value":
                m = batch.mask
                value_loss = agent.fit_value(batch.obs[m], info["returns"][m], config.value_epochs)
                if not math.isfinite(value_loss):
                    raise NonFiniteError(
                        _non_finite("value loss", value_loss, counters, config, run)
                    )

            steps_before = counters["env_steps"]
            counters["updates"] += 1
            counters["env_steps"] += int(batch.mask.sum())
            counters["episodes"] += config.episodes_per_batch
            ret = batch.returns
            recent = (recent + ret.tolist())[-100:]

            # -- evaluate the greedy policy each time the steps cross a multiple of eval_every --
            # (counted in env steps, not updates, so that systems with different batch sizes
            # are checked at the same cadence; it depends on the counters alone, so resumes agree)
            eval_return = None
            due = config.eval_every and (
                counters["env_steps"] // config.eval_every > steps_before // config.eval_every
            )
            if due:
                t0 = time.perf_counter()
                if eval_envs is None:
                    n_eval = min(config.eval_episodes, MAX_EVAL_ENVS)
                    eval_envs = make_vec_env(
                        config.env_id, n_eval, config.vectorization_mode, config.env_kwargs
                    )
                returns = evaluate_returns(
                    eval_envs,
                    lambda s, m: agent.act(s, None, greedy=True, mask=m),
                    config.eval_episodes,
                    seed=int(eval_rng.integers(2**31 - 1)),
                    to_env=head.to_env,
                    obs_map=spaces.obs,
                )
                eval_return = final_eval = float(returns.mean())
                solved = target is not None and eval_return >= target
                eval_wall += time.perf_counter() - t0

            elapsed = time.perf_counter() - t_loop
            row = {
                "update": counters["updates"],
                "env_steps": counters["env_steps"],
                "episodes": counters["episodes"],
                "mean_return": float(ret.mean()),
                "min_return": float(ret.min()),
                "max_return": float(ret.max()),
                "loss": loss,
                "entropy": info["entropy"],
                "grad_norm": grad_norm,
                "value_loss": value_loss,
                "eval_return": eval_return,
                "wall_s": elapsed,
                "steps_per_s": (counters["env_steps"] - steps_at_loop) / max(elapsed, 1e-9),
            }
            history.append(row)
            if len(history) >= 2 and counters["updates"] == history[0]["update"] + 1:
                _warn_if_collapsed(history[-2]["entropy"], row["entropy"], config)
            if run is not None:
                run.log(row)
                if counters["updates"] % config.checkpoint_every == 0 or solved:
                    run.checkpoint(agent, counters, baseline_state, [act_rng, env_rng, eval_rng])
            if progress is not None:
                progress.update(row, float(np.mean(recent)))
            if callback is not None and callback(dict(row)) is False:
                stopped = True
        # -- the sampled policy beside the greedy one (LunarLander: they can differ by 500) --
        sampled_eval = None
        if eval_envs is not None and not signals:
            t0, sample_rng = time.perf_counter(), np.random.default_rng(eval_ss)
            sampled_eval = float(
                evaluate_returns(
                    eval_envs,
                    lambda s, m: agent.act(s, sample_rng, mask=m),
                    config.eval_episodes,
                    seed=config.seed,
                    to_env=head.to_env,
                    obs_map=spaces.obs,
                ).mean()
            )
            eval_wall += time.perf_counter() - t0
    except BaseException:
        if run is not None:
            run.close()  # the last checkpoint stays as it was; the lock is released
        raise
    finally:
        restore_signals()
        if progress is not None:
            progress.close()
        envs.close()
        if eval_envs is not None:
            eval_envs.close()
    if run is not None:
        if not history or (history[-1]["update"] % config.checkpoint_every != 0 and not solved):
            run.checkpoint(agent, counters, baseline_state, [act_rng, env_rng, eval_rng])
        run.finish(history)
        if signals:
            raise Interrupted(signals[0], run.path)

    return TrainResult(
        solved=solved,
        env_steps=counters["env_steps"],
        episodes=counters["episodes"],
        updates=counters["updates"],
        wall_s=time.perf_counter() - t_start,
        eval_wall_s=eval_wall,
        final_eval_return=final_eval,
        out_dir=None if run is None else run.path,
        target_return=target,
        history=history,
        policy=Policy(config, agent, spaces),
        sampled_eval_return=sampled_eval,
    )
