"""The one configuration of a training run: it feeds the command line, the logs, the saved run."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from eligibility.reinforce.baselines import BASELINES

Backend = Literal["numpy", "torch"]
BaselineName = Literal["none", "moving-average", "batch-mean", "rloo", "value"]


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class Config:
    """Every setting of a REINFORCE run; :meth:`for_env` gives tuned defaults per env."""

    env_id: str = field(metadata=_help("Gymnasium environment id, e.g. CartPole-v1"))
    backend: Backend = field(
        default="numpy", metadata=_help("numpy (hand-written backprop) or torch (autograd)")
    )
    seed: int = field(default=0, metadata=_help("seed of the weights, actions and envs"))
    baseline: BaselineName = field(
        default="batch-mean", metadata=_help("baseline b subtracted from the return")
    )
    gamma: float = field(default=0.99, metadata=_help("discount γ of the return"))
    lr: float = field(default=0.05, metadata=_help("policy learning rate"))
    optimizer: Literal["adam", "sgd"] = field(default="adam", metadata=_help("policy optimiser"))
    hidden: tuple[int, ...] = field(
        default=(32,), metadata=_help("hidden layer widths of the MLP (none: linear policy)")
    )
    activation: Literal["tanh", "relu"] = field(default="tanh", metadata=_help("hidden unit"))
    episodes_per_batch: int = field(default=8, metadata=_help("complete episodes per update"))
    num_envs: int = field(
        default=8, metadata=_help("sub-envs of the vector env (episodes run in parallel)")
    )
    total_steps: int = field(default=1_000_000, metadata=_help("stop after this many env steps"))
    target_return: float | None = field(
        default=None,
        metadata=_help("stop when the greedy evaluation reaches this mean return (None: env's)"),
    )
    eval_every: int = field(
        default=10_000,
        metadata=_help(
            "evaluate the greedy policy after the update that crosses each multiple of this "
            "many env steps (0: never)"
        ),
    )
    eval_episodes: int = field(default=100, metadata=_help("episodes per evaluation"))
    normalize_advantages: bool = field(
        default=False, metadata=_help("standardise G − b over the batch (biased)")
    )
    entropy_coef: float = field(default=0.0, metadata=_help("entropy bonus β"))
    max_grad_norm: float | None = field(
        default=None, metadata=_help("clip the gradient's global norm to this (None: off)")
    )
    discount_weighting: bool = field(
        default=False, metadata=_help("weight step t by γ^t (unbiased for the discounted J)")
    )
    baseline_decay: float = field(default=0.9, metadata=_help("λ of the moving-average baseline"))
    value_lr: float = field(default=0.01, metadata=_help("learning rate of the value network"))
    value_epochs: int = field(
        default=10, metadata=_help("full-batch Adam steps of the value fit per update")
    )
    bootstrap_truncated: bool = field(
        default=True,
        metadata=_help("complete truncated returns with V(s_T) (value baseline only)"),
    )
    vectorization_mode: Literal["auto", "vector_entry_point", "sync", "async"] = field(
        default="auto",
        metadata=_help("gymnasium.make_vec mode; auto: the env's own vector env if it has one"),
    )
    checkpoint_every: int = field(
        default=10, metadata=_help("write a checkpoint every this many updates")
    )
    out: str | None = field(
        default=None, metadata=_help("run directory (None from Python: write nothing)")
    )
    progress: bool = field(default=True, metadata=_help("progress bar (TTY) or log lines"))

    def __post_init__(self) -> None:
        """Check every value once; a bad one is a ValueError naming the option."""
        self.hidden = tuple(int(h) for h in self.hidden)
        checks: list[tuple[bool, str]] = [
            (
                self.backend in ("numpy", "torch"),
                f"backend must be numpy or torch, got {self.backend!r}",
            ),
            (
                self.baseline in BASELINES,
                f"baseline must be one of {', '.join(BASELINES)}, got {self.baseline!r}",
            ),
            (0.0 <= self.gamma <= 1.0, f"gamma must be in [0, 1], got {self.gamma}"),
            (
                math.isfinite(self.lr) and self.lr > 0,
                f"lr must be a positive number, got {self.lr}",
            ),
            (
                self.optimizer in ("adam", "sgd"),
                f"optimizer must be adam or sgd, got {self.optimizer!r}",
            ),
            (all(h > 0 for h in self.hidden), f"hidden sizes must be positive, got {self.hidden}"),
            (
                self.activation in ("tanh", "relu"),
                f"activation must be tanh or relu, got {self.activation!r}",
            ),
            (
                self.episodes_per_batch >= 1,
                f"episodes-per-batch must be >= 1, got {self.episodes_per_batch}",
            ),
            (self.num_envs >= 1, f"num-envs must be >= 1, got {self.num_envs}"),
            (self.total_steps >= 1, f"total-steps must be >= 1, got {self.total_steps}"),
            (self.eval_every >= 0, f"eval-every must be >= 0, got {self.eval_every}"),
            (self.eval_episodes >= 1, f"eval-episodes must be >= 1, got {self.eval_episodes}"),
            (self.entropy_coef >= 0, f"entropy-coef must be >= 0, got {self.entropy_coef}"),
            (
                self.max_grad_norm is None or self.max_grad_norm > 0,
                f"max-grad-norm must be positive, got {self.max_grad_norm}",
            ),
            (
                0.0 <= self.baseline_decay < 1.0,
                f"baseline-decay must be in [0, 1), got {self.baseline_decay}",
            ),
            (self.value_lr > 0, f"value-lr must be positive, got {self.value_lr}"),
            (self.value_epochs >= 1, f"value-epochs must be >= 1, got {self.value_epochs}"),
            (
                self.checkpoint_every >= 1,
                f"checkpoint-every must be >= 1, got {self.checkpoint_every}",
            ),
            (
                self.target_return is None or math.isfinite(self.target_return),
                f"target-return must be a finite number, got {self.target_return}",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @classmethod
    def for_env(cls, env_id: str, **overrides: Any) -> Config:
        """The tuned defaults for ``env_id`` (see ``TUNED``), then ``overrides``.

        Example:
            >>> Config.for_env("CartPole-v1", seed=3).lr
            0.05
        """
        values: dict[str, Any] = dict(TUNED.get(env_id, {}))
        values.update(overrides)
        return cls(env_id=env_id, **values)

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON-ready values (tuples become lists)."""
        d = dataclasses.asdict(self)
        d["hidden"] = list(self.hidden)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Config:
        """Inverse of :meth:`to_dict`; unknown keys are a ValueError naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown config keys {unknown}")
        return cls(**d)


TUNED: dict[str, dict[str, Any]] = {
    "CartPole-v1": {},
    "CartPole-v0": {},
    "Acrobot-v1": {
        "hidden": (64,),
        "lr": 0.01,
        "baseline": "rloo",
        "episodes_per_batch": 16,
        "num_envs": 16,
    },
}
"""Per-env overrides of the defaults, measured with ``bench/`` (see docs/training.md)."""
