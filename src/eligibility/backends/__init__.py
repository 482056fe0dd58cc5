"""Backends: the same REINFORCE agent in NumPy (hand-written backprop) and PyTorch (autograd).

:class:`Agent` is what the trainer, the loader and evaluation ask of either backend, and its
:class:`Policy` what they ask of its policy;
:func:`make_agent` builds the one a :class:`~eligibility.reinforce.config.Config` names. The
backends sit below the trainer: what they ask of a head and of the settings is said here
(:class:`PolicyHead`, :class:`AgentSettings`), and ``eligibility.reinforce``'s heads and
``Config`` answer it; nothing here imports ``eligibility.reinforce``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from eligibility._isolate import import_user_module

__all__ = [
    "Agent",
    "AgentSettings",
    "Array",
    "Gradient",
    "Mask",
    "Policy",
    "PolicyHead",
    "act_with",
    "diagnostics",
    "load_factory",
    "make_agent",
    "substate",
]

Array = np.ndarray

Mask = Array | None
"""The actions allowed in each state (True: allowed), or None: every action."""

Gradient = tuple[dict[str, Array], dict[str, float]]
"""What :meth:`Policy.grad_log_prob` returns: a gradient by parameter name, and diagnostics."""


class PolicyHead(Protocol):
    """The distribution over actions that the network's output z parametrises, one row a state.

    An agent asks it these questions (:mod:`eligibility.reinforce.heads` has one class per
    action distribution); ``log_std`` is the state-independent s_σ = ln σ of a head that has
    one (``has_log_std``), else None.
    """

    @property
    def n_out(self) -> int:
        """The width of z (the network's last layer)."""
        ...

    @property
    def has_log_std(self) -> bool:
        """Whether the policy holds a state-independent s_σ = ln σ beside the network."""
        ...

    def masked(self, z: Array, mask: Array | None) -> Array:
        """z with zᵢ = −∞ where ``mask`` is False; z itself without a mask."""
        ...

    def sample(self, z: Array, log_std: Array | None, rng: np.random.Generator) -> Array:
        """a ~ π(· | z), one per row."""
        ...

    def mode(self, z: Array, log_std: Array | None = None) -> Array:
        """The most probable action of each row."""
        ...

    def log_prob(self, z: Array, log_std: Array | None, a: Array) -> Array:
        """ln π(a | z) per row."""
        ...

    def score(self, z: Array, log_std: Array | None, a: Array) -> tuple[Array, Array | None]:
        """The eligibility e = ∂ ln π(a | z)/∂(z, s_σ) (the second None without s_σ)."""
        ...

    def entropy(self, z: Array, log_std: Array | None) -> Array:
        """H(π(· | z)) per row."""
        ...

    def entropy_grad(self, z: Array, log_std: Array | None) -> tuple[Array, Array | None]:
        """∂H/∂(z, s_σ) (the second None without s_σ)."""
        ...

    def torch_loss(self, z: Any, a: Array, adv: Any, beta: float, log_std: Any = None) -> Any:
        """−Σᵢ ψᵢ ln π(aᵢ | zᵢ) − β Σᵢ Hᵢ, whose backward is the eligibility (torch)."""
        ...


class AgentSettings(Protocol):
    """The settings :func:`make_agent` reads (``eligibility.reinforce.config.Config`` has them)."""

    backend: str
    hidden: Sequence[int]
    activation: str
    optimizer: str
    lr: float
    baseline: str
    value_lr: float
    init: str
    module: str | None


class Policy(Protocol):
    """π(a | s; θ) as the trainer and the estimator ask it (both backends provide it)."""

    params: dict[str, np.ndarray]

    def act(
        self, s: Array, rng: np.random.Generator | None, *, greedy: bool = False, mask: Mask = None
    ) -> Array:
        """a ~ π(· | s), or its mode, one row per state (masked actions excluded)."""
        ...

    def grad_log_prob(
        self, s: Array, a: Array, psi: Array, *, entropy_coef: float = 0.0, mask: Mask = None
    ) -> Gradient:
        """Σᵢ ψᵢ ∇θ ln π(aᵢ | sᵢ) (+ β ∇θ mean H), by name, and diagnostics (masked logits)."""
        ...


def act_with(
    head: PolicyHead,
    z: Array,
    log_std: Array | None,
    rng: np.random.Generator | None,
    greedy: bool,
) -> Array:
    """a ~ π(· | z), or the mode when ``greedy`` (z already masked); both backends' last step."""
    if greedy:
        return head.mode(z, log_std)
    assert rng is not None
    return head.sample(z, log_std, rng)


def diagnostics(
    head: PolicyHead, z: Array, log_std: Array | None, psi: Array, a: Array
) -> dict[str, float]:
    """``surrogate`` Σᵢ ψᵢ ln π(aᵢ | sᵢ) and ``entropy`` (1/N) Σᵢ Hᵢ, from the masked z."""
    return {
        "surrogate": float(psi @ head.log_prob(z, log_std, a)),
        "entropy": float(head.entropy(z, log_std).mean()),
    }


class Agent(Protocol):
    """A policy (acting, and ``grad_log_prob`` for the estimator), an optional V, optimisers."""

    policy: Policy

    def values(self, s: np.ndarray) -> np.ndarray:
        """V(s), one per row."""
        ...

    def apply(self, grads: dict[str, np.ndarray]) -> None:
        """One ascent step along ``grads``."""
        ...

    def fit_value(self, s: np.ndarray, g: np.ndarray, epochs: int) -> float:
        """Fit V to the returns; the last loss."""
        ...

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every array by a flat name."""
        ...

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict`."""
        ...


def substate(state: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The entries of a flat state dict under ``prefix``, named without it."""
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def load_factory(spec: str) -> Any:
    """The callable named by ``"pkg.mod:factory"`` (``--module``).

    Raises:
        ValueError: not of the form ``module:name``, a module that fails to import (its error),
            or no such attribute.
    """
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise ValueError(f"--module must be 'pkg.mod:factory', got {spec!r}")
    try:
        mod = import_user_module(mod_name)
    except Exception as err:  # the user's module: its own error is the message
        raise ValueError(f"--module {spec}: cannot import {mod_name!r}: {err}") from None
    factory = getattr(mod, attr, None)
    if not callable(factory):
        raise ValueError(f"--module {spec}: {mod_name!r} has no callable {attr!r}")
    return factory


def make_agent(
    config: AgentSettings,
    obs_dim: int,
    head: PolicyHead,
    rng: np.random.Generator,
    module: Any = None,
) -> Agent:
    """The backend's agent (policy, value network, optimisers) for ``config``.

    ``module`` (torch only) is your ``nn.Module``; else ``config.module``, ``"pkg.mod:factory"``,
    builds it as ``factory(obs_dim, head.n_out)``.
    """
    kwargs = dict(
        hidden=config.hidden,
        activation=config.activation,
        optimizer=config.optimizer,
        lr=config.lr,
        value=config.baseline == "value",
        value_lr=config.value_lr,
        rng=rng,
        init=config.init,
    )
    if config.backend == "numpy":
        if module is not None or config.module is not None:
            raise ValueError("a policy module (--module, module=) needs --backend torch")
        from eligibility.backends.numpy import Agent as NumpyAgent

        return NumpyAgent(obs_dim, head, **kwargs)
    from eligibility.backends.torch import Agent as TorchAgent

    if module is None and config.module is not None:
        module = load_factory(config.module)(obs_dim, head.n_out)
    if module is not None:
        _check_width(module, obs_dim, head.n_out, config.module)
    return TorchAgent(obs_dim, head, module=module, **kwargs)


def _check_width(module: Any, obs_dim: int, n_out: int, spec: str | None) -> None:
    """One forward pass on a zero state: z must have the head's width, before any training.

    Raises:
        ValueError: not an ``nn.Module``, a forward pass that fails, or z of another shape.
    """
    import torch

    name = f"--module {spec}" if spec else "module"
    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"{name} must give a torch.nn.Module, got {type(module).__name__}")
    dtype = next((p.dtype for p in module.parameters()), torch.float32)
    try:
        with torch.no_grad():
            z = module(torch.zeros(1, obs_dim, dtype=dtype))
    except Exception as err:  # the user's module: its own error is the message
        raise ValueError(
            f"{name} fails on a batch of states of shape (N, {obs_dim}): {type(err).__name__}: "
            f"{err}"
        ) from None
    if tuple(getattr(z, "shape", ())) != (1, n_out):
        raise ValueError(
            f"{name} maps states (N, {obs_dim}) to {tuple(getattr(z, 'shape', ()))[1:]} per state; "
            f"the env's policy head needs ({n_out},): build it as factory(obs_dim, n_out) with "
            "n_out outputs"
        )
