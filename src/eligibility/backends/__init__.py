"""Backends: the same REINFORCE agent in NumPy (hand-written backprop) and PyTorch (autograd).

:class:`Agent` is what the trainer, the loader and evaluation ask of either backend;
:func:`make_agent` builds the one a :class:`~eligibility.reinforce.config.Config` names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from eligibility._isolate import import_user_module

if TYPE_CHECKING:
    from eligibility.reinforce.config import Config
    from eligibility.reinforce.heads import Head

__all__ = ["Agent", "load_factory", "make_agent"]


class Agent(Protocol):
    """A policy (with ``grad_log_prob`` for the estimator), an optional V, their optimisers."""

    policy: Any

    def act(
        self,
        s: np.ndarray,
        rng: np.random.Generator | None,
        *,
        greedy: bool = False,
        mask: np.ndarray | None = None,
    ) -> np.ndarray:
        """a ~ π(· | s), or its mode, one row per state (masked actions excluded)."""
        ...

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
    config: Config, obs_dim: int, head: Head, rng: np.random.Generator, module: Any = None
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
