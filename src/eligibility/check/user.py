"""The user's side of ``eligibility check``: loading their function, and calling it by contract.

The contract (the public API; docs/check.md says it in full):

* loss form: ``fn(policy, episodes, gamma) -> torch.Tensor``, a scalar to minimise;
* update form: ``fn(policy, env, gamma) -> torch.Tensor``: their own rollout on ``env``, then
  their loss; one call is one gradient estimate.

``policy`` is ``torch.nn.Linear(obs_dim, n_actions)`` (logits), or that followed by a softmax
(``--policy probs``); ``episodes`` is a list of :class:`Episode`.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eligibility import _isolate


@dataclass(frozen=True)
class Episode:
    """One complete episode, as the user's loss receives it.

    Attributes:
        obs: the observations φ(s_t), float32 ``[T, obs_dim]``.
        actions: the actions a_t taken, int64 ``[T]``.
        rewards: the rewards r_{t+1} that followed, float32 ``[T]``.
        terminated: True: every episode ends in a terminal state (none is truncated).
    """

    obs: Any
    actions: Any
    rewards: Any
    terminated: bool = True


class UserError(Exception):
    """The user's function raised: the verdict ``error``, with its shortened traceback."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def load_function(spec: str) -> Callable[..., Any]:
    """``path/to/file.py:name`` (or ``package.module:name``) → the function.

    Raises:
        ValueError: no ``:name``, a missing file, a module that fails to import (its error in
            one line), or no such function.
    """
    return _isolate.load_function(spec, example="my_reinforce.py:loss")


def check_signature(fn: Callable[..., Any], arguments: tuple[str, ...], form: str) -> None:
    """The function must take the contract's positional ``arguments``.

    Raises:
        ValueError: naming the expected signature.
    """
    try:
        inspect.signature(fn).bind(*(object() for _ in arguments))
    except TypeError:
        names = ", ".join(arguments)
        hint = ""
        if len(arguments) != 2 and _takes(fn, 2):  # loss(model, batch): another family's
            hint = (
                "; a loss(model, batch) is checked with --family episodes (episodes of several "
                "turns) or --family sequence --form model (single completions)"
            )
        raise ValueError(
            f"{getattr(fn, '__name__', fn)}{inspect.signature(fn)} does not take "
            f"({names}): the {form} form calls fn({names}){hint}"
        ) from None
    except ValueError:  # builtins without a signature: let the call decide
        pass


def _takes(fn: Callable[..., Any], n: int) -> bool:
    """Whether ``fn`` takes ``n`` positional arguments."""
    try:
        inspect.signature(fn).bind(*(object() for _ in range(n)))
    except TypeError:
        return False
    return True


def make_policy(W: np.ndarray, b: np.ndarray, kind: str) -> tuple[Any, list[Any]]:
    """``nn.Linear`` at θ (with a softmax for ``probs``), and its parameters [weight, bias]."""
    import torch
    from torch import nn

    linear = nn.Linear(W.shape[1], W.shape[0])
    with torch.no_grad():
        linear.weight.copy_(torch.tensor(W))
        linear.bias.copy_(torch.tensor(b))
    policy = linear if kind == "logits" else nn.Sequential(linear, nn.Softmax(dim=-1))
    return policy, [linear.weight, linear.bias]


def reset_policy(params: list[Any], theta: list[Any]) -> None:
    """Put θ back (the user's code may have written to it) and clear any ``.grad``."""
    import torch

    with torch.no_grad():
        for p, value in zip(params, theta, strict=True):
            p.copy_(value)
    for p in params:
        p.grad = None


BACKWARD = (
    "your function called backward() itself (the policy's parameters have a .grad): return "
    "the loss; do not call backward() or step an optimiser: the check differentiates the "
    "value you return"
)
MUTATED = (
    "your function changed the policy's parameters (an optimiser step or an in-place write): "
    "the check needs the gradient at the θ it handed you; return the loss and leave the step "
    "to the caller"
)
OUT_OF_MEMORY = (
    "your function ran out of memory (the check lets it allocate --memory MiB): does it "
    "allocate without bound?"
)


def user_error(err: BaseException) -> UserError:
    """What the user's function raised, as the check reports it (out of memory said so)."""
    return UserError(OUT_OF_MEMORY if _out_of_memory(err) else user_traceback(err))


def call(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    params: list[Any],
    sign: float,
    theta: list[Any] | None = None,
    tap: Any = None,
) -> Any:
    """One gradient estimate ĝ = sign · ∇θ fn(*args), as a float64 vector, or None.

    None means the returned value does not depend on the policy's parameters (no gradient).
    ``theta`` (the values ``params`` were set to) lets it tell a function that wrote to
    them. ``tap`` (a :class:`~eligibility.check.audit.tap.Tap`) is told what the call did to
    what it was handed (:meth:`~eligibility.check.audit.tap.Tap.after_call`) and receives,
    from the same backward pass, the gradients of the tensors it names (the log-probs or
    logits the loss read: the credit audit's weights).

    Raises:
        UserError: fn raised (its traceback, shortened to the user's own frames), ran out of
            memory, called ``backward()`` itself or changed the parameters.
        ValueError: fn returned something other than a finite scalar tensor, or one whose
            gradient is not finite.
    """
    import torch

    try:
        with tap.reading() if tap is not None else contextlib.nullcontext():
            out = fn(*args)
    except Exception as err:
        raise user_error(err) from None
    if not isinstance(out, torch.Tensor) or out.numel() != 1:
        got = (
            type(out).__name__ if not isinstance(out, torch.Tensor) else f"shape {tuple(out.shape)}"
        )
        raise ValueError(f"the function must return a scalar torch.Tensor, got {got}")
    value = float(out.detach())
    if not math.isfinite(value):
        raise ValueError(f"the function returned {value}; a loss must be finite")
    if theta is not None and any(
        not torch.equal(p.detach(), v) for p, v in zip(params, theta, strict=True)
    ):
        raise UserError(MUTATED)
    if any(p.grad is not None for p in params):
        raise UserError(BACKWARD)
    if tap is not None:
        tap.after_call(out)
    if not out.requires_grad:
        return None
    taps = [] if tap is None else tap.tensors()
    try:
        grads = torch.autograd.grad(
            out.reshape(()),
            [*params, *taps],
            allow_unused=True,
            retain_graph=tap is not None and tap.model is not None and tap.cover,
        )
    except RuntimeError as err:
        if "second time" in str(err):  # backward() then zero_grad(): the graph is freed
            raise UserError(BACKWARD) from None
        first = str(err).strip().splitlines()[0]
        raise UserError(
            f"the value your function returned cannot be differentiated: {first}"
        ) from None
    if tap is not None:
        tap.receive(grads[len(params) :], params, grads[: len(params)])
        grads = grads[: len(params)]
    if all(g is None for g in grads):
        return None
    flat = [
        (torch.zeros_like(p) if g is None else g).detach().double().reshape(-1)
        for g, p in zip(grads, params, strict=True)
    ]
    g = torch.cat(flat)
    if not torch.isfinite(g).all():  # as a value that is not finite: no verdict can read it
        raise ValueError(
            f"the function returned {value:g}, but its gradient is not finite (nan or inf): a "
            "loss must be differentiable where it is evaluated (torch.where's other branch and "
            "a masked-out log or sqrt send their nan back too)"
        )
    return sign * g.numpy()


def call_in_form(
    fn: Callable[..., Any],
    form: str,
    model: Any,
    on_logps: Callable[[Any], tuple[Any, Any]],
    batch: Any,
    params: list[Any],
    sign: float,
    theta: list[Any],
    tap_of: Callable[..., Any] | None = None,
) -> tuple[Any, Any]:
    """(ĝ, the tap that read it) of ``fn`` on ``batch`` in its form: :func:`call`, tapped.

    ``model`` form: ``fn(model, batch)``, the tap on the model's logits (entered around the
    call); ``logps`` form: ``fn(logps, batch')`` with ``(logps, batch') = on_logps(batch)``,
    the tap on those log-probs. ``tap_of(model=…, batch=…)`` or ``tap_of(logps=…, batch=…)``
    gives the tap, handed the batch the function gets (copied before the call: what the audit
    reads); ``tap_of`` None: the call is not tapped, the tap None.

    Raises:
        UserError: as :func:`call`.
        ValueError: as :func:`call`.
    """
    if form == "model":
        tap = tap_of(model=model, batch=batch) if tap_of is not None else None
        with tap or contextlib.nullcontext():
            return call(fn, (model, batch), params, sign, theta, tap=tap), tap
    logps, batch = on_logps(batch)
    tap = tap_of(logps=logps, batch=batch) if tap_of is not None else None
    return call(fn, (logps, batch), params, sign, theta, tap=tap), tap


def _out_of_memory(err: BaseException) -> bool:
    return isinstance(err, MemoryError) or (
        isinstance(err, RuntimeError) and "can't allocate memory" in str(err)
    )


def _library_dirs() -> tuple[str, ...]:
    import sysconfig

    paths = sysconfig.get_paths()
    dirs = {str(Path(paths[k]).resolve()) for k in ("stdlib", "purelib", "platlib") if k in paths}
    return tuple(sorted(dirs))


def user_traceback(err: BaseException) -> str:
    """The traceback of ``err`` shortened to the user's own frames.

    This package's frames go, and so do the standard library's and installed packages'
    (torch's internals, say) when any frame of the user's own code remains.
    """
    here = str(Path(__file__).resolve().parents[1])
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.startswith(here)]
    libraries = _library_dirs()
    own = [f for f in frames if not str(Path(f.filename).resolve()).startswith(libraries)]
    lines = traceback.format_list(own or frames) + traceback.format_exception_only(type(err), err)
    return "".join(lines).rstrip()


def to_tensors(obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> Episode:
    """An :class:`Episode` of torch tensors with the contract's dtypes."""
    import torch

    return Episode(
        obs=torch.as_tensor(obs, dtype=torch.float32),
        actions=torch.as_tensor(actions, dtype=torch.int64),
        rewards=torch.as_tensor(rewards, dtype=torch.float32),
    )


__all__ = [
    "Episode",
    "UserError",
    "call",
    "call_in_form",
    "check_signature",
    "load_function",
    "make_policy",
    "reset_policy",
    "user_traceback",
]
