"""The public functions: check inputs once, then run the kernels of the distributions.

Each function takes the distribution's name and its parameters by keyword, with the names of
``torch.distributions``: ``probs``/``logits`` (exactly one) for bernoulli and categorical,
``total_count`` and ``probs``/``logits`` for multinomial, ``loc`` and ``scale`` for normal,
``concentration1`` and ``concentration0`` for beta. Arguments may be NumPy arrays, torch
tensors, or Python numbers and lists (which become float64 NumPy arrays); the answer comes
back in the caller's array library, dtype and device.

This module knows no distribution by name: it reads each one's
:class:`~eligibility.distributions.DistributionSpec` from
:data:`eligibility.distributions.REGISTRY` and calls the kernels the spec holds.

Where this differs from torch: a value whose probability is exactly zero (a category with
weight 0 or logit −∞, a Bernoulli outcome with p ∈ {0, 1} against it) raises ``ValueError``,
since its log-probability is −∞ and its eligibility does not exist. torch instead clamps the
probability to its float epsilon and returns a finite log-probability (−15.94 in float32) with
a zero gradient, which silently teaches nothing.

Precision: half-precision parameters (float16, bfloat16) are evaluated in float32 and the
answer rounded back to their dtype; multinomial ones in float64 (its log-factorials cancel).
Actions and counts never pass through the parameters' dtype: an index or a count is checked
as given and used as an integer. An answer that would overflow its dtype (an eligibility 1/w
of a weight below 1/DBL_MAX, say) raises ``ValueError`` instead of returning inf.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import array_api_compat
import numpy as np

from eligibility._array import (
    Array,
    array_namespace,
    as_float,
    device,
    float_dtype,
    is_array,
    namespace,
)
from eligibility.distributions import REGISTRY, DistributionSpec, Form, reject

DISTRIBUTIONS = tuple(REGISTRY)
"""The names the public functions take as ``dist``."""

PARAMETERS = {name: spec.parameters for name, spec in REGISTRY.items()}
"""The keyword parameters each distribution takes (torch's names)."""


@dataclass(frozen=True)
class Checked:
    """A distribution whose parameters passed the checks, as arrays of one namespace and dtype.

    :func:`check` makes one; its methods run the kernels without checking the parameters
    again (the value is still checked, since it changes from call to call). The public
    functions and the classes of :mod:`eligibility.objects` both go through these methods.
    """

    dist: str
    form: str
    """The name of the parametrisation: ``"probs"``, ``"logits"``, ``"loc-scale"``…"""
    params: dict[str, Array]
    total_count: int | None
    xp: Any
    compute_dtype: Any = None
    """The float dtype the kernels run in (the parameters' own, or wider)."""

    @property
    def spec(self) -> DistributionSpec:
        """The distribution's spec from the registry."""
        return REGISTRY[self.dist]

    @property
    def kernels(self) -> Form:
        """The kernels of this parametrisation."""
        return self.spec.forms[self.form]

    def _args(self) -> tuple[Any, ...]:
        """The kernels' arguments: the count (if any), then the parameters in compute dtype."""
        xp = self.xp
        arrs = [_cast(xp, self.params[p], self.compute_dtype) for p in self.kernels.params]
        if len(arrs) > 1:
            arrs = list(xp.broadcast_arrays(*arrs))
        return (*(() if self.total_count is None else (self.total_count,)), *arrs)

    def _answer(self, op: str, name: str, out: Array) -> Array:
        """``out`` in the parameters' dtype, or ValueError where it overflowed."""
        xp = self.xp
        dtype = self.params[self.kernels.params[0]].dtype
        out = _cast(xp, out, dtype)
        reject(
            xp,
            ~xp.isfinite(out),
            out,
            lambda i, v: (
                f"{op}: the answer w.r.t. {name} is {v} at index {i}: it overflows "
                f"{dtype} there (a weight, scale or concentration too close to 0 for the dtype); "
                "rescale the parameters or use another parametrisation"
            ),
        )
        return out

    def _each(self, op: str, outs: tuple[Array, ...]) -> dict[str, Array]:
        names = self.kernels.params
        return {p: self._answer(op, p, a) for p, a in zip(names, outs, strict=True)}

    def _run(self, kernel: Callable[..., Any], *value: Array) -> Any:
        with np.errstate(over="ignore"):  # an overflow is reported by _answer, not warned
            return kernel(*self._args(), *value)

    def log_prob(self, value: object) -> Array:
        """Log-probability ln π(value; θ) (see :func:`log_prob`)."""
        v = check_value(self, value)
        return self._answer("log_prob", self.form, self._run(self.kernels.log_prob, v))

    def score(self, value: object) -> dict[str, Array]:
        """Eligibility e = ∂ ln π(value; θ) / ∂θ, one array per parameter (see :func:`score`)."""
        v = check_value(self, value)
        return self._each("score", self._run(self.kernels.score, v))

    def entropy(self) -> Array:
        """Entropy H(π) (see :func:`entropy`)."""
        return self._answer("entropy", self.form, self._run(self.kernels.entropy))

    def entropy_grad(self) -> dict[str, Array]:
        """Entropy gradient ∂H/∂θ (see :func:`entropy_grad`)."""
        self.spec.check_entropy_grad(self.xp, self.params, self.form)
        return self._each("entropy_grad", self._run(self.kernels.entropy_grad))

    def fisher(self) -> Array:
        """Fisher information F = E[e eᵀ] (see :func:`fisher`)."""
        self.spec.check_fisher(self.xp, self.params, self.form)
        return self._answer("fisher", self.form, self._run(self.kernels.fisher))


def _cast(xp: Any, a: Array, dtype: Any) -> Array:
    return a if a.dtype == dtype else xp.astype(a, dtype)


def _compute_dtype(xp: Any, dtype: Any, least: str) -> Any:
    """``dtype``, or the float named ``least`` where ``dtype`` is narrower."""
    wide = getattr(xp, least)
    return wide if xp.finfo(dtype).bits < xp.finfo(wide).bits else dtype


def _is_complex(x: object) -> bool:
    if is_array(x):
        return array_namespace(x).isdtype(x.dtype, "complex floating")
    try:
        return bool(np.iscomplexobj(np.asarray(x)))
    except (TypeError, ValueError):
        return False  # a ragged list: the conversion below reports it


def _as_params(xp: Any, raw: dict[str, object], dtype: Any, dev: Any) -> dict[str, Array]:
    arrs = {}
    for name, x in raw.items():
        if _is_complex(x):
            raise ValueError(f"{name} must be real numbers, got complex {x!r}")
        try:
            arrs[name] = as_float(xp, x, dtype, dev)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{name} must be numbers (an array or a list), got {x!r}") from err
    for name, a in arrs.items():
        reject(xp, xp.isnan(a), a, lambda i, v, name=name: f"{name}: NaN at index {i}")
    return arrs


def _batch_shape(spec: DistributionSpec, arrs: dict[str, Array]) -> tuple[int, ...]:
    """The parameters' broadcast batch shape, or ValueError naming those that do not agree."""
    k = spec.param_event_dims
    shapes = {name: tuple(a.shape[: a.ndim - k]) for name, a in arrs.items()}
    try:
        return tuple(np.broadcast_shapes(*shapes.values()))
    except ValueError:
        said = " and ".join(f"{name} of batch shape {s}" for name, s in shapes.items())
        raise ValueError(f"{said} do not broadcast against each other") from None


def check(dist: str, params: dict[str, object], *, value: object = None) -> Checked:
    """Check a distribution's name and parameters; convert them to arrays of one namespace.

    Args:
        dist: the distribution's name, one of :data:`DISTRIBUTIONS`.
        params: its parameters by torch's names.
        value: the value that will be evaluated, if any; it is not checked here, but when no
            parameter is an array and it is, it chooses the namespace, device and float dtype,
            so that a torch value with parameters given as Python lists answers in torch.

    Returns:
        The checked parameters, whose methods evaluate the distribution.

    Raises:
        ValueError: an unknown distribution, a missing, extra or doubled parameter, or a
            parameter value outside its domain; the message names it and its index.
    """
    spec = REGISTRY.get(dist)
    if spec is None:
        raise ValueError(f"unknown distribution {dist!r}; choose one of {', '.join(DISTRIBUTIONS)}")
    unknown = sorted(set(params) - set(spec.parameters))
    if unknown:
        raise ValueError(
            f"{dist} got unexpected parameter(s) {', '.join(map(repr, unknown))}; "
            f"it takes {', '.join(a + '=' for a in spec.parameters)}"
        )
    form = spec.choose_form(params)
    raw = {name: params[name] for name in spec.forms[form].params}
    # The parameters decide the namespace, device and dtype; the value only when no parameter
    # is an array (a torch action with parameters given as lists answers in torch).
    like = tuple(raw.values())
    if not any(is_array(x) for x in like):
        like = (*like, value)
    xp = namespace(*like)
    dtype = float_dtype(xp, *like)
    arrs = _as_params(xp, raw, dtype, device(*like))
    _batch_shape(spec, arrs)
    compute = _compute_dtype(xp, dtype, spec.min_compute_dtype)
    n = None
    if spec.count_param is not None and spec.check_count is not None:
        n = spec.check_count(params.get(spec.count_param), compute)
    spec.check_params(xp, arrs, form)
    return Checked(dist=dist, form=form, params=arrs, total_count=n, xp=xp, compute_dtype=compute)


def _as_value(c: Checked, value: object) -> Array:
    """The value as an array of the parameters' namespace and device, in its own dtype."""
    xp = c.xp
    p = next(iter(c.params.values()))
    if (
        is_array(value)
        and not array_api_compat.is_numpy_array(value)
        and namespace(value) is not xp
    ):
        raise ValueError(
            f"value is a {type(value).__module__.split('.')[0]} array but the parameters are "
            f"{type(p).__module__.split('.')[0]} arrays; pass arrays of one library"
        )
    if _is_complex(value):
        raise ValueError(f"value must be real numbers, got complex {value!r}")
    try:
        # through NumPy, so that a Python float stays float64 and an int stays an int
        v = xp.asarray(value if is_array(value) else np.asarray(value), device=device(p))
        if xp.isdtype(v.dtype, "bool"):
            v = xp.astype(v, xp.int64)
        if not xp.isdtype(v.dtype, ("integral", "real floating")):
            raise TypeError(v.dtype)
    except (TypeError, ValueError) as err:
        raise ValueError(f"value must be a number or an array of numbers, got {value!r}") from err
    return v


def check_value(c: Checked, value: object) -> Array:
    """Check a value against the support of a checked distribution and convert it.

    Raises:
        ValueError: the value is outside the support (an index out of range or not an
            integer, counts that do not sum to n, a Bernoulli value other than 0/1), does not
            broadcast against the parameters' batch shape, or has probability exactly zero.
    """
    if value is None:
        raise ValueError(f"{c.dist} needs a value (the action taken) to evaluate")
    xp = c.xp
    v = _as_value(c, value)
    if xp.isdtype(v.dtype, "real floating"):
        reject(
            xp,
            xp.isnan(v) | xp.isinf(v),
            v,
            lambda i, x: f"value: {x} at index {i} is not a finite number",
        )
    spec = c.spec
    batch = _batch_shape(spec, c.params)
    vshape = tuple(v.shape[: v.ndim - spec.value_event_dims]) if v.ndim else ()
    try:
        np.broadcast_shapes(vshape, batch)
    except ValueError:
        raise ValueError(
            f"value's batch shape {vshape} does not broadcast against the parameters' "
            f"batch shape {batch}"
        ) from None
    return spec.check_value(c, v)


# the public functions ---------------------------------------------------------------------


def log_prob(dist: str, value: object, **params: object) -> Array:
    """Log-probability ln π(value; θ) (or log-density) of ``value``.

    Args:
        dist: one of :data:`DISTRIBUTIONS`.
        value: the action taken: 0/1, a category index, a count vector, or a real number;
            leading batch axes broadcast against the parameters'.
        **params: the distribution's parameters (torch's names).

    Returns:
        An array of the broadcast batch shape.

    Raises:
        ValueError: bad parameters or a value outside the support (see :func:`check`).
    """
    return check(dist, params, value=value).log_prob(value)


def score(dist: str, value: object, **params: object) -> dict[str, Array]:
    """The characteristic eligibility e = ∂ ln π(value; θ) / ∂θ, one array per parameter.

    Williams (1992) names this the characteristic eligibility; the REINFORCE update is
    Δθ = α (r − b) e.

    Args:
        dist: one of :data:`DISTRIBUTIONS`.
        value: the action taken (see :func:`log_prob`).
        **params: the distribution's parameters (torch's names).

    Returns:
        A dict from each differentiable parameter's name (``probs`` or ``logits``; ``loc``
        and ``scale``; ``concentration1`` and ``concentration0``) to an array of that
        parameter's shape broadcast against the value.

    Raises:
        ValueError: bad parameters or a value outside the support or of probability zero.
    """
    return check(dist, params, value=value).score(value)


def entropy(dist: str, **params: object) -> Array:
    """Entropy H(π) = −E[ln π(a)], exact (the multinomial one by summation over binomial laws)."""
    return check(dist, params).entropy()


def entropy_grad(dist: str, **params: object) -> dict[str, Array]:
    """Entropy gradient ∂H/∂θ, one array per differentiable parameter.

    Raises:
        ValueError: the gradient is unbounded there (a zero weight in ``probs``, a Bernoulli
            probability of exactly 0 or 1).
    """
    return check(dist, params).entropy_grad()


def fisher(dist: str, **params: object) -> Array:
    """The Fisher information F = E[e eᵀ] of the parametrisation.

    Shapes: ``batch + (K, K)`` for categorical and multinomial; the parameter's own shape for
    bernoulli (each unit is independent); ``batch + (2, 2)`` over (loc, scale) for normal and
    over (concentration1, concentration0) for beta.

    Raises:
        ValueError: the information is unbounded (a Bernoulli probability of 0 or 1).
    """
    return check(dist, params).fisher()
