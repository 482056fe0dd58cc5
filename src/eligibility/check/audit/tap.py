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

    Attributes:
        model: True (or the model) in the ``model`` form: forward passes are watched; None in
            the ``logps`` form.
        logps: the log-probs handed to the user (``logps`` form), or None.
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
    _handles: list[Any] = field(default_factory=list)
    _depth: int = 0

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
        self._handles = []

    def _enter(self, module: Any, args: Any) -> None:
        self._depth += 1

    def _seen(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        self._depth -= 1
        if self._depth:
            return  # a module inside another's forward: the outermost pass is the one read
        ids = kwargs.get("input_ids", args[0] if args else None)
        for kind in ("log_probs", "logits"):
            x = getattr(out, kind, None)
            if ids is not None and x is not None and getattr(x, "requires_grad", False):
                self.captured.append((ids.detach(), x, kind))
                return

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


__all__ = ["RESIDUAL_TOL", "Tap", "entry_read"]
