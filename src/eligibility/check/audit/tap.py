r"""Reading the weight a loss gives each token: ∂L/∂ℓₜ, from one backward pass.

Every loss the check takes is a function of the tokens' log-probabilities ℓₜ = ln π(aₜ₊₁ | x_{≤t})
(and of things that do not depend on θ). Its gradient is then

    ∇θ L = Σₜ wₜ ∇θ ℓₜ,      wₜ = ∂L/∂ℓₜ,

so wₜ, the weight the loss puts on token t's score, says what the loss does token by token.

* In the ``logps`` form the user is handed ℓ itself: wₜ is the gradient of the returned value
  with respect to that tensor.
* In the ``model`` form the user computes ℓ from the logits zₜ. Where the loss reads zₜ only
  through ℓₜ (with π = softmax(zₜ/τ) the sampler's distribution),

      ∂L/∂zₜ = (wₜ/τ) (e_{aₜ₊₁} − π),

  so wₜ is the least-squares coefficient of ∂L/∂zₜ on (e_a − π)/τ, and what it leaves,

      ρₜ = ‖∂L/∂zₜ − (wₜ/τ)(e_a − π)‖ / ‖∂L/∂zₜ‖,

  says whether the loss read something else at that position. Where ρₜ is not 0, the token v
  whose (e_v − π) explains ∂L/∂zₜ (:func:`entry_read`) is the entry the loss read instead (the
  token at the position itself: the logits not shifted), or none is (an entropy, or a KL over
  the whole vocabulary, reads every entry).

:class:`Tap` captures the logits of every forward pass of the model during the user's call
(a forward hook, so no call of the user's is changed) and hands them to the check's one
``autograd.grad`` (:func:`eligibility.check.user.call`), which returns their gradients with
the parameters'.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

RESIDUAL_TOL = 1e-4
"""ρₜ above this (relative) is a position whose gradient the sampled token's log-prob alone does
not explain (float32 logits leave ρ ≈ 1e-7)."""


@dataclass
class Tap:
    """The tensors whose gradient the check reads beside the parameters', on one call.

    In the ``model`` form every outermost forward pass of a module during the call is watched
    (a global forward hook, so a model the user's code or a framework wraps or rebuilds is seen
    too): its ``logits``, or the per-token ``log_probs`` of a fused head that never makes the
    logits (TRL's ``add_fused_lm_head``), with the ``input_ids`` they score.

    What a loss does to what it is handed is read too (:meth:`after_call`): the batch is copied
    before the call (:attr:`held`, what the audit reads), and a field the loss wrote in place is
    said (:attr:`written`); a loss that writes the log-probs or the logits in place, or hooks
    their gradient, leaves weights that are not its own to read (:attr:`unread` says why).

    Attributes:
        model: True (or the model) in the ``model`` form: forward passes are watched; None in
            the ``logps`` form.
        logps: the log-probs handed to the user (``logps`` form), or None.
        batch: the batch handed to the user (None: not watched).
        captured: (input_ids, tensor, kind) of each outermost forward pass whose output needs a
            gradient: kind ``logits`` ([N, L, V]) or ``log_probs`` ([N, L − 1], of ids[:, 1:]).
        grads: the gradients, in the order of :meth:`tensors` (None: not reached).
    """

    model: Any = None
    logps: Any = None
    cover: bool = True
    """Whether to hold the part of ĝ through the tapped tensors against ĝ (a second backward
    pass: the first few calls tell a path not read, which every batch would take)."""
    captured: list[tuple[Any, Any, str]] = field(default_factory=list)
    grads: list[Any] = field(default_factory=list)
    uncovered: float = 0.0
    """‖ĝ − the part of ĝ through the tapped tensors‖ / ‖ĝ‖ (0: the audit reads all of it)."""
    batch: Any = None
    held: Any = None
    """A copy of :attr:`batch` taken before the call (its tensors cloned): the batch as handed."""
    written: list[str] = field(default_factory=list)
    """The batch's fields the call changed (``rewards``, ``completion_mask``), in place or not."""
    unread: str = ""
    """Why the weights read are not the loss's own (empty: they are)."""
    _handles: list[Any] = field(default_factory=list)
    _open: list[Any] = field(default_factory=list)
    """The frames of the forwards under way (their pre-hook ran, their hook has not yet)."""
    _versions: list[int] = field(default_factory=list)
    _hooks: int = 0

    def __post_init__(self) -> None:
        self.held = None if self.batch is None else handed(self.batch, self.logps)
        if self.logps is not None:
            self._versions = [self.logps._version]
        self._hooks = gradient_hooks(self.model)

    def __enter__(self) -> Tap:
        if self.model is not None:
            from torch.nn.modules import module

            self._handles = [
                module.register_module_forward_pre_hook(self._enter),
                module.register_module_forward_hook(self._seen, with_kwargs=True),
            ]
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles, self._open = [], []

    def _enter(self, module: Any, args: Any) -> None:
        self._open = _live(self._open)  # a forward that raised (and was caught) never ended
        self._open.append(sys._getframe(1))

    def _seen(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        me = sys._getframe(1)  # the frame that ran this module's pre-hook too
        self._open = [f for f in _live(self._open) if f is not me]
        if self._open:
            return  # a module inside another's forward: the outermost pass is the one read
        ids = kwargs.get("input_ids", args[0] if args else None)
        for kind in ("log_probs", "logits"):
            x = getattr(out, kind, None)
            if ids is not None and x is not None and getattr(x, "requires_grad", False):
                self.captured.append((ids.detach(), x, kind))
                self._versions.append(x._version)
                return

    def after_call(self) -> None:
        """What the call did to what it was handed (run after it returns, before its backward).

        The batch's fields it changed (:attr:`written`); the log-probs or logits written in
        place, or given a gradient hook (:attr:`unread`): ∂L/∂ℓ read at them would then not be
        the weight ĝ carries (a hook changes the gradient after it is read; an in-place write
        makes the tensor read another value than the one scored).
        """
        if self.held is not None:
            self.written = changed(self.held, self.batch)
        what = "`logps`" if self.logps is not None else "the logits"
        tensors = self.tensors()
        if any(x._version != v for x, v in zip(tensors, self._versions, strict=False)):
            self.unread = (
                f"your loss writes {what} in place: the values read are not the ones it scored"
            )
        elif any(getattr(x, "_backward_hooks", None) for x in tensors):
            self.unread = (
                f"your loss hooks the gradient of {what} with register_hook: ĝ carries the "
                "hook's weights, not the ones read"
            )
        elif gradient_hooks(self.model) > self._hooks:
            self.unread = (
                "your loss hooks the model's gradient (a module's or a parameter's backward "
                "hook): ĝ is the hook's, not the gradient of the weights read"
            )

    def tensors(self) -> list[Any]:
        """The tensors whose gradients :func:`~eligibility.check.user.call` returns."""
        if self.logps is not None:
            return [self.logps]
        return [z for _, z, _ in self.captured]

    def receive(self, grads: tuple[Any, ...], params: Any = (), total: Any = ()) -> None:
        """Their gradients (None where the loss did not reach one), and what they cover.

        ``total`` is the loss's gradient in ``params``; the part of it that flows through the
        tapped tensors, ∇θ of Σ (their gradient · them), is held against it
        (:attr:`uncovered`): a loss that reaches θ by another path (a fused head that never
        makes the logits, another model's forward) is not read by the audit, and says so.
        """
        import torch

        self.grads = list(grads)
        if self.logps is not None or not self.cover:  # logps: nothing else of θ to read
            self.uncovered = 0.0
            return
        pairs = [(x, g) for x, g in zip(self.tensors(), self.grads, strict=True) if g is not None]
        if not params or not pairs:
            self.uncovered = 0.0 if not params else 1.0
            return
        through = torch.autograd.grad(
            [x for x, _ in pairs], list(params), [g for _, g in pairs], allow_unused=True
        )
        diff = sum(
            float(
                ((t if t is not None else 0) - (a if a is not None else 0)).double().square().sum()
            )
            for t, a in zip(through, total, strict=True)
        )
        norm = sum(float(a.double().square().sum()) for a in total if a is not None)
        self.uncovered = (diff / norm) ** 0.5 if norm > 0 else 0.0


def gradient_hooks(model: Any) -> int:
    """How many backward hooks the model's modules, its parameters and every module share.

    Counted before and after a call: a hook the loss adds changes ĝ behind the tensors read
    (one there before, a framework's own, is the model as it is handed).
    """
    if not hasattr(model, "modules"):
        return 0
    from torch.nn.modules import module as torch_module

    shared = len(torch_module._global_backward_hooks) + len(torch_module._global_backward_pre_hooks)
    modules = sum(len(m._backward_hooks) + len(m._backward_pre_hooks) for m in model.modules())
    params = sum(len(p._backward_hooks or ()) for p in model.parameters())
    return shared + modules + params


def _live(frames: list[Any]) -> list[Any]:
    """The frames of ``frames`` still running (on the caller's stack), in order.

    A module's forward that raises, caught by the user's code, never reaches its forward
    hook: its frame is gone from the stack, and so is its claim to be enclosing later passes.
    """
    running, frame = set(), sys._getframe(1)
    while frame is not None:
        running.add(id(frame))
        frame = frame.f_back
    return [f for f in frames if id(f) in running]


def handed(batch: Any, logps: Any = None) -> Any:
    """A copy of ``batch`` whose tensor attributes are clones (the rest shared).

    A field that shares its storage with ``logps`` (``old_logps = logps.detach()`` on-policy)
    is left shared: a write to it is a write to ``logps``, said as that.
    """
    import torch

    held = copy.copy(batch)
    for name, value in vars(batch).items():
        if isinstance(value, torch.Tensor) and not _aliases(value, logps):
            object.__setattr__(held, name, value.detach().clone())
    return held


def _aliases(x: Any, y: Any) -> bool:
    """Whether tensors ``x`` and ``y`` share their storage (False where ``y`` is None)."""
    return y is not None and x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()


def changed(held: Any, batch: Any) -> list[str]:
    """The tensor attributes of ``batch`` whose values differ from the copy ``held``."""
    import torch

    out = []
    for name, was in vars(held).items():
        now = getattr(batch, name, None)
        if not isinstance(was, torch.Tensor) or was is now:
            continue  # not a tensor, or a field left shared (see handed)
        same = isinstance(now, torch.Tensor) and now.shape == was.shape
        if same and was.is_floating_point():
            now = now.detach()
            same = bool(((now == was) | (now.isnan() & was.isnan())).all())
        elif same:
            same = torch.equal(now.detach(), was)
        if not same:
            out.append(name)
    return out


def entry_read(
    g: np.ndarray, z: np.ndarray, next_ids: np.ndarray, tau: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(wₜ, the entry read, ρ) at every position, from ∂L/∂z ``g`` and the logits ``z``.

    wₜ = τ ⟨gₜ, dₜ⟩/⟨dₜ, dₜ⟩, dₜ = e_{aₜ₊₁} − softmax(zₜ/τ), the weight on the sampled token's
    log-prob; ρₜ the part of gₜ it leaves (relative). Where ρₜ > :data:`RESIDUAL_TOL`, the
    entry is the token v whose dᵥ = e_v − π leaves the least (−1 where none fits either) and
    wₜ that token's coefficient; the entry is ``next_ids`` itself where the sampled token's
    log-prob explains gₜ.

    Args:
        g: ∂L/∂z, [..., V].
        z: the logits, [..., V].
        next_ids: aₜ₊₁, [...] (−1 where no token follows: the entry is then the best one).
        tau: the sampler's temperature.
    """
    g = np.asarray(g, dtype=np.float64)
    z = np.asarray(z, dtype=np.float64) / tau
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    gp = (g * p).sum(-1, keepdims=True)
    pp = (p * p).sum(-1, keepdims=True)
    dot = g - gp  # ⟨g, e_v − p⟩ for every v
    norm2 = np.maximum(1.0 - 2.0 * p + pp, 1e-300)  # ‖e_v − p‖²
    gg = (g * g).sum(-1, keepdims=True)
    left = np.sqrt(np.maximum(gg - dot**2 / norm2, 0.0)) / np.maximum(np.sqrt(gg), 1e-300)
    best = left.argmin(-1)
    a = np.where(next_ids >= 0, next_ids, best)
    take = a[..., None]
    rho = np.take_along_axis(left, take, -1)[..., 0]
    w = tau * np.take_along_axis(dot / norm2, take, -1)[..., 0]
    zero = gg[..., 0] == 0
    rho = np.where(zero, 0.0, rho)
    wrong = (rho > RESIDUAL_TOL) & ~zero
    b = best[..., None]
    rho_b = np.take_along_axis(left, b, -1)[..., 0]
    w_b = tau * np.take_along_axis(dot / norm2, b, -1)[..., 0]
    fits = wrong & (rho_b <= RESIDUAL_TOL)
    entry = np.where(wrong, np.where(fits, best, -1), a)
    w = np.where(fits, w_b, w)
    return np.where(zero, 0.0, w), entry, np.where(fits, rho_b, rho)


__all__ = ["RESIDUAL_TOL", "Tap", "changed", "entry_read", "gradient_hooks", "handed"]
