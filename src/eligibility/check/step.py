r"""The step form of ``check --sequence``: your function steps an optimiser; the check reads it.

``fn(model, optimizer, batch)`` trains as a training step does: it may call ``backward()``
any number of times (once per micro-batch, say), clip the gradients, and call
``optimizer.step()`` and ``optimizer.zero_grad()`` itself, as often as it likes. The
optimiser the check hands it is plain SGD with learning rate η = 1 that *records* each step
instead of applying it (θ stays the point the check holds the estimate at):

    Δθ = −Σ_steps η_k g_k,    ĝ = Δθ / η = −Σ_steps g_k,

g_k the parameters' ``.grad`` at step k (clipped, scaled, accumulated, as your code left it).
A function that never steps is read by its accumulated ``.grad`` instead: ĝ = −Σ grad.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from eligibility.check import user
from eligibility.check.diagnosis import Diagnosis
from eligibility.check.mistakes import named

LR = 1.0
"""η, the recording optimiser's learning rate: the update read is ĝ times η."""

MUTATED = (
    "your function changed the policy's parameters itself (an in-place write, or another "
    "optimiser): step the optimiser the check hands you, which records the update"
)


def recorder(params: list[Any]) -> Any:
    """A ``torch.optim.Optimizer`` over ``params`` whose ``step()`` records −η·grad, in float64.

    ``total`` holds the recorded update per parameter, ``steps`` how many steps were taken;
    the parameters themselves are not changed.
    """
    import torch

    class StepRecorder(torch.optim.Optimizer):
        """SGD (η = :data:`LR`) that records its update instead of applying it."""

        def __init__(self, params: list[Any]) -> None:
            super().__init__(params, {"lr": LR})
            self.total = [torch.zeros_like(p, dtype=torch.float64) for p in params]
            self._index = {id(p): i for i, p in enumerate(params)}
            self.steps = 0

        @torch.no_grad()
        def step(self, closure: Callable[[], Any] | None = None) -> Any:
            loss = None
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        self.total[self._index[id(p)]] -= group["lr"] * p.grad.double()
            self.steps += 1
            return loss

    return StepRecorder(params)


class StepRecord:
    """What the user's step did in the worker: ``clip_grad_norm_``'s norms, the backward passes.

    :meth:`watch` wraps torch's ``clip_grad_norm_`` (in the worker process only) so that every
    call of the user's step records the total norm it measured and the ``max_norm`` it was
    given; :func:`stepped` counts the backward passes of each call (a step that splits its
    batch into micro-batches backpropagates more than once). The check then says whether the
    clip bound (a biased step, ``gradient-clipped``) or never did, and whether the step ever
    split its batch: a mechanism a problem did not exercise is said, not passed in silence.
    """

    def __init__(self) -> None:
        self.norms: list[float] = []
        self.max_norms: list[float] = []
        self.backwards: list[int] = []

    def watch(self) -> None:
        """Wrap ``torch.nn.utils.clip_grad_norm_`` (and ``clip_grad.clip_grad_norm_``)."""
        import torch

        original = torch.nn.utils.clip_grad_norm_

        def clip_grad_norm_(parameters: Any, max_norm: float, *args: Any, **kwargs: Any) -> Any:
            total = original(parameters, max_norm, *args, **kwargs)
            self.norms.append(float(total))
            self.max_norms.append(float(max_norm))
            return total

        torch.nn.utils.clip_grad_norm_ = clip_grad_norm_
        torch.nn.utils.clip_grad.clip_grad_norm_ = clip_grad_norm_

    def counting(self, params: list[Any]) -> Callable[[], None]:
        """Count the backward passes through ``params`` until the returned function is called.

        A pass computes each parameter's gradient once: the count is the most gradients any
        one parameter received.
        """
        counts = [0] * len(params)

        def hook(i: int) -> Callable[[Any], None]:
            def count(grad: Any) -> None:
                counts[i] += 1

            return count

        handles = [p.register_hook(hook(i)) for i, p in enumerate(params)]

        def done() -> None:
            for h in handles:
                h.remove()
            self.backwards.append(max(counts, default=0))

        return done

    def summary(self) -> dict[str, Any]:
        """``{"clip": {calls, bound, max_norm, largest_norm}, "split": {calls, split, most}}``.

        ``clip`` only where ``clip_grad_norm_`` was called; ``split`` only where the calls were
        counted: how many called backward more than once, and the most passes in one call.
        """
        out: dict[str, Any] = {}
        if self.norms:
            bound = sum(n > m for n, m in zip(self.norms, self.max_norms, strict=True))
            out["clip"] = {
                "calls": len(self.norms),
                "bound": bound,
                "max_norm": min(self.max_norms),
                "largest_norm": max(self.norms),
            }
        if self.backwards:
            out["split"] = {
                "calls": len(self.backwards),
                "split": sum(b > 1 for b in self.backwards),
                "most": max(self.backwards),
            }
        return out


def stepped(
    fn: Callable[..., Any],
    model: Any,
    batch: Any,
    params: list[Any],
    theta: list[Any],
    record: StepRecord | None = None,
) -> np.ndarray | None:
    """ĝ of one call of ``fn(model, optimizer, batch)``: the recorded update ÷ η (see module).

    ``record``, where given, counts the call's backward passes.

    Raises:
        UserError: fn raised, or changed the parameters itself.
    """
    import torch

    optimizer = recorder(params)
    done = record.counting(params) if record is not None else lambda: None
    try:
        fn(model, optimizer, batch)
    except Exception as err:
        raise user.user_error(err) from None
    finally:
        done()
    if any(not torch.equal(p.detach(), v) for p, v in zip(params, theta, strict=True)):
        raise user.UserError(MUTATED)
    if optimizer.steps:
        parts = [t / LR for t in optimizer.total]
    elif any(p.grad is not None for p in params):
        parts = [-(torch.zeros_like(p) if p.grad is None else p.grad).double() for p in params]
    else:
        return None
    for p in params:
        p.grad = None
    return torch.cat([t.reshape(-1) for t in parts]).numpy()  # 0 where every A is 0


CLIPPED = named("gradient-clipped")
"""The finding of a step whose ``clip_grad_norm_`` bound on the problem."""


def name_clipping(reports: list[Any]) -> None:
    """Name ``gradient-clipped`` where the step's clip bound and the verdict is not unbiased.

    A clip that binds rescales each batch's gradient by a factor that depends on the batch:
    the engine reads a scale, a problem-dependent scale or ``other``; the step's own record
    (``details["clip"]``) says why. Beside a named mistake it is added to the names.
    """
    for r in reports:
        clip = (r.details or {}).get("clip")
        if not clip or not clip["bound"] or r.verdict in ("unbiased", "error", "no gradient"):
            continue
        if r.names in ((), ("scale",), ("problem-dependent-scale",), ("other",)):
            r.verdict, r.finding = "biased", Diagnosis((CLIPPED,))
        else:
            r.finding = r.finding.plus(CLIPPED)


__all__ = ["CLIPPED", "LR", "StepRecord", "name_clipping", "recorder", "stepped"]
