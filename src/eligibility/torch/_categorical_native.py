r"""The native path of the categorical REINFORCE loss: torch's own C++ nodes, for small CPU calls.

At these sizes a call costs tens of microseconds to a millisecond, and an autograd.Function's
Python forward and backward cost more than they save; −ln π(a) is ``cross_entropy`` (or a
max-shifted logsumexp below V = 16), whose autograd backward is the closed form
A (π − onehot(a)). :func:`first` is tried before any input check
(:data:`eligibility.torch.categorical.PATHS`).
"""

from __future__ import annotations

from typing import Any

import torch

from eligibility.torch import _categorical_buffer as buffer
from eligibility.torch import _common

# Which calls the native path serves (CPU, no padding, β = 0, checked), from the measured
# crossovers of bench/losses/reinforce_loss.py and docs/torch-losses.md. At these sizes a call costs
# tens of microseconds to a millisecond, an autograd.Function's Python forward and backward cost
# more than they save, and torch's own C++ nodes are the fastest. Below V = 16, torch's
# log_softmax takes a slow per-row kernel (2.4 and 2.8 times logsumexp's time at 4096 × 4, one
# thread, in two runs of `python bench/losses/categorical_ops.py`), so from SMALL_V_LSE_ROWS rows
# on, at one thread, the native path is written with logsumexp instead. With more threads
# log_softmax splits the rows among them while the composite's small ops stay on one (below
# torch's parallel grain), and cross_entropy wins again. Beyond the native limits the lean node
# wins: it holds one B×V buffer where cross_entropy's backward allocates several, whose
# first-touch page faults dominate.
SMALL_V = 16
NATIVE_ENTRIES = 1 << 20  # V ≥ SMALL_V
NATIVE_SMALL_V_ENTRIES = 1 << 15  # V < SMALL_V
SMALL_V_LSE_ROWS = 4096
SMALL_V_LSE_MAX_THREADS = 1

# The native path's backward forms the taken entry as c (π_a − 1), as F.cross_entropy does: its
# relative error is about 2⁻²⁴ / (1 − π_a) in float32. Where some step has −ln π_a < this (π_a
# above 1 − 2⁻¹⁰, where it would exceed 2⁻¹⁴), the lean path is taken instead.
NATIVE_MIN_NLL = 2.0**-10


def fits(z: torch.Tensor) -> bool:
    """Whether a checked, unpadded, β = 0 call on ``z`` takes the native path (see above)."""
    n = z.numel()
    return z.is_cpu and n <= (NATIVE_ENTRIES if z.shape[-1] >= SMALL_V else NATIVE_SMALL_V_ENTRIES)


def loss(
    z: torch.Tensor, a: torch.Tensor, adv: torch.Tensor, reduction: str
) -> torch.Tensor | None:
    r"""ℓ = −A ln π(a) in torch's native ops (no padding, no entropy term), checked.

    −ln π(a) is ``cross_entropy``, or logsumexp(z′) − z′_a with z′ = z − max z (the max
    detached, so the gradient is unchanged) below V = 16 from :data:`SMALL_V_LSE_ROWS` rows on
    at one thread;
    autograd's backward of either is the same closed form, A (π − onehot(a)), in C++ nodes, as
    accurate as cross_entropy's (the shift keeps z′ − logsumexp z′ exact near the max, where
    z − logsumexp z would lose |z| ε). The mean is a dot product with A/N (one node fewer than
    ``(A * ce).mean()``). Two scalar reads check the result (on the CPU, where this path
    runs, they wait on nothing); None (the caller takes the checked path, which also names the
    problem) where anything is off: the loss is not finite (NaN or ±∞ in the logits or the
    advantages, a taken action of probability 0), ``cross_entropy`` ignored a −100 action
    (ℓ = 0), or some step is so peaked that c (π_a − 1) would lose digits
    (−ln π_a < :data:`NATIVE_MIN_NLL`). Any other out-of-range action makes the native ops
    raise, which the caller catches.
    """
    v = z.shape[-1]
    z2, a1 = (z, a) if z.dim() == 2 else (z.reshape(-1, v), a.reshape(-1))
    if (
        v >= SMALL_V
        or z2.shape[0] < SMALL_V_LSE_ROWS
        or torch.get_num_threads() > SMALL_V_LSE_MAX_THREADS
    ):
        nll = torch.nn.functional.cross_entropy(z2, a1, reduction="none")
    else:
        zs = z2 - z2.detach().amax(-1, keepdim=True)
        nll = torch.logsumexp(zs, -1) - zs.gather(-1, a1.unsqueeze(-1)).squeeze(-1)
    a_w = adv if adv.dim() == 1 else adv.reshape(-1)
    if reduction == "none":
        out = nll * a_w
        total = out.detach().sum().item()
        out = out if out.shape == a.shape else out.view(a.shape)
    else:
        out = torch.dot(nll, a_w * buffer.reciprocal(nll.numel()) if reduction == "mean" else a_w)
        total = out.item()
    # NaN or ±∞ in the loss; then NaN or a peaked step
    if total - total != 0.0 or not nll.detach().min().item() >= NATIVE_MIN_NLL:
        return None
    return out


def first(call: Any) -> torch.Tensor | None:
    """The native path tried before any other check, for the calls it can serve; else None.

    At the smallest sizes the input checks cost as much as the saving of the native path, so
    this runs first, guarded by attribute reads only (types, dtypes, shapes, device): anything
    malformed that slips past them makes the native ops raise, and None sends the call to the
    checked path, which names the problem. None also where the native check finds a bad or
    peaked step (see :func:`loss`). ``call`` is the raw
    :class:`~eligibility.torch.categorical.Call`.
    """
    logits, actions, advantages, _, entropy_coef, reduction, _ = call
    if not (
        type(logits) is torch.Tensor
        and type(actions) is torch.Tensor
        and type(advantages) is torch.Tensor
        and type(entropy_coef) in (float, int)
        and entropy_coef == 0
        and reduction in _common.REDUCTIONS
        and logits.is_floating_point()
        and logits.dim() >= 1
        and logits.numel() > 0
        and actions.dtype == torch.int64
        and actions.shape == logits.shape[:-1]
        and advantages.shape == actions.shape
        and advantages.dtype == logits.dtype
        and not advantages.requires_grad
        and fits(logits)
        and not _common.transformed(logits)
    ):
        return None
    try:
        return loss(logits, actions, advantages, reduction)
    except (IndexError, RuntimeError):  # malformed past the guards: the checked path names it
        return None
