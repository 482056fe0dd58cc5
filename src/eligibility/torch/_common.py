"""Checks and reductions shared by the REINFORCE losses of :mod:`eligibility.torch`.

Every loss here has the same shape of computation. Per element i of the leading (batch, time, …)
shape, ℓᵢ = −Aᵢ ln π(aᵢ) − β Hᵢ on a real step and ℓᵢ = 0 on padding; the reduction sums or
averages them; and the backward pass needs, per element, the weight sᵢ = ∂(output)/∂ℓᵢ times
the incoming gradient. That weight is all a closed-form backward needs from the reduction:

* ``"none"``: sᵢ = gᵢ mᵢ (g the incoming gradient, one per element, m the mask);
* ``"sum"``:  sᵢ = g mᵢ;
* ``"mean"``: sᵢ = g mᵢ / max(N, 1), N = Σᵢ mᵢ the number of real steps.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from eligibility._array import first_index

REDUCTIONS = ("mean", "sum", "none")

# Rows of a B×V buffer handled at once where a second, temporary buffer is needed (the entropy
# term): about 4 M entries, so the temporary stays O(1) MiB-scale whatever B is.
TEMP_ENTRIES = 1 << 22

INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
"""The integer dtypes a 0/1 mask may come in."""


def check_reduction(reduction: str) -> None:
    """Raise a ValueError unless ``reduction`` is one of ``"mean"``, ``"sum"``, ``"none"``."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of 'mean', 'sum', 'none'; got {reduction!r}")


def check_coef(entropy_coef: float) -> float:
    """``entropy_coef`` as a finite python float (a tensor would hide a host sync per step)."""
    if isinstance(entropy_coef, torch.Tensor):
        raise ValueError("entropy_coef must be a python float, not a tensor")
    beta = float(entropy_coef)
    if beta != beta or beta in (float("inf"), float("-inf")):
        raise ValueError(f"entropy_coef must be finite; got {entropy_coef!r}")
    return beta


def check_tensor(name: str, x: object) -> torch.Tensor:
    """Raise a ValueError unless ``x`` is a torch tensor."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    return x


def check_float(name: str, x: torch.Tensor) -> None:
    """Raise a ValueError unless ``x`` is a floating tensor."""
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating tensor; got dtype {x.dtype}")


def float_tensor(name: str, x: object, ndim: int | None = None, shape: str = "") -> torch.Tensor:
    """``x`` checked: a floating tensor, of ``ndim`` axes when given, else a ValueError.

    The error names ``name``; for a wrong number of axes it says ``name`` must be ``shape``.
    """
    t = check_tensor(name, x)
    check_float(name, t)
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must be {shape}; got shape {tuple(t.shape)}")
    return t


def index_actions(
    actions: object, lead: torch.Size, of: str, full: Sequence[int], name: str = "actions"
) -> torch.Tensor:
    """Category indices of shape L, checked (the logits' device and int64 are the caller's job).

    ``of`` names the tensor whose leading shape L the actions must match, ``full`` its shape;
    ``name`` is the parameter's own name in the messages (``actions``, ``token_ids``).
    """
    a = check_tensor(name, actions)
    if a.is_floating_point() or a.is_complex() or a.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor (category indices); got {a.dtype}")
    if a.shape != lead:
        raise ValueError(
            f"{name} of shape {tuple(a.shape)} do not match the leading shape of {of} "
            f"{tuple(full)}: pass one per row, shape {tuple(lead)}"
        )
    return a


def nonfinite_step(x: torch.Tensor, valid: torch.Tensor | None) -> tuple[int, ...] | None:
    """The index of the first real step where x is NaN or ±∞, or None (one host sync)."""
    bad = ~torch.isfinite(x)
    if valid is not None:
        bad &= valid
    return first_index(bad) if bool(bad.any()) else None


def advantages_like(advantages: object, shape: Sequence[int], like: torch.Tensor) -> torch.Tensor:
    """The advantages A, detached, broadcast to ``shape``, in the dtype and device of ``like``.

    A is a constant of the loss: REINFORCE weights the eligibility by the return, it does not
    differentiate through it (a learned baseline is trained by its own loss).
    """
    if isinstance(advantages, torch.Tensor):
        adv = advantages.detach() if advantages.requires_grad else advantages
        if adv.shape == shape and adv.dtype == like.dtype and adv.device == like.device:
            return adv
    elif isinstance(advantages, int | float):
        adv = torch.tensor(float(advantages))
    else:
        raise ValueError(f"advantages must be a torch.Tensor or a number; got {type(advantages)}")
    if adv.is_complex() or adv.dtype == torch.bool:
        raise ValueError(f"advantages must be real numbers; got dtype {adv.dtype}")
    try:
        return torch.broadcast_to(adv.to(device=like.device, dtype=like.dtype), tuple(shape))
    except RuntimeError as err:
        raise ValueError(
            f"advantages of shape {tuple(adv.shape)} do not broadcast to the leading shape "
            f"{tuple(shape)} (one advantage per action); pass shape {tuple(shape)}"
        ) from err


def valid_mask(mask: object, shape: Sequence[int], device: torch.device) -> torch.Tensor | None:
    """The padding mask m (True = a real step that counts, False = padding), broadcast to shape."""
    if mask is None:
        return None
    check_tensor("mask", mask)
    assert isinstance(mask, torch.Tensor)
    if mask.dtype != torch.bool:
        raise ValueError(
            f"mask must be a bool tensor (True = a real step, False = padding); got {mask.dtype}"
        )
    try:
        return torch.broadcast_to(mask.to(device), tuple(shape))
    except RuntimeError as err:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the leading shape "
            f"{tuple(shape)}; pass one flag per action, shape {tuple(shape)}"
        ) from err


def element_weights(
    valid: torch.Tensor | None, shape: Sequence[int], reduction: str, like: torch.Tensor
) -> torch.Tensor:
    """Weights wᵢ = ∂(output)/∂ℓᵢ per unit incoming gradient: mᵢ ("sum") or mᵢ/max(N, 1) ("mean").

    For "none" the incoming gradient is itself per element, and w = m.
    """
    if valid is None:
        m = torch.ones((), dtype=like.dtype, device=like.device).expand(tuple(shape))
        n = m.numel()
        return m / max(n, 1) if reduction == "mean" else m
    m = valid.to(like.dtype)
    if reduction == "mean":
        # A tensor count, so that no host sync is needed; an all-padding batch gives 0, not 0/0.
        return m / valid.sum().clamp_min(1).to(like.dtype)
    return m


def reduce(ell: torch.Tensor, w: torch.Tensor, reduction: str) -> torch.Tensor:
    """The reduced loss: ℓ itself ("none"), or Σᵢ wᵢ ℓᵢ (padding already holds ℓᵢ = 0)."""
    if reduction == "none":
        return ell
    if reduction == "sum":
        return ell.sum()
    return (ell * w).sum()


def zero_padding(x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Set padding entries of x to 0 (where, not a product: padding may hold NaN or ±∞)."""
    if valid is None:
        return x
    return torch.where(valid, x, torch.zeros((), dtype=x.dtype, device=x.device))


def reinforce_steps(
    log_prob: torch.Tensor,
    entropy: torch.Tensor | None,
    adv: torch.Tensor,
    valid: torch.Tensor | None,
    beta: float,
    event_dims: int,
    validate: bool,
    nonfinite: str,
) -> torch.Tensor:
    """ℓₜ = −Aₜ Σ ln π(aₜ) − β Σ Hₜ per step (Σ over the event axes), 0 on padding.

    Args:
        log_prob: ln π of each component of the action taken.
        entropy: H of each component (None when β = 0: no term).
        adv: the advantage A of each step.
        valid: the real steps (None: all are).
        beta: the entropy coefficient β.
        event_dims: the trailing axes of one action, summed.
        validate: raise a ValueError naming the first real step whose ln π is NaN or ±∞.
        nonfinite: that error's text, with ``{step}`` where the step's index goes.
    """
    lp = sum_event(log_prob, event_dims)
    bad = nonfinite_step(lp, valid) if validate else None
    if bad is not None:
        raise ValueError(nonfinite.format(step=list(bad)))
    ell = -adv * lp
    if entropy is not None:
        ell = ell - beta * sum_event(entropy, event_dims)
    return zero_padding(ell, valid)


def sum_to(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Sum a broadcast gradient back to the shape of the parameter it belongs to."""
    if grad.shape == shape:
        return grad
    lead = grad.dim() - len(shape)
    dims = list(range(lead)) + [
        lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1
    ]
    out = grad.sum(dim=dims, keepdim=True) if dims else grad
    return out.reshape(shape)


def check_event_dims(event_dims: int, ndim: int, name: str) -> int:
    """Raise a ValueError unless 0 ≤ event_dims ≤ ndim (the trailing axes of one action)."""
    if isinstance(event_dims, bool) or not isinstance(event_dims, int):
        raise ValueError(f"event_dims must be an int; got {event_dims!r}")
    if not 0 <= event_dims <= ndim:
        raise ValueError(
            f"event_dims must lie in 0…{ndim} ({name} has {ndim} axes); got {event_dims}"
        )
    return event_dims


def sum_event(x: torch.Tensor, event_dims: int) -> torch.Tensor:
    """Σ over the trailing ``event_dims`` axes: the log-density of independent components."""
    if event_dims == 0:
        return x
    return x.sum(dim=tuple(range(-event_dims, 0)))


def expand_event(x: torch.Tensor, event_dims: int) -> torch.Tensor:
    """A per-step tensor with ``event_dims`` trailing axes of size 1, to broadcast over them."""
    return x.reshape(tuple(x.shape) + (1,) * event_dims)


def check_advantages(adv: torch.Tensor, valid: torch.Tensor | None) -> None:
    """Raise a ValueError naming the first real step whose advantage is NaN or ±∞ (one sync).

    A non-finite advantage makes the loss and every gradient non-finite; it is nearly always a
    bug upstream (a return of an episode that never ended, a division by a zero std).
    """
    bad = nonfinite_step(adv, valid)
    if bad is not None:
        raise ValueError(
            f"advantages{list(bad)} = {float(adv[bad])} is not finite: the loss and its "
            "gradient would be too; fix the returns upstream (validate=False skips this check "
            "and its host sync)"
        )


def transformed(x: torch.Tensor) -> bool:
    """Whether x is traced by torch.compile or wrapped by a torch.func transform (vmap, grad).

    Under those the losses are written with plain differentiable ops, which every transform
    understands, instead of an autograd.Function with host-synchronising checks.
    """
    if torch.compiler.is_compiling():
        return True
    try:
        return bool(torch._C._functorch.is_functorch_wrapped_tensor(x))
    except AttributeError:  # pragma: no cover - an older torch without functorch
        return False


def raise_nonfinite(name: str, x: torch.Tensor, m: torch.Tensor | None) -> None:
    """Raise a ValueError naming the first real entry of x that is NaN or ±∞ (one host sync)."""
    idx = nonfinite_step(x, m)
    if idx is not None:
        raise ValueError(
            f"{name}{list(idx)} = {float(x[idx])} is not finite on a real entry; the loss and "
            "its gradient would be too: fix it upstream (or mark the entry as padding)"
        )


def check_mask(mask: object, shape: torch.Size) -> torch.Tensor:
    """``completion_mask`` as bool of ``shape`` (bool, or 0/1 numbers), or a ValueError."""
    m = check_tensor("completion_mask", mask)
    if m.shape != shape:
        raise ValueError(
            f"completion_mask of shape {tuple(m.shape)} does not match {tuple(shape)}: pass one "
            "flag per completion token (1/True on real tokens, EOS included; 0/False on padding)"
        )
    if m.dtype == torch.bool:
        return m
    if m.is_complex() or not (m.is_floating_point() or m.dtype in INTS):
        raise ValueError(f"completion_mask must be bool or 0/1 numbers; got {m.dtype}")
    if bool(((m != 0) & (m != 1)).any()):
        raise ValueError(
            "completion_mask must hold only 0 and 1 (True/False); got other values: a weight "
            "is not a mask, multiply the advantages instead"
        )
    return m != 0
