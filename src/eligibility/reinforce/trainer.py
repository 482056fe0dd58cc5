r"""The training loop: collect E episodes, estimate ∇J, step, repeat (Williams' episodic REINFORCE).

    θ ← θ + α ĝ,   ĝ = (1/E) Σ_e Σ_t (G_et − b_et) ∇θ ln π(a_et | s_et)

One readable function, :func:`train`; the estimate itself is
:func:`eligibility.reinforce.estimator.policy_gradient`, the same code path the lab checks, and
the plumbing around the loop (opening and resuming the run, evaluating, logging, checkpoints,
stops, the result) is a small private class beside it, ``_Run``: the run layer's
:class:`~eligibility.runs.Bookkeeping` (written once for ``train`` and ``finetune``) with the
envs and the agent added.

A stop (SIGINT/SIGTERM through :mod:`eligibility._signals`, or the step budget running out in
the middle of a batch) abandons the update in progress: the run is checkpointed as it was after
the last completed update, so a resume replays exactly what was dropped.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from eligibility.backends import make_agent
from eligibility.reinforce import logs, stopping
from eligibility.reinforce.config import IDENTITY, INFINITE, Config
from eligibility.reinforce.envs import (
    EnvSpaces,
    episode_limit,
    make_vec_env,
    resolve_id,
    spaces_of,
)
from eligibility.reinforce.estimator import collect_episodes, policy_gradient
from eligibility.reinforce.policy import Policy
from eligibility.reinforce.rollout import (
    MAX_EVAL_ENVS,
    StepBudgetSpent,
    returns_as_played,
)
from eligibility.runs import (
    Bookkeeping,
    Interrupted,
    RunDir,
    RunResult,
    Schema,
    Stop,
    TrainState,
    resume_config,
    stop_on_signals,
    word,
)

__all__ = ["Interrupted", "NonFiniteError", "TrainResult", "default_target", "train"]


@dataclass
class TrainResult(RunResult):
    """What a run did, in a Gymnasium run's words.

    :class:`~eligibility.runs.RunResult`'s ``steps``, ``samples``, ``final_eval`` and ``target``
    are ``env_steps``, ``episodes``, ``final_eval_return`` and ``target_return`` here.

    Attributes:
        solved: the greedy evaluation reached ``target_return``.
        env_steps: environment steps taken in training (evaluation not counted).
        eval_env_steps: environment steps the greedy tests played (apart from ``env_steps``;
            the sampled report at the end is not a test and is not counted).
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

    SCHEMA: ClassVar[Schema] = logs.SCHEMA

    policy: Policy | None = field(default=None, repr=False)
    sampled_eval_return: float | None = None
    eval_env_steps: int = 0

    env_steps = word("steps", "Environment steps taken in training")
    episodes = word("samples", "Training episodes")
    final_eval_return = word("final_eval", "Mean return of the last evaluation")
    target_return = word("target", "The target return (None: none)")


class NonFiniteError(ValueError):
    """NaN or ±inf in the loss, the gradient or the value loss: the run stops, nothing is saved."""


def default_target(env_id: str) -> float | None:
    """The env's registered ``reward_threshold`` (CartPole-v1: 475), or None."""
    import gymnasium as gym

    spec = gym.envs.registry.get(resolve_id(env_id))
    return None if spec is None else spec.reward_threshold


def _non_finite(
    what: str, value: float, config: Config, agent: Any, batch: Any, n: int, run: Any
) -> str:
    """Say which quantity went non-finite at update ``n``, whose numbers did it, what is saved.

    The env's values were checked as they arrived, so the cause is the policy's own numbers (a
    learning rate too large: the advice) or returns too large for float64 arithmetic (the env).
    """
    weights = [v for k, v in agent.state_dict().items() if k.startswith(("policy.", "value."))]
    g_max = float(np.max(np.abs(batch.rewards.sum(axis=1))))
    if all(np.isfinite(w).all() for w in weights) and g_max > _HUGE_RETURN:
        cause = (
            f"{config.env_id}'s returns reach {g_max:.3g}, too large for float64 gradients; "
            "scale its rewards down (e.g. gymnasium.wrappers.TransformReward)"
        )
    else:
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
    return f"the {what} became {value} at update {n}: {cause}; {saved}"


_HUGE_RETURN = 1e100
"""Returns above this make squared gradients overflow float64 (1e154² = inf)."""


def _warn_if_collapsed(h_before: float, h_after: float, config: Config) -> None:
    """Warn once when the first update collapsed the policy's entropy (lr far too large)."""
    if h_before > 0 and h_after < 0.01 * h_before:
        warnings.warn(
            f"the first update collapsed the policy's entropy from {h_before:.3g} to "
            f"{h_after:.3g}: --lr {config.lr} is likely far too large for this env",
            RuntimeWarning,
            stacklevel=4,
        )


def _update(
    agent: Any, batch: Any, baseline_state: dict[str, np.ndarray], config: Config, n: int, run: Any
) -> dict[str, Any]:
    """Update n: the REINFORCE estimate, its checks, the clipped ascent step and the fit of V.

    Returns:
        The update's numbers: ``loss``, ``entropy``, ``grad_norm``, ``value_loss`` and the new
        ``baseline_state``.

    Raises:
        NonFiniteError: the loss, the gradient or the value loss is NaN/inf (nothing applied).
    """
    values = bootstrap = None
    if config.baseline == "value":  # V from the fit before this batch
        values = agent.values(batch.obs.reshape(-1, batch.obs.shape[-1])).reshape(batch.mask.shape)
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
    grad_norm = math.sqrt(sum(float(np.sum(g * g)) for g in grads.values()))
    for what, value in (("loss", loss), ("gradient norm", grad_norm)):
        if not math.isfinite(value):
            raise NonFiniteError(_non_finite(what, value, config, agent, batch, n, run))
    if config.max_grad_norm is not None and grad_norm > config.max_grad_norm:
        grads = {k: g * (config.max_grad_norm / grad_norm) for k, g in grads.items()}
    agent.apply(grads)
    value_loss = None
    if config.baseline == "value":
        m = batch.mask
        value_loss = agent.fit_value(batch.obs[m], info["returns"][m], config.value_epochs)
        if not math.isfinite(value_loss):
            raise NonFiniteError(
                _non_finite("value loss", value_loss, config, agent, batch, n, run)
            )
    return dict(
        loss=loss,
        entropy=info["entropy"],
        grad_norm=grad_norm,
        value_loss=value_loss,
        baseline_state=info["baseline_state"],
    )


def _resolve(config: Config, resume: str | Path | None) -> tuple[Config, float | None]:
    """The config a run goes with (a resume's is the saved one) and its target (None: none)."""
    if resume is not None:  # the saved run is the identity; only changeable settings apply
        config = resume_config(resume, config, IDENTITY, INFINITE)
    target = default_target(config.env_id) if config.target_return is None else config.target_return
    return config, None if target == math.inf else target  # inf: switched off


@dataclass(kw_only=True)
class _Run(Bookkeeping):
    """One call of :func:`train`: the run layer's bookkeeping, with the envs and the agent.

    The plumbing around the loop lives here and in :class:`~eligibility.runs.Bookkeeping`
    (counters, history, resume, progress, logging, checkpoints, going back), so that
    :func:`train` shows the algorithm; this class adds what is ``train``'s own: the envs, the
    agent and its baseline state, the greedy test, the weights an interrupted update is undone
    to, and the :class:`TrainResult`.
    """

    SCHEMA: ClassVar[Schema] = logs.SCHEMA

    make_envs: Callable[[int], Any]
    envs: Any
    spaces: EnvSpaces
    agent: Any
    sample_ss: np.random.SeedSequence  # the final sampled evaluation's seeds
    play: dict[str, Any]  # how every episode is played: the env's maps, name, stop and cap
    baseline_state: dict[str, np.ndarray] = field(default_factory=dict)
    eval_envs: Any = None  # made at the first evaluation
    recent: list[float] = field(default_factory=list)  # the last 100 training returns
    last_baseline: dict[str, np.ndarray] = field(default_factory=dict)  # after the last update
    undo: dict[str, np.ndarray] | None = None  # the weights before an update being evaluated

    @classmethod
    def open(
        cls,
        stack: contextlib.ExitStack,
        config: Config,
        target: float | None,
        t_start: float,
        module: Any,
        resume: str | Path | None,
        overwrite: bool,
    ) -> _Run:
        """Enter the stop flag, the envs and the run directory on ``stack``; restore a resume."""
        limit, _ = episode_limit(config.env_id, config.max_episode_steps)
        make_envs = functools.partial(
            make_vec_env,
            config.env_id,
            mode=config.vectorization_mode,
            env_kwargs=config.env_kwargs,
            max_episode_steps=config.max_episode_steps,
        )
        stop = stack.enter_context(stop_on_signals()) if config.out else Stop()
        envs = stack.enter_context(contextlib.closing(make_envs(config.num_envs)))
        spaces = spaces_of(envs, config.continuous_head)
        init_ss, act_ss, env_ss, eval_ss, sample_ss = np.random.SeedSequence(config.seed).spawn(5)
        agent = make_agent(
            config, spaces.obs_dim, spaces.head, np.random.default_rng(init_ss), module
        )
        files = None
        if config.out:
            files = stack.enter_context(
                RunDir.open(config, logs.SCHEMA, IDENTITY, resume=bool(resume), overwrite=overwrite)
            )
        play = {
            "to_env": spaces.head.to_env,
            "obs_map": spaces.obs,
            "name": config.env_id,
            "stop": stop,
            "max_episode_steps": limit,
        }
        run = cls(
            config=config,
            target=target,
            t_start=t_start,
            stack=stack,
            stop=stop,
            files=files,
            train_state=TrainState(
                counters=dict.fromkeys(("updates", "env_steps", "episodes", "eval_env_steps"), 0),
                # the policy's draws, the batches' reset seeds, the evaluations'
                rngs=[np.random.default_rng(ss) for ss in (act_ss, env_ss, eval_ss)],
            ),
            make_envs=make_envs,
            envs=envs,
            spaces=spaces,
            agent=agent,
            sample_ss=sample_ss,
            play=play,
        )
        if files is not None and resume is not None:
            run.load(run.restore(agent.state_dict()))
        return run

    def load(self, tensors: Any) -> None:
        """Load a checkpoint's tensors (None: there was none): the weights, the baseline state."""
        if tensors is not None:
            self.agent.load_state_dict(tensors)
            self.baseline_state = {
                k[len("baseline.") :]: v for k, v in tensors.items() if k.startswith("baseline.")
            }

    def state(self) -> dict[str, Any]:
        """The checkpoint's tensors: the agent's weights and optimisers, the baseline state."""
        state = dict(self.agent.state_dict())
        state.update({f"baseline.{k}": np.asarray(v) for k, v in self.baseline_state.items()})
        return state

    def evaluate(self, rng: np.random.Generator | None, seed: int, target: float | None) -> float:
        """Mean return over ``eval_episodes``: greedy (``rng`` None) or sampled with ``rng``.

        With a ``target`` it is the greedy test, counted in ``eval_env_steps``; with
        ``sequential_eval`` it stops once its verdict is certain (:mod:`.stopping`) and returns
        the bound that decided it (Ḡ_hi < target: fail; Ḡ_lo ≥ target: pass).
        """
        with self.evaluating():
            if self.eval_envs is None:
                n = min(self.config.eval_episodes, self.config.eval_envs, MAX_EVAL_ENVS)
                self.eval_envs = self.stack.enter_context(contextlib.closing(self.make_envs(n)))
            act = functools.partial(self.agent.policy.act, rng=rng, greedy=rng is None)
            played = returns_as_played(
                self.eval_envs,
                lambda s, m: act(s, mask=m),
                self.config.eval_episodes,
                seed=seed,
                **self.play,
            )
            r_range = None
            if target is not None and self.config.sequential_eval:
                r_range = stopping.reward_range(self.config.env_id)
            horizon, early = self.play["max_episode_steps"], None
            for g, t, ended in played:
                if r_range is not None and not ended.all():
                    early = stopping.verdict(g, t, ended, target, r_range, horizon)
                    if early is not None:
                        played.close()
                        break
            if target is not None:
                self.counters["eval_env_steps"] += int(t.sum())
            if early is None:
                return float(g.mean())
            return stopping.mean_bounds(g, t, ended, r_range, horizon)[0 if early else 1]

    def crossed(self, batch: Any) -> bool:
        """The batch's mean training return crossed the target from below (``eval_on_cross``)."""
        previous = self.history[-1]["mean_return"] if self.history else None
        now = float(batch.returns.mean())
        return self.config.eval_on_cross and stopping.crossed(previous, now, self.target)

    def evaluation_due(self, batch: Any, steps: int) -> bool:
        """Is the greedy test due after this update (``steps`` env steps)? If so, keep the weights.

        Due when the steps cross a multiple of ``eval_every`` or the training returns cross the
        target (:meth:`crossed`); the weights before the update are kept (:meth:`keep_weights`)
        since a stop during the evaluation goes back to them.
        """
        every, before = self.config.eval_every, self.counters["env_steps"]
        due = self.crossed(batch) or (every > 0 and steps // every > before // every)
        if due:
            self.keep_weights()
        return due

    def keep_weights(self) -> None:
        """Keep the weights before this update: a stop during its evaluation goes back to them."""
        if self.files is not None:
            self.undo = {k: np.array(v) for k, v in self.agent.state_dict().items()}

    def record(
        self, batch: Any, stats: dict[str, Any], eval_return: float | None, checkpoint: bool
    ) -> dict[str, Any]:
        """Log the update just made (metrics.csv, TensorBoard, progress), checkpoint if asked.

        Returns:
            The update's metrics row.
        """
        c, ret = self.counters, batch.returns
        self.recent = (self.recent + ret.tolist())[-100:]
        wall_s, steps_per_s = self.clock()
        row = {
            "update": c["updates"],
            "env_steps": c["env_steps"],
            "episodes": c["episodes"],
            "mean_return": float(ret.mean()),
            "min_return": float(ret.min()),
            "max_return": float(ret.max()),
            **stats,  # loss, entropy, grad_norm, value_loss
            "eval_return": eval_return,
            "eval_env_steps": c["eval_env_steps"],
            "wall_s": wall_s,
            "steps_per_s": steps_per_s,
        }
        if self.history and row["update"] == self.history[0]["update"] + 1:
            _warn_if_collapsed(self.history[-1]["entropy"], row["entropy"], self.config)
        self.log(row, float(np.mean(self.recent)), checkpoint)
        return row

    def mark_completed(self) -> None:
        """Mark the state now as the last completed update, the one a stop goes back to."""
        super().mark_completed()
        self.last_baseline, self.undo = dict(self.baseline_state), None

    def go_back(self, budget_spent: bool = False) -> None:
        """Go back to the last completed update: weights, counters, baseline state, RNGs."""
        super().go_back()
        if budget_spent and self.counters["updates"] == 0:
            warnings.warn(
                f"--total-steps {self.config.total_steps} ran out before the first batch of "
                f"{self.config.episodes_per_batch} episodes ended: no update was made",
                RuntimeWarning,
                stacklevel=3,
            )
        if self.undo is not None:
            self.agent.load_state_dict(self.undo)
        self.baseline_state = dict(self.last_baseline)

    def end(self, solved: bool, final_eval: float | None, signum: int | None) -> TrainResult:
        """The end of the run: checkpoint, the sampled policy's return, :meth:`finish`.

        The sampled policy is evaluated beside the greedy one (LunarLander: they can differ by
        500) where there was a greedy test, no stop and ``sampled_report``.
        """
        self.checkpoint()
        sampled_eval = None
        if self.eval_envs is not None and signum is None and self.config.sampled_report:
            with contextlib.suppress(Interrupted):
                rng = np.random.default_rng(self.sample_ss)
                sampled_eval = self.evaluate(rng, self.config.seed, None)
            signum = self.stop.signum
        return self.finish(solved, final_eval, sampled_eval, signum)

    def finish(
        self, solved: bool, final_eval: float | None, sampled_eval: float | None, signum: int | None
    ) -> TrainResult:
        """Raise :class:`Interrupted` for a stop, else close the run directory; the result."""
        if signum is not None:  # stopped: the checkpoint is written, the curve is not drawn
            raise Interrupted(signum, self.out_dir)
        self.close()
        if self.stop:  # a signal while the last files were written: all of them are whole
            raise Interrupted(self.stop.signum, self.out_dir)
        return self.result(solved, final_eval, sampled_eval=sampled_eval)

    def result(
        self,
        solved: bool,
        final_eval: float | None,
        already_solved: bool = False,
        sampled_eval: float | None = None,
    ) -> TrainResult:
        """The run's :class:`TrainResult` (the one place it is built)."""
        return TrainResult(
            **self.outcome(solved, final_eval, already_solved),
            samples=self.counters["episodes"],
            policy=Policy(self.config, self.agent, self.spaces),
            sampled_eval_return=sampled_eval,
            eval_env_steps=self.counters["eval_env_steps"],
        )


def train(
    config: Config,
    *,
    module: Any = None,
    resume: str | Path | None = None,
    callback: Callable[[dict[str, Any]], bool | None] | None = None,
    overwrite: bool = False,
) -> TrainResult:
    """Train a policy with REINFORCE until it solves the env or spends ``total_steps``.

    Args:
        config: the run's settings (:meth:`Config.for_env` gives tuned ones).
        module: torch backend only: your own ``nn.Module`` mapping states to the head's z.
        resume: a run directory to continue from its last checkpoint. The run's saved config is
            used; only the changeable settings (``total_steps``, ``progress``, …) are taken from
            ``config``. A run that stopped before its first checkpoint starts from scratch.
        callback: called as ``callback(row)`` after each update with that update's metrics row
            (the columns of metrics.csv); returning ``False`` stops the run cleanly, with a
            checkpoint, as if its budget were spent. The hook sweeps and searches build on.
        overwrite: replace the run in ``config.out`` if there is one.

    Returns:
        The :class:`TrainResult`.

    Raises:
        ValueError: unknown env id, unsupported space, bad settings, an env that misbehaves
            (:class:`~eligibility.reinforce.rollout.EnvError`).
        NonFiniteError: NaN/inf in the loss or gradient (after the last good checkpoint).
        Interrupted: SIGINT/SIGTERM (with a run directory): checkpointed, then raised.
    """
    t_start = time.perf_counter()
    config, target = _resolve(config, resume)
    with contextlib.ExitStack() as stack:  # the stop flag, the envs, the run directory, the logs
        run = _Run.open(stack, config, target, t_start, module, resume, overwrite)
        agent, counters = run.agent, run.counters
        act_rng, env_rng, eval_rng = run.rngs  # the policy's draws, the batches' seeds, evals'
        if (last_eval := run.already_solved()) is not None:  # raise the target to go on
            return run.result(True, last_eval, already_solved=True)
        run.start(config.env_id, config.total_steps, bounded=target is not None)
        final_eval, solved, stopped, signum = None, False, False, None
        try:
            while counters["env_steps"] < config.total_steps and not (solved or stopped):
                # -- collect E complete episodes under the current policy ------------------------
                batch = collect_episodes(
                    run.envs,
                    lambda s, m: agent.policy.act(s, act_rng, mask=m),
                    config.episodes_per_batch,
                    seed=int(env_rng.integers(2**31 - 1)),
                    max_steps=config.total_steps - counters["env_steps"],
                    **run.play,
                )
                # -- estimate ∇J, step (keep the weights when an evaluation may interrupt) -------
                n, steps = counters["updates"] + 1, counters["env_steps"] + int(batch.mask.sum())
                due = run.evaluation_due(batch, steps)  # if so, the weights before it are kept
                stats = _update(agent, batch, run.baseline_state, config, n, run.files)
                run.baseline_state = stats.pop("baseline_state")
                counters.update(updates=n, env_steps=steps)
                counters["episodes"] += config.episodes_per_batch

                # -- the greedy test: each time the steps cross a multiple of eval_every (in env
                # steps, not updates: systems with different batch sizes are checked at the same
                # cadence), and when the training returns cross the target; both depend on the
                # counters and the logged rows alone, so resumes agree
                eval_return = None
                if due:
                    seed = int(eval_rng.integers(2**31 - 1))
                    eval_return = final_eval = run.evaluate(None, seed, target)
                    solved = target is not None and eval_return >= target

                # -- log, checkpoint, report -----------------------------------------------------
                row = run.record(
                    batch, stats, eval_return, n % config.checkpoint_every == 0 or solved
                )
                stopped = callback is not None and callback(dict(row)) is False
                run.mark_completed()
        except (StepBudgetSpent, Interrupted) as cut:  # back to the last completed update
            signum = getattr(cut, "signum", None)
            run.go_back(budget_spent=signum is None)
        return run.end(solved, final_eval, signum)
