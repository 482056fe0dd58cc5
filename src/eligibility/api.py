"""The public functions: check inputs once, then run the kernels of the distributions.

Each function takes the distribution's name and its parameters by keyword, with the names of
``torch.distributions``: ``probs``/``logits`` (exactly one) for bernoulli and categorical,
``total_count`` and ``probs``/``logits`` for multinomial, ``loc`` and ``scale`` for normal.
Arguments may be NumPy arrays, torch tensors, or Python numbers and lists (which become
float64 NumPy arrays); the answer comes back in the caller's array library, dtype and device.

Where this differs from torch: a value whose probability is exactly zero (a category with
weight 0 or logit −∞, a Bernoulli outcome with p ∈ {0, 1} against it) raises ``ValueError``,
since its log-probability is −∞ and its eligibility does not exist. torch instead clamps the
probability to its float epsilon and returns a finite log-probability (−15.94 in float32) with
a zero gradient, which silently teaches nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from array_api_compat import is_numpy_array

from eligibility._array import (
    Array,
    as_float,
    device,
    first_index,
    float_dtype,
    is_array,
    namespace,
    to_numpy,
)
from eligibility.distributions import bernoulli, categorical, multinomial, normal

DISTRIBUTIONS = ("bernoulli", "categorical", "multinomial", "normal")
"""The names the public functions take as ``dist``."""

PARAMETERS = {
    "bernoulli": ("probs", "logits"),
    "categorical": ("probs", "logits"),
    "multinomial": ("total_count", "probs", "logits"),
    "normal": ("loc", "scale"),
}
"""The keyword parameters each distribution takes (torch's names)."""

_MISSING: Any = object()


@dataclass(frozen=True)
class Checked:
    """A distribution whose parameters passed the checks, as arrays of one namespace and dtype.

    :func:`check` makes one; its methods run the kernels without checking the parameters
    again (the value is still checked, since it changes from call to call). The public
    functions and the classes of :mod:`eligibility.objects` both go through these methods.
    """

    dist: str
    form: str
    """``"probs"`` or ``"logits"`` for the discrete distributions, ``"loc-scale"`` for normal."""
    params: dict[str, Array]
    total_count: int | None
    xp: Any

    def log_prob(self, value: object) -> Array:
        """Log-probability ln π(value; θ) (see :func:`log_prob`)."""
        return _KERNELS[(self.dist, self.form)].log_prob(self, check_value(self, value))

    def score(self, value: object) -> dict[str, Array]:
        """Eligibility e = ∂ ln π(value; θ) / ∂θ, one array per parameter (see :func:`score`)."""
        return _KERNELS[(self.dist, self.form)].score(self, check_value(self, value))

    def entropy(self) -> Array:
        """Entropy H(π) (see :func:`entropy`)."""
        return _KERNELS[(self.dist, self.form)].entropy(self)

    def entropy_grad(self) -> dict[str, Array]:
        """Entropy gradient ∂H/∂θ (see :func:`entropy_grad`)."""
        if self.form == "probs":
            a = self.params["probs"]
            xp = self.xp
            if self.dist == "bernoulli":
                bad = (a <= 0) | (a >= 1)
                _reject(
                    xp,
                    bad,
                    a,
                    lambda i, v: (
                        f"probs: {v} at index {i}; the entropy "
                        "gradient is unbounded at p = 0 or 1 (use logits)"
                    ),
                )
            else:
                _reject(
                    xp,
                    a <= 0,
                    a,
                    lambda i, v: (
                        f"probs: weight 0 at index {i}; the "
                        "entropy gradient is unbounded at a zero weight (use logits, where it "
                        "is 0)"
                    ),
                )
        return _KERNELS[(self.dist, self.form)].entropy_grad(self)

    def fisher(self) -> Array:
        """Fisher information F = E[e eᵀ] (see :func:`fisher`)."""
        if self.dist == "bernoulli" and self.form == "probs":
            a = self.params["probs"]
            _reject(
                self.xp,
                (a <= 0) | (a >= 1),
                a,
                lambda i, v: (
                    f"probs: {v} at index {i}; "
                    "the Fisher information 1/(p(1−p)) is unbounded at p = 0 or 1 (use logits)"
                ),
            )
        return _KERNELS[(self.dist, self.form)].fisher(self)


def _fmt(x: object) -> str:
    v = np.asarray(x).item()
    return f"{v:g}" if isinstance(v, float) else str(v)


def _index(idx: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(i) for i in idx) + ")" if len(idx) != 1 else f"({idx[0]},)"


def _reject(xp: Any, mask: Array, arr: Array, message: Callable[[str, str], str]) -> None:
    """Raise ValueError if any entry of ``mask`` is set, naming the first such index and value."""
    if bool(xp.any(mask)):
        idx = first_index(mask)
        value = to_numpy(arr)[idx] if arr.ndim else to_numpy(arr)
        msg = message(_index(idx), _fmt(value))
        if not idx:  # a scalar has no index worth naming
            msg = msg.replace(" at batch index ()", "").replace(" at index ()", "")
        raise ValueError(msg)


def _take_form(dist: str, params: dict[str, object]) -> str:
    allowed = PARAMETERS[dist]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"{dist} got unexpected parameter(s) {', '.join(map(repr, unknown))}; "
            f"it takes {', '.join(a + '=' for a in allowed)}"
        )
    if dist == "normal":
        missing = [p for p in ("loc", "scale") if params.get(p) is None]
        if missing:
            raise ValueError(f"normal needs loc= and scale=; missing {', '.join(missing)}")
        return "loc-scale"
    given = [p for p in ("probs", "logits") if params.get(p) is not None]
    if len(given) != 1:
        state = "both" if given else "neither"
        raise ValueError(f"{dist} takes exactly one of probs= or logits=, got {state}")
    return given[0]


def _total_count(params: dict[str, object]) -> int:
    n = params.get("total_count")
    if n is None:
        raise ValueError("multinomial needs total_count= (the number of draws n, an integer ≥ 0)")
    arr = to_numpy(n)
    if arr.ndim != 0:
        raise ValueError(f"total_count must be a single integer, got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"total_count must be an integer ≥ 0, got {n!r}")
    if not np.isfinite(arr) or arr != np.floor(arr) or arr < 0:
        raise ValueError(f"total_count must be an integer ≥ 0, got {_fmt(arr)}")
    return int(arr)


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
    if dist not in PARAMETERS:
        raise ValueError(f"unknown distribution {dist!r}; choose one of {', '.join(DISTRIBUTIONS)}")
    form = _take_form(dist, params)
    n = _total_count(params) if dist == "multinomial" else None
    names = ("loc", "scale") if form == "loc-scale" else (form,)
    raw = {name: params[name] for name in names}
    # The parameters decide the namespace, device and dtype; the value only when no parameter
    # is an array (a torch action with parameters given as lists answers in torch).
    like = tuple(raw.values())
    if not any(is_array(x) for x in like):
        like = (*like, value)
    xp = namespace(*like)
    dtype = float_dtype(xp, *like)
    dev = device(*like)
    arrs = {}
    for name, x in raw.items():
        try:
            arrs[name] = as_float(xp, x, dtype, dev)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{name} must be numbers (an array or a list), got {x!r}") from err
    for name, a in arrs.items():
        _reject(xp, xp.isnan(a), a, lambda i, v, name=name: f"{name}: NaN at index {i}")
    if dist in ("categorical", "multinomial"):
        a = arrs[form]
        if a.ndim == 0:
            raise ValueError(f"{form} must have a last axis of categories, got a scalar")
        if a.shape[-1] == 0:
            raise ValueError(f"{form} must have at least one category, got an empty last axis")
        if form == "probs":
            _reject(
                xp,
                a < 0,
                a,
                lambda i, v: (
                    f"probs: negative weight {v} at index {i}; "
                    "weights must be ≥ 0 (they are renormalised by their sum)"
                ),
            )
            _reject(
                xp,
                xp.isinf(a),
                a,
                lambda i, v: f"probs: infinite weight at index {i}; weights must be finite",
            )
            with np.errstate(over="ignore"):  # an overflowing sum is reported just below
                s = xp.sum(a, axis=-1)
            _reject(
                xp,
                s <= 0,
                s,
                lambda i, v: (
                    f"probs: the weights sum to 0 at batch index "
                    f"{i}; at least one weight per row must be positive"
                ),
            )
            _reject(
                xp,
                xp.isinf(s),
                s,
                lambda i, v: f"probs: the weights sum to infinity at batch index {i}; rescale them",
            )
        else:
            _reject(
                xp,
                a == xp.inf,
                a,
                lambda i, v: (
                    f"logits: +inf at index {i}; logits must "
                    "be finite or −inf (−inf masks a category)"
                ),
            )
            _reject(
                xp,
                xp.all(a == -xp.inf, axis=-1),
                xp.max(a, axis=-1),
                lambda i, v: (
                    f"logits: every entry is −inf at batch index {i}; at least "
                    "one category must be possible"
                ),
            )
    elif dist == "bernoulli":
        a = arrs[form]
        if form == "probs":
            _reject(
                xp,
                (a < 0) | (a > 1),
                a,
                lambda i, v: (
                    f"probs: {v} at index {i} is "
                    "outside [0, 1]; a Bernoulli probability must lie in [0, 1]"
                ),
            )
        else:
            _reject(
                xp,
                xp.isinf(a),
                a,
                lambda i, v: (
                    f"logits: {v} at index {i}; Bernoulli "
                    "logits must be finite (use probs=0 or 1 for a deterministic unit)"
                ),
            )
    else:
        mu, sigma = arrs["loc"], arrs["scale"]
        _reject(xp, xp.isinf(mu), mu, lambda i, v: f"loc: {v} at index {i}; loc must be finite")
        _reject(
            xp,
            ~(sigma > 0) | xp.isinf(sigma),
            sigma,
            lambda i, v: f"scale: {v} at index {i}; scale must be finite and > 0",
        )
    return Checked(dist=dist, form=form, params=arrs, total_count=n, xp=xp)


def _batch_shape(c: Checked) -> tuple[int, ...]:
    shapes = [a.shape for a in c.params.values()]
    if c.dist in ("categorical", "multinomial"):
        shapes = [s[:-1] for s in shapes]
    return tuple(np.broadcast_shapes(*shapes))


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
    p = next(iter(c.params.values()))
    dev = device(p)
    if is_array(value) and not is_numpy_array(value) and namespace(value) is not xp:
        raise ValueError(
            f"value is a {type(value).__module__.split('.')[0]} array but the parameters are "
            f"{type(p).__module__.split('.')[0]} arrays; pass arrays of one library"
        )
    try:
        v = as_float(xp, value, p.dtype, dev)
    except (TypeError, ValueError) as err:
        raise ValueError(f"value must be a number or an array of numbers, got {value!r}") from err
    _reject(
        xp,
        xp.isnan(v) | xp.isinf(v),
        v,
        lambda i, x: f"value: {x} at index {i} is not a finite number",
    )
    batch = _batch_shape(c)
    vshape = v.shape[:-1] if c.dist == "multinomial" else v.shape
    try:
        np.broadcast_shapes(vshape, batch)
    except ValueError:
        raise ValueError(
            f"value's batch shape {tuple(vshape)} does not broadcast against the parameters' "
            f"batch shape {batch}"
        ) from None
    if c.dist == "categorical":
        k = p.shape[-1]
        _reject(
            xp,
            v != xp.floor(v),
            v,
            lambda i, x: f"value: {x} at index {i} is not an integer category index",
        )
        _reject(
            xp,
            (v < 0) | (v >= k),
            v,
            lambda i, x: f"value: category {x} at index {i} is outside {{0, …, {k - 1}}}",
        )
        a = xp.astype(v, xp.int64)
        w = c.params[c.form]
        w_a = categorical._pick(w, a)
        zero = (w_a <= 0) if c.form == "probs" else (w_a == -xp.inf)
        what = "weight 0" if c.form == "probs" else "logit −inf"
        torch_does = (
            "torch clamps π to eps instead and returns a zero gradient"
            if c.form == "probs"
            else "torch returns ln π = −∞ with a finite gradient instead"
        )
        _reject(
            xp,
            zero,
            xp.broadcast_to(v, zero.shape),
            lambda i, x: (
                f"value: category {x} "
                f"at index {i} has probability zero ({what}), so ln π is −∞ and its "
                f"eligibility does not exist ({torch_does})"
            ),
        )
        return a
    if c.dist == "multinomial":
        w = c.params[c.form]
        k = w.shape[-1]
        if v.ndim == 0 or v.shape[-1] != k:
            raise ValueError(
                f"value must be a count vector of length {k} (one count per "
                f"category), got shape {tuple(v.shape)}"
            )
        _reject(
            xp,
            (v != xp.floor(v)) | (v < 0),
            v,
            lambda i, x: f"value: count {x} at index {i} is not an integer ≥ 0",
        )
        total = xp.sum(v, axis=-1)
        n = c.total_count
        _reject(
            xp,
            total != n,
            total,
            lambda i, x: (
                f"value: counts sum to {x} at batch index "
                f"{i}, but total_count is {n}; the counts must sum to total_count"
            ),
        )
        impossible = (v > 0) & ((w <= 0) if c.form == "probs" else (w == -xp.inf))
        _reject(
            xp,
            impossible,
            xp.broadcast_to(v, impossible.shape),
            lambda i, x: (
                f"value: "
                f"count {x} at index {i} falls on a category of probability zero, so ln P is "
                "−∞ and its eligibility does not exist"
            ),
        )
        return v
    if c.dist == "bernoulli":
        _reject(
            xp,
            (v != 0) & (v != 1),
            v,
            lambda i, x: f"value: {x} at index {i} is not 0 or 1; a Bernoulli value is 0 or 1",
        )
        if c.form == "probs":
            pr = c.params["probs"]
            zero = ((v == 1) & (pr <= 0)) | ((v == 0) & (pr >= 1))
            _reject(
                xp,
                zero,
                xp.broadcast_to(v, zero.shape),
                lambda i, x: (
                    f"value: {x} at "
                    f"index {i} has probability zero (probs is {1 - int(float(x))} there), so its "
                    "eligibility does not exist"
                ),
            )
    return v


# the public functions ---------------------------------------------------------------------


def log_prob(dist: str, value: object, **params: object) -> Array:
    """Log-probability ln π(value; θ) (or log-density) of ``value``.

    Args:
        dist: one of ``"bernoulli"``, ``"categorical"``, ``"multinomial"``, ``"normal"``.
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
        dist: one of ``"bernoulli"``, ``"categorical"``, ``"multinomial"``, ``"normal"``.
        value: the action taken (see :func:`log_prob`).
        **params: the distribution's parameters (torch's names).

    Returns:
        A dict from each differentiable parameter's name (``probs`` or ``logits``; ``loc``
        and ``scale``) to an array of that parameter's shape broadcast against the value.

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
    bernoulli (each unit is independent); ``batch + (2, 2)`` over (loc, scale) for normal.

    Raises:
        ValueError: the information is unbounded (a Bernoulli probability of 0 or 1).
    """
    return check(dist, params).fisher()


# dispatch ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Kernels:
    log_prob: Callable[[Checked, Array], Array]
    score: Callable[[Checked, Array], dict[str, Array]]
    entropy: Callable[[Checked], Array]
    entropy_grad: Callable[[Checked], dict[str, Array]]
    fisher: Callable[[Checked], Array]


def _discrete(mod: Any, form: str) -> _Kernels:
    """The kernels ``<op>_<form>`` of a discrete module (multinomial's take n first).

    Looked up on each call, so the kernel module stays the one place the math lives.
    """

    def call(op: str, c: Checked, *rest: Array) -> Array:
        p = c.params[form]
        args = (p,) if c.total_count is None else (c.total_count, p)
        return getattr(mod, f"{op}_{form}")(*args, *rest)

    return _Kernels(
        log_prob=lambda c, v: call("log_prob", c, v),
        score=lambda c, v: {form: call("score", c, v)},
        entropy=lambda c: call("entropy", c),
        entropy_grad=lambda c: {form: call("entropy_grad", c)},
        fisher=lambda c: call("fisher", c),
    )


def _sigma(c: Checked) -> Array:
    """σ broadcast against μ: the normal's entropy and Fisher information depend on σ alone."""
    return c.xp.broadcast_arrays(c.params["loc"], c.params["scale"])[1]


def _normal_entropy_grad(c: Checked) -> dict[str, Array]:
    sigma = _sigma(c)
    return {"loc": c.xp.zeros_like(sigma), "scale": normal.entropy_grad_scale(sigma)}


def _normal_score(c: Checked, y: Array) -> dict[str, Array]:
    xp = c.xp
    mu, sigma, y = xp.broadcast_arrays(c.params["loc"], c.params["scale"], y)
    return {"loc": normal.score_loc(mu, sigma, y), "scale": normal.score_scale(mu, sigma, y)}


_KERNELS: dict[tuple[str, str], _Kernels] = {
    ("bernoulli", "probs"): _discrete(bernoulli, "probs"),
    ("bernoulli", "logits"): _discrete(bernoulli, "logits"),
    ("categorical", "probs"): _discrete(categorical, "probs"),
    ("categorical", "logits"): _discrete(categorical, "logits"),
    ("multinomial", "probs"): _discrete(multinomial, "probs"),
    ("multinomial", "logits"): _discrete(multinomial, "logits"),
    ("normal", "loc-scale"): _Kernels(
        log_prob=lambda c, v: normal.log_prob(c.params["loc"], c.params["scale"], v),
        score=_normal_score,
        entropy=lambda c: normal.entropy(_sigma(c)),
        entropy_grad=_normal_entropy_grad,
        fisher=lambda c: normal.fisher(_sigma(c)),
    ),
}
