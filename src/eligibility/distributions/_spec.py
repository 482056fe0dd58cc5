"""What a distribution is, as data: its parameters, their constraints, its support and kernels.

Each module of :mod:`eligibility.distributions` ends with one :class:`DistributionSpec`, and the
registry in ``eligibility.distributions.REGISTRY`` maps names to them. :mod:`eligibility.api`
checks inputs and calls the kernels through the spec alone, so adding a distribution is one
module and one registry line. The spec also carries what the layers above need to show the
distribution without naming it: its command-line flags (:class:`Flag`), the LaTeX of the
symbols its derivation writes, the ``torch.distributions`` class that cross-checks it, and
example command lines of ``eligibility explain``.

Kernel convention: a :class:`Form` (one parametrisation, e.g. ``probs`` or ``logits``) holds
five functions called with the checked arguments ``(*args, value)``, where ``args`` is the
count parameter (``total_count``, if the distribution has one) followed by the form's
differentiable parameters in order. ``score`` and ``entropy_grad`` return one array per
differentiable parameter, in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from eligibility._array import Array, first_index, to_numpy


class CheckedLike(Protocol):
    """The checked distribution a spec's value checks receive (see ``eligibility.api.Checked``)."""

    dist: str
    form: str
    params: dict[str, Array]
    total_count: int | None
    xp: Any
    compute_dtype: Any


@dataclass(frozen=True)
class Form:
    """One parametrisation of a distribution: its differentiable parameters and its kernels."""

    params: tuple[str, ...]
    """The differentiable parameters, in the order the kernels take them."""
    log_prob: Callable[..., Array]
    score: Callable[..., tuple[Array, ...]]
    entropy: Callable[..., Array]
    entropy_grad: Callable[..., tuple[Array, ...]]
    fisher: Callable[..., Array]
    view: str = ""
    """The parameters with their symbols, as a title names them (``"logits z"``)."""


Kernels = tuple[Callable[..., Array], ...]
"""A single-parameter form's five kernels in :class:`Form`'s order: log_prob, score, entropy,
entropy_grad, fisher (score and entropy_grad returning one array)."""


def probs_and_logits(probs: Kernels, logits: Kernels, views: tuple[str, str]) -> dict[str, Form]:
    """The two forms of a distribution given by ``probs`` or by ``logits``, from their kernels."""

    def form(name: str, kernels: Kernels, view: str) -> Form:
        log_prob, score, entropy, entropy_grad, fisher = kernels
        return Form((name,), log_prob, one(score), entropy, one(entropy_grad), fisher, view)

    return {"probs": form("probs", probs, views[0]), "logits": form("logits", logits, views[1])}


@dataclass(frozen=True)
class Flag:
    """A parameter as ``eligibility explain`` takes it: ``--name METAVAR``, and what it means."""

    metavar: str
    meaning: str


WEIGHTS_OR_LOGITS = {
    "probs": Flag("P", "relative weights w, renormalised by their sum"),
    "logits": Flag("Z", "logits z, π = softmax(z) (instead of --probs)"),
}
"""The flags of a softmax unit given by relative weights or by logits (categorical, multinomial)."""


def one(kernel: Callable[..., Array]) -> Callable[..., tuple[Array, ...]]:
    """A kernel that returns one array, as one that returns a 1-tuple (one parameter)."""

    def wrapped(*args: Array) -> tuple[Array, ...]:
        return (kernel(*args),)

    wrapped.__name__ = wrapped.__qualname__ = getattr(kernel, "__name__", "kernel")
    wrapped.__doc__ = kernel.__doc__
    wrapped.__wrapped__ = kernel  # type: ignore[attr-defined]
    return wrapped


def _no_check(xp: Any, arrs: dict[str, Array], form: str) -> None:
    """No extra domain restriction (the default for entropy_grad and fisher)."""


@dataclass(frozen=True)
class DistributionSpec:
    """Everything the dispatcher needs to know about one distribution.

    Attributes:
        name: the name the public functions take as ``dist``.
        parameters: every keyword parameter it takes (torch's names).
        forms: its parametrisations, by name (``"probs"``, ``"logits"``, ``"loc-scale"``…).
        choose_form: picks the form from the given parameters, or raises ``ValueError``.
        param_event_dims: trailing axes of each differentiable parameter that are not batch
            axes (1 for a vector of category weights, 0 for a scalar parameter).
        value_event_dims: trailing axes of a value that are not batch axes.
        support: the support in words, for docs and messages.
        check_params: raises ``ValueError`` for a parameter outside its domain.
        check_value: checks a value (an array in its own dtype) against the support and
            returns it as the kernels take it; raises ``ValueError`` otherwise.
        check_entropy_grad: raises where the entropy gradient is unbounded.
        check_fisher: raises where the Fisher information is unbounded.
        count_param: the name of an integer, non-differentiable parameter (``total_count``).
        check_count: checks it and returns it as a Python int, given the compute dtype.
        min_compute_dtype: the narrowest float the kernels run in; narrower parameters are
            evaluated in it and the answers rounded back to their dtype.
        flags: every parameter as ``eligibility explain`` takes it (its metavar and meaning).
        torch_name: the class of ``torch.distributions`` that the autograd cross-check
            replays the distribution in (same parameter names).
        value_is_index: the value is an index (torch takes it as int64, not as a float).
        tex: LaTeX of the symbols and words its derivation writes that the shared table of
            :mod:`eligibility.explain.notation` does not know (the normal's density N, say).
        examples: argument lines of ``eligibility explain <name>``, shown in its ``--help``
            and run, in every format, by the tests (a ``#`` starts a comment).
        picture: what ``eligibility explain --plot`` draws (``eligibility.explain.plot``'s
            ``PICTURES``): ``"categories"``, π and the gradients over the categories, or
            ``"score-curves"``, the score against each parameter around the given point.
    """

    name: str
    parameters: tuple[str, ...]
    forms: dict[str, Form]
    choose_form: Callable[[dict[str, object]], str]
    param_event_dims: int
    value_event_dims: int
    support: str
    check_params: Callable[[Any, dict[str, Array], str], None]
    check_value: Callable[[CheckedLike, Array], Array]
    check_entropy_grad: Callable[[Any, dict[str, Array], str], None] = field(default=_no_check)
    check_fisher: Callable[[Any, dict[str, Array], str], None] = field(default=_no_check)
    count_param: str | None = None
    check_count: Callable[[object, Any], int] | None = None
    min_compute_dtype: str = "float32"
    flags: dict[str, Flag] = field(default_factory=dict)
    torch_name: str = ""
    value_is_index: bool = False
    tex: dict[str, str] = field(default_factory=dict)
    examples: tuple[str, ...] = ()
    picture: str = "score-curves"


# shared checks -------------------------------------------------------------------------------


def fmt(x: object) -> str:
    """A number as a message shows it (``%g`` for floats)."""
    v = np.asarray(x).item()
    return f"{v:g}" if isinstance(v, float) else str(v)


def _index(idx: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(i) for i in idx) + ")" if len(idx) != 1 else f"({idx[0]},)"


def reject(xp: Any, mask: Array, arr: Array, message: Callable[[str, str], str]) -> None:
    """Raise ValueError if any entry of ``mask`` is set, naming the first such index and value."""
    if bool(xp.any(mask)):
        idx = first_index(mask)
        value = to_numpy(arr)[idx] if arr.ndim else to_numpy(arr)
        msg = message(_index(idx), fmt(value))
        if not idx:  # a scalar has no index worth naming
            msg = msg.replace(" at batch index ()", "").replace(" at index ()", "")
        raise ValueError(msg)


def one_of(dist: str, names: tuple[str, str]) -> Callable[[dict[str, object]], str]:
    """A form chooser for exactly one of two views (``probs``/``logits``), by name."""

    def choose(params: dict[str, object]) -> str:
        given = [p for p in names if params.get(p) is not None]
        if len(given) != 1:
            state = "both" if given else "neither"
            raise ValueError(f"{dist} takes exactly one of {names[0]}= or {names[1]}=, got {state}")
        return given[0]

    return choose


def all_of(dist: str, names: tuple[str, ...], form: str) -> Callable[[dict[str, object]], str]:
    """A form chooser for a distribution that needs every one of ``names``."""

    def choose(params: dict[str, object]) -> str:
        missing = [p for p in names if params.get(p) is None]
        if missing:
            need = " and ".join(p + "=" for p in names)
            raise ValueError(f"{dist} needs {need}; missing {', '.join(missing)}")
        return form

    return choose


def check_integral(xp: Any, v: Array, what: str) -> Array:
    """``v`` as int64 after checking its entries are integers (an integer dtype passes as is)."""
    if xp.isdtype(v.dtype, "integral"):
        return xp.astype(v, xp.int64)
    reject(xp, v != xp.floor(v), v, lambda i, x: f"value: {x} at index {i} is not {what}")
    reject(
        xp,
        xp.abs(v) > 2.0**62,
        v,
        lambda i, x: f"value: {x} at index {i} is too large to be {what}",
    )
    return xp.astype(v, xp.int64)


def check_positive_finite(xp: Any, arrs: dict[str, Array], names: tuple[str, ...]) -> None:
    """Every named parameter finite and > 0."""
    for name in names:
        a = arrs[name]
        reject(
            xp,
            ~(a > 0) | xp.isinf(a),
            a,
            lambda i, v, name=name: f"{name}: {v} at index {i}; {name} must be finite and > 0",
        )


def check_weights_or_logits(xp: Any, arrs: dict[str, Array], form: str) -> None:
    """Category weights (``probs``: ≥ 0, finite, positive finite sum) or ``logits`` (< +∞)."""
    a = arrs[form]
    if a.ndim == 0:
        raise ValueError(f"{form} must have a last axis of categories, got a scalar")
    if a.shape[-1] == 0:
        raise ValueError(f"{form} must have at least one category, got an empty last axis")
    if form == "logits":
        reject(
            xp,
            a == xp.inf,
            a,
            lambda i, v: (
                f"logits: +inf at index {i}; logits must be finite or −inf (−inf masks a category)"
            ),
        )
        reject(
            xp,
            xp.all(a == -xp.inf, axis=-1),
            xp.max(a, axis=-1),
            lambda i, v: (
                f"logits: every entry is −inf at batch index {i}; at least one "
                "category must be possible"
            ),
        )
        return
    reject(
        xp,
        a < 0,
        a,
        lambda i, v: (
            f"probs: negative weight {v} at index {i}; weights must be ≥ 0 "
            "(they are renormalised by their sum)"
        ),
    )
    reject(
        xp,
        xp.isinf(a),
        a,
        lambda i, v: f"probs: infinite weight at index {i}; weights must be finite",
    )
    with np.errstate(over="ignore"):  # an overflowing sum is reported just below
        s = xp.sum(a, axis=-1)
    reject(
        xp,
        s <= 0,
        s,
        lambda i, v: (
            f"probs: the weights sum to 0 at batch index {i}; at least one weight "
            "per row must be positive"
        ),
    )
    reject(
        xp,
        xp.isinf(s),
        s,
        lambda i, v: f"probs: the weights sum to infinity at batch index {i}; rescale them",
    )


def check_no_zero_weight(xp: Any, arrs: dict[str, Array], form: str) -> None:
    """The entropy gradient w.r.t. weights is unbounded at a zero weight."""
    if form == "probs":
        a = arrs["probs"]
        reject(
            xp,
            a <= 0,
            a,
            lambda i, v: (
                f"probs: weight 0 at index {i}; the entropy gradient is unbounded at "
                "a zero weight (use logits, where it is 0)"
            ),
        )
