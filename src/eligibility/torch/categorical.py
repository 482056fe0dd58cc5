r"""REINFORCE loss for a categorical policy whose backward pass is the eligibility, in closed form.

For logits z ∈ ℝⱽ, π = softmax(z), a taken action a and its advantage A, the per-step loss is

    ℓ = −A ln π(a) − β H(π),     ln π(a) = z_a − logsumexp(z),     H(π) = −Σᵢ πᵢ ln πᵢ

and its gradient is the characteristic eligibility e = ∂ ln π(a)/∂z = onehot(a) − π (Williams,
1992, §4), scaled by −A, plus the entropy term:

    ∂ℓ/∂z = A (π − onehot(a)) + β π ⊙ (ln π + H).

These are the closed forms of the core,
:func:`eligibility.distributions.categorical.score_logits` (e) and
:func:`~eligibility.distributions.categorical.entropy_grad_logits` (∂H/∂z = −π ⊙ (ln π + H));
the tests hold this module to them. The core kernels build ``onehot(a)`` and several other
B×V arrays; here the same formulas run in one B×V buffer, in place: π (a fused ``softmax``),
then A π (``mul_``), then minus A at the taken index (``index_add_``). That buffer is the
gradient handed back to autograd, so a backward costs one B×V allocation where autograd's
backward of ``-(A * Categorical(logits=z).log_prob(a)).mean()`` costs several.

Four paths compute this loss, one table chooses: :data:`PATHS`, tried in order, the first that
applies and does not decline serves the call. Their code is in ``_categorical_native``,
``_categorical_lean`` and ``_categorical_general``; the buffer steps they share in
``_categorical_buffer``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from eligibility.torch import _categorical_general as general
from eligibility.torch import _categorical_lean as lean
from eligibility.torch import _categorical_native as native
from eligibility.torch import _common


class Call(NamedTuple):
    """One call's inputs: as given (``native`` reads them so), or checked (every other path)."""

    z: torch.Tensor
    a: torch.Tensor
    adv: torch.Tensor
    mask: torch.Tensor | None
    """The padding mask as given; checked, the bool mask ``valid`` of the leading shape."""
    beta: float
    reduction: str
    validate: bool


class Path(NamedTuple):
    """A way to compute the loss: where it applies, and its loss (None: it declines the call)."""

    name: str
    checked: bool
    """Whether it needs the checked inputs; the native path reads the raw ones by attribute."""
    applies: Callable[[Call], bool]
    loss: Callable[[Call], torch.Tensor | None]


PATHS: tuple[Path, ...] = (
    # validate, no mask, β = 0, CPU, ≤ 2²⁰ logits (2¹⁵ below V = 16): torch's C++ nodes, tried
    # before the input checks; declines a non-finite loss or a peaked step (π_a > 1 − 2⁻¹⁰)
    Path("native", False, lambda c: c.validate and c.mask is None, native.first),
    # under torch.compile or a torch.func transform: plain differentiable ops, no value checks
    Path("plain", True, lambda c: _common.transformed(c.z), general.plain_loss),
    # validate, no mask, β = 0, anywhere else: one buffer, one host read; declines a
    # non-finite loss (the general path names the problem or redoes underflowed rows)
    Path(
        "lean",
        True,
        lambda c: c.validate and c.beta == 0.0 and c.mask is None and c.z.numel() > 0,
        lambda c: lean.loss(c.z, c.a, c.adv, c.reduction),
    ),
    # everything else (a mask, β ≠ 0, validate=False) and what native or lean declined
    Path("general", True, lambda c: True, general.loss),
)
"""The paths of :func:`reinforce_loss`, in the order they are tried (docs/torch-losses.md)."""


def _check(c: Call) -> Call:
    """The inputs checked and converted (ValueError naming the bad one), ``mask`` as ``valid``."""
    _common.check_reduction(c.reduction)
    beta = _common.check_coef(c.beta)
    z = _common.float_tensor("logits", c.z)
    if z.dim() < 1 or z.shape[-1] == 0:
        raise ValueError(
            "logits must have a last axis of categories (shape (*L, V), V ≥ 1); "
            f"got {tuple(z.shape)}"
        )
    lead = z.shape[:-1]
    a = _common.index_actions(c.a, lead, "logits", z.shape)
    if a.dtype != torch.int64 or a.device != z.device:
        a = a.to(device=z.device, dtype=torch.int64)
    adv = _common.advantages_like(c.adv, lead, z)
    valid = None if c.mask is None else _common.valid_mask(c.mask, lead, z.device)
    return Call(z, a, adv, valid, beta, c.reduction, c.validate)


def reinforce_loss(
    logits: torch.Tensor,
    actions: torch.Tensor,
    advantages: torch.Tensor | float,
    *,
    reduction: str = "mean",
    mask: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    validate: bool = True,
) -> torch.Tensor:
    r"""REINFORCE loss ℓ = −A ln π(a) − β H(π), π = softmax(z); backward e in closed form.

    Per step: ℓ = −A (z_a − logsumexp z) − β H, and ∂ℓ/∂z = A (π − onehot(a)) + β π ⊙ (ln π + H),
    i.e. −A times the characteristic eligibility onehot(a) − π (Williams, 1992) plus β times
    −∂H/∂z. The backward runs in one buffer of the logits' shape, in place, with no autograd
    graph: it is the same number as the autograd of
    ``-(A * Categorical(logits=z).log_prob(a)).mean() - β Categorical(logits=z).entropy().mean()``,
    at a fraction of the time and memory for large V.

    Categories masked with a logit of −∞ have π = 0 and a gradient of exactly 0. Steps marked
    as padding (``mask`` False) contribute 0 to the loss and to every gradient, and their
    logits and actions are not looked at, so they may hold anything (even all −∞ rows).

    The advantages are constants: they are detached, and no gradient reaches them (train a
    learned baseline with its own loss). The actions are indices, with no gradient either.
    Checking the inputs costs one host sync per call (a device → host read of one flag).

    Args:
        logits: z, shape (*L, V): any leading shape L (batch, time, …), V categories last.
            Floating (float64, float32, bfloat16, float16), on any device.
        actions: a, integer tensor of shape L, 0 ≤ a < V on every real step.
        advantages: A, broadcastable to L (a number, or one per step), cast to the logits'
            dtype.
        reduction: "mean" (Σ ℓ over the real steps divided by their count N; 0 when N = 0),
            "sum" (Σ ℓ over the real steps), or "none" (ℓ of shape L, 0 on padding).
        mask: optional bool tensor broadcastable to L: True for a real step, False for padding.
        entropy_coef: β ≥ 0 typically, a python float; the loss subtracts β H(π) per step.
        validate: check the values (actions in range, logits, finite advantages) at the cost
            of one host sync per call; False skips every value check and the sync (for users
            who must avoid it, e.g. in a CUDA graph), and then a bad value gives NaN or ±∞.

    Returns:
        The loss: a scalar for "mean" and "sum", shape L for "none"; in the logits' dtype.

    Second derivatives (``create_graph=True``, Hessian-vector products) are exact. Under
    ``torch.compile`` and the ``torch.func`` transforms (grad, vmap, jvp) the loss is written in
    plain differentiable ops, without the value checks.

    Raises:
        ValueError: bad shapes or dtypes; an action outside 0…V−1; on a real step, logits that
            are all −∞, contain NaN or +∞, or give the taken action probability 0, or a
            non-finite advantage (the value checks only with ``validate``).
    """
    # tuple.__new__, not Call(...): the NamedTuple's own __new__ is Python code, and costs as
    # much here as the native path saves at the smallest sizes
    c = tuple.__new__(Call, (logits, actions, advantages, mask, entropy_coef, reduction, validate))
    checked = False
    for _, needs_check, applies, loss_of in PATHS:
        if needs_check and not checked:
            c, checked = _check(c), True
        if applies(c) and (loss := loss_of(c)) is not None:
            return loss
    raise AssertionError("the general path serves every call")  # pragma: no cover
