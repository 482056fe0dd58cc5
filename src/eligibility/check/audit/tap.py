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

A loss may read some of what it is handed without its gradient (``logps.detach()``, ``.data``,
a value computed under ``torch.no_grad()``): while the call runs, :meth:`Tap.reading` notes
every tensor with a gradient that the loss reads so, and :meth:`Tap.after_call` finds the
entries of the tapped tensors each one was computed from (the support of Jᵀv, v random: the
columns of the Jacobian ∂x/∂ℓ that are not 0). Those entries are :attr:`Tap.detached`: the
audit says where their tokens carry no gradient for it (a value read, no weight).
"""

from __future__ import annotations

import contextlib
import copy
import sys
from collections.abc import Iterator
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
    detached: list[Any] = field(default_factory=list)
    """For each of :meth:`tensors`, the entries (positions) its detached reads were computed
    from: a bool array of its shape (a logits tensor's without the vocabulary), or None where
    the loss read nothing of it without its gradient."""
    _read: list[Any] = field(default_factory=list)
    """The tensors with a gradient the call read without it (see :meth:`reading`)."""
    _carries: dict[int, set[int]] = field(default_factory=dict)
    """id of a tensor the call made → the reads of :attr:`_read` its value carries."""
    _kept: list[Any] = field(default_factory=list)
    _paired: set[int] = field(default_factory=set)
    """The reads combined, by arithmetic, with the log-probs themselves, attached (the ratio
    exp(ℓ − sg(ℓ)): the value read beside its own gradient, not instead of it)."""
    unread: str = ""
    """Why the weights read are not the loss's own (empty: they are)."""
    ratio_read: bool = False
    """The value returned carries the policy's ratio to θ_old: a difference (or quotient) of
    θ's log-probs, attached or read detached, and the batch's ``old_logps``. Where no token's
    weight moves with that ratio, the loss bounds it on every token; its old log-probs are not
    θ's (:mod:`~eligibility.check.audit.sampler`)."""
    _olds: set[int] = field(default_factory=set)
    """ids of the tensors the call made from ``batch.old_logps`` alone (its copies, views)."""
    _ratios: set[int] = field(default_factory=set)
    """ids of the tensors the call made that carry θ's log-probs against ``old_logps``."""
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

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Note, while the user's call runs, every tensor it reads without its gradient.

        A torch function mode sees each call of a torch function: ``detach`` (and ``.data``)
        of a tensor that has a gradient, and any function given such a tensor while gradients
        are off (``torch.no_grad()``), is a read without it; what each call returns carries on
        the reads its inputs carry, so :meth:`after_call` keeps only the reads that reach the
        value returned (a detached value logged is no part of the loss). A boolean or integer
        result (a mask, a nucleus, an argmax: which entries, not a value) carries none: a token
        a rule of its detached probability leaves out is read as a rule, not as detached.
        Nothing the call gets back is changed.
        """
        import torch
        from torch.overrides import TorchFunctionMode

        read, carries, kept, paired = self._read, self._carries, self._kept, self._paired
        detaching = {torch.Tensor.detach, torch.detach, torch.Tensor.data.__get__}
        targets = self._targets
        olds, ratios, old = self._olds, self._ratios, self._old_logps()

        class _Unattached(TorchFunctionMode):
            def __torch_function__(
                self, func: Any, types: Any, args: Any = (), kwargs: Any = None
            ) -> Any:
                kwargs = kwargs or {}
                result = func(*args, **kwargs)
                given = _tensors((*args, *kwargs.values()))
                came: set[int] = set().union(*(carries.get(id(x), ()) for x in given))
                if came and getattr(func, "__name__", "") in ARITHMETIC:
                    if any(id(x) not in carries and _log_probs_of(x, targets()) for x in given):
                        paired.update(came)  # ℓ − sg(ℓ): the value read beside its gradient
                if func in detaching or not torch.is_grad_enabled():
                    for x in given:
                        if len(read) < MAX_READS and _log_probs_of(x, targets()):
                            came.add(len(read))
                            read.append(x)
                if came:
                    for y in _tensors((result,)):
                        if not (y.is_floating_point() or y.is_complex()):
                            continue  # a set or an index (which tokens) carries no value read
                        carries[id(y)] = carries.get(id(y), set()) | came
                        kept.append(y)  # alive until the call is read: its id not reused
                if old is not None:
                    _ratio_of(func, given, result, old, olds, ratios, carries, kept)
                return result

        with _Unattached():
            yield

    def _old_logps(self) -> Any:
        """The batch's ``old_logps`` the call is handed (None: none, or θ's own log-probs)."""
        old = getattr(self.batch, "old_logps", None)
        if old is None or not hasattr(old, "untyped_storage") or _aliases(old, self.logps):
            return None
        return old

    def _targets(self) -> list[Any]:
        """The autograd nodes of the tapped tensors (a leaf's: its accumulator)."""
        return [_node(x) for x in self.tensors()]

    def _unattached(self, out: Any) -> None:
        """:attr:`detached` from the reads that reach ``out`` (None: every read noted).

        Run after the call, before its backward.
        """
        import torch

        tensors, self.detached = self.tensors(), []
        self.ratio_read = bool(self._ratios) if out is None else id(out) in self._ratios
        self._olds, self._ratios = set(), set()
        reach = set(range(len(self._read))) if out is None else self._carries.get(id(out), set())
        reads = [x for i, x in enumerate(self._read) if i in reach - self._paired]
        self._read, self._carries, self._kept, self._paired = [], {}, [], set()  # the call's
        if not reads or not tensors:
            return
        gen = torch.Generator().manual_seed(0)  # its own: the user's draws are not touched
        found: list[Any] = [None] * len(tensors)
        for x in reads:
            v = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x.dtype).to(x.device)
            try:
                grads = torch.autograd.grad(x, tensors, v, retain_graph=True, allow_unused=True)
            except RuntimeError:  # a graph the loss freed or made unreadable: nothing to say
                continue
            for j, g in enumerate(grads):
                if g is not None:
                    hit = g.detach() != 0
                    found[j] = hit if found[j] is None else found[j] | hit
        kinds = ["logps"] if self.logps is not None else [k for _, _, k in self.captured]
        self.detached = [
            None if f is None else np.asarray((f.any(-1) if k == "logits" else f).cpu())
            for f, k in zip(found, kinds, strict=True)
        ]

    def after_call(self, out: Any = None) -> None:
        """What the call did to what it was handed (run after it returns, before its backward).

        ``out``: the value it returned (the reads without a gradient that reach it are said,
        :attr:`detached`; None: every one noted).

        The batch's fields it changed (:attr:`written`); the log-probs or logits written in
        place, or given a gradient hook (:attr:`unread`): ∂L/∂ℓ read at them would then not be
        the weight ĝ carries (a hook changes the gradient after it is read; an in-place write
        makes the tensor read another value than the one scored).
        """
        if self.held is not None:
            self.written = changed(self.held, self.batch)
        self._unattached(out)
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


MAX_READS = 64
"""The most tensors read without their gradient that one call notes (a loss that logs a few
detached values reads a handful; the rest of a long run of them adds no entry)."""


ARITHMETIC = frozenset(
    {"add", "sub", "subtract", "mul", "div", "true_divide", "__add__", "__radd__", "__sub__",
     "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__"}
)  # fmt: skip
"""The torch functions that combine two values entry by entry (a selection, ``cat`` or
``where``, does not: it puts a detached entry in an attached one's place)."""

RATIO_FORMING = frozenset(
    {"sub", "subtract", "div", "true_divide", "__sub__", "__rsub__", "__truediv__",
     "__rtruediv__"}
)  # fmt: skip
"""The functions that make a ratio of two values: ℓ − ℓ_old (its log), π/π_old."""


def _ratio_of(
    func: Any,
    given: list[Any],
    result: Any,
    old: Any,
    olds: set[int],
    ratios: set[int],
    carries: dict[int, set[int]],
    kept: list[Any],
) -> None:
    """Note what ``func``'s ``result`` carries of the ratio of θ's log-probs to ``old``.

    A result made from the ratio carries it; one of :data:`RATIO_FORMING` whose inputs are
    ``old`` (or made from it alone) and a value of θ (one with a gradient, or a detached read
    of the log-probs) is the ratio; one made from ``old`` alone is ``old`` still.
    """
    if any(id(x) in ratios for x in given):
        tag = ratios
    else:
        of_old = [x is old or id(x) in olds for x in given]
        if not any(of_old):
            return
        theta = any(
            not o and (getattr(x, "requires_grad", False) or id(x) in carries)
            for x, o in zip(given, of_old, strict=True)
        )
        if theta and getattr(func, "__name__", "") in RATIO_FORMING:
            tag = ratios
        elif theta:
            return  # old's value times a value of θ (π_old/μ × s): no ratio to θ_old
        else:
            tag = olds
    for y in _tensors((result,)):
        tag.add(id(y))
        kept.append(y)  # alive until the call is read: its id not reused


SELECTIONS = frozenset(
    {"Select", "Slice", "Gather", "LogSoftmax", "Div", "Mul", "View", "UnsafeView", "Reshape",
     "Alias", "Squeeze", "Unsqueeze", "Expand", "Transpose", "Permute", "Clone", "ToCopy",
     "Index", "AsStrided", "T"}
)  # fmt: skip
"""The autograd nodes between a tapped tensor and a log-prob taken from it: a selection, a
reshape, a copy, the log-softmax and a scaling by a constant (1/τ). A difference (ℓ − ℓ_ref),
an exp (π, a ratio), a sum is a value computed from the log-probs, not the log-probs."""


def _node(x: Any) -> Any:
    """The autograd node that produced ``x`` (a leaf's gradient accumulator)."""
    import torch

    if x.grad_fn is not None or not x.requires_grad:
        return x.grad_fn
    with torch.enable_grad():  # a leaf's accumulator is the first input of a view of it
        return x.expand_as(x).grad_fn.next_functions[0][0]


def _log_probs_of(x: Any, targets: list[Any]) -> bool:
    """Whether ``x`` is a tapped tensor's log-probs (the ℓ a loss's term differentiates).

    Reached from it through :data:`SELECTIONS` alone, one input each.
    """
    node = getattr(x, "grad_fn", None) if getattr(x, "requires_grad", False) else None
    if node is None or not targets:
        return bool(targets) and getattr(x, "requires_grad", False) and _node(x) in targets
    for _ in range(64):
        if node in targets:
            return True
        name = type(node).__name__.split("Backward")[0]
        inputs = [n for n, _ in node.next_functions if n is not None]
        if name not in SELECTIONS or len(inputs) != 1:
            return False
        node = inputs[0]
    return False


def _tensors(xs: Any) -> list[Any]:
    """The tensors among ``xs`` and the lists and tuples in it (one level down)."""
    import torch

    out = []
    for x in xs:
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, list | tuple):
            out += [y for y in x if isinstance(y, torch.Tensor)]
    return out


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
