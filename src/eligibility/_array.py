"""Array plumbing shared by the math: one namespace for NumPy and torch (array API standard).

Every function in :mod:`eligibility.distributions` is written once against the array API
standard (through ``array-api-compat``), so the same code runs on NumPy arrays and on torch
tensors, on any device, and answers in the caller's own array library, dtype and device.
"""

from __future__ import annotations

import math
from typing import Any

import array_api_compat
import numpy as np

Array = Any
"""An array of any library that speaks the array API standard (NumPy, torch)."""


def is_array(x: object) -> bool:
    """True for NumPy arrays and scalars, torch tensors and other array-API arrays."""
    return array_api_compat.is_array_api_obj(x)


_NUMPY = (np.ndarray, np.generic)


def array_namespace(*arrays: Array) -> Any:
    """The array API namespace of ``arrays``: NumPy's own for NumPy arrays, the wrapper for torch.

    NumPy implements the standard itself since 2.0; ``array-api-compat`` wraps the others.

    NumPy's own namespace is taken because the wrapper's import reads every NumPy submodule
    (``numpy.f2py``, ``numpy.ma``): a tenth of a second in every process that does the math on
    NumPy (``eligibility explain`` among them).

    Raises:
        TypeError: the arrays come from different libraries.
    """
    if all(isinstance(x, _NUMPY) for x in arrays):
        return np
    return array_api_compat.array_namespace(*arrays)


def namespace(*xs: object) -> Any:
    """The array namespace of the arrays among ``xs`` (NumPy when there are none).

    Python scalars and lists carry no namespace; they are converted to the namespace of the
    arrays they travel with, or to NumPy.

    Raises:
        ValueError: the arrays come from different libraries (say, NumPy and torch).
    """
    arrays = [x for x in xs if is_array(x)]
    if not arrays:
        return np
    try:
        return array_namespace(*arrays)
    except TypeError as err:
        kinds = sorted({type(x).__module__.split(".")[0] for x in arrays})
        raise ValueError(
            f"arrays from different libraries were mixed ({', '.join(kinds)}); "
            "pass all parameters and the value as arrays of one library"
        ) from err


def device(*xs: object) -> Any:
    """The device of the first array among ``xs`` (None when there is none)."""
    for x in xs:
        if is_array(x):
            return array_api_compat.device(x)
    return None


def float_dtype(xp: Any, *xs: object) -> Any:
    """The floating dtype the math runs in: the widest float among the arrays, else float64."""
    floats = [x.dtype for x in xs if is_array(x) and xp.isdtype(x.dtype, "real floating")]
    if not floats:
        return xp.float64
    return xp.result_type(*floats)


def as_float(xp: Any, x: object, dtype: Any, dev: Any) -> Array:
    """``x`` as a floating array of the given namespace, dtype and device."""
    if is_array(x) and getattr(x, "dtype", None) == dtype and array_api_compat.device(x) == dev:
        return x
    if is_array(x) and not array_api_compat.is_numpy_array(x) and namespace(x) is not xp:
        raise ValueError("arrays from different libraries were mixed")
    return xp.asarray(x, dtype=dtype, device=dev)


def to_numpy(x: object) -> np.ndarray:
    """A host NumPy copy of ``x`` (used on error paths and for printing, never in the math)."""
    if array_api_compat.is_torch_array(x):
        return x.detach().cpu().numpy()  # type: ignore[union-attr]
    return np.asarray(x)


def first_index(mask: Array) -> tuple[int, ...]:
    """The index (as a tuple) of the first True entry of a boolean array."""
    hits = np.argwhere(to_numpy(mask))
    return tuple(int(i) for i in hits[0])


def safe_log(xp: Any, x: Array) -> Array:
    """Safe log: ln x where x > 0, and 0 elsewhere, for terms that a zero factor multiplies away.

    Evaluating ``log 0`` and then masking it would still warn (NumPy) and poison gradients
    (torch); taking the log of 1 instead keeps both quiet.
    """
    return xp.log(xp.where(x > 0, x, xp.ones_like(x)))


def xlogx(xp: Any, x: Array) -> Array:
    """The product x ln x, with the limit 0 ln 0 = 0."""
    return x * safe_log(xp, x)


def eye(xp: Any, k: int, like: Array) -> Array:
    """The k×k identity in the dtype and device of ``like``."""
    return xp.eye(k, dtype=like.dtype, device=array_api_compat.device(like))


def matrix_2x2(xp: Any, m00: Array, m01: Array, m10: Array, m11: Array) -> Array:
    """The 2×2 matrices [[m₀₀, m₀₁], [m₁₀, m₁₁]], one per entry: shape S of each gives S×2×2."""
    return xp.stack([xp.stack([m00, m01], axis=-1), xp.stack([m10, m11], axis=-1)], axis=-2)


# special functions (not in the array API standard) -------------------------------------------

_SHIFT = 16.0
"""Arguments are raised above this by recurrence before the asymptotic series (error < 1e-17)."""


def _is_torch(xp: Any) -> bool:
    return array_api_compat.is_torch_namespace(xp)


def lgamma(xp: Any, x: Array) -> Array:
    """ln Γ(x) for x > 0: torch's own, or libm's ``lgamma`` entry by entry on NumPy."""
    if _is_torch(xp):
        import torch

        return torch.lgamma(x)
    out = np.frompyfunc(math.lgamma, 1, 1)(np.asarray(x, dtype=np.float64))
    return xp.asarray(np.asarray(out, dtype=np.float64), dtype=x.dtype)


def _shifted(xp: Any, x: Array, term: Any) -> tuple[Array, Array]:
    """(x raised to ≥ 16 by x → x + 1, the sum of ``term(x)`` over the steps taken)."""
    acc = xp.zeros_like(x)
    for _ in range(int(_SHIFT)):
        small = x < _SHIFT
        acc = acc + xp.where(small, term(xp.where(small, x, xp.ones_like(x))), xp.zeros_like(x))
        x = xp.where(small, x + 1.0, x)
    return x, acc


def digamma(xp: Any, x: Array) -> Array:
    """Digamma ψ(x) = d ln Γ(x) / dx for x > 0.

    On NumPy: ψ(x) = ψ(x + k) − Σ 1/(x + j) up to x + k ≥ 16, then the asymptotic series
    ψ(y) ≈ ln y − 1/(2y) − 1/(12y²) + 1/(120y⁴) − 1/(252y⁶) + 1/(240y⁸) − 1/(132y¹⁰).
    """
    if _is_torch(xp):
        import torch

        return torch.special.digamma(x)
    y, acc = _shifted(xp, x, lambda t: 1.0 / t)
    r = 1.0 / (y * y)
    series = r * (1 / 12 - r * (1 / 120 - r * (1 / 252 - r * (1 / 240 - r / 132))))
    return xp.log(y) - 0.5 / y - series - acc


def trigamma(xp: Any, x: Array) -> Array:
    """Trigamma ψ'(x) = d²ln Γ(x) / dx² for x > 0.

    On NumPy and on torch float64: ψ'(x) = ψ'(x + k) + Σ 1/(x + j)² up to x + k ≥ 16, then the
    asymptotic series ψ'(y) ≈ 1/y + 1/(2y²) + 1/(6y³) − 1/(30y⁵) + 1/(42y⁷) − 1/(30y⁹) + 5/(66y¹¹).
    Other torch dtypes use ``torch.special.polygamma(1, x)``.
    """
    if _is_torch(xp) and x.dtype != xp.float64:
        import torch

        return torch.special.polygamma(1, x)
    # not torch's float64 polygamma(1, ·): 3.7e-10 relative off at x = 2, which Beta's entropy
    # gradient (a difference of trigamma terms 34 times its size) magnifies to 1e-8
    y, acc = _shifted(xp, x, lambda t: 1.0 / (t * t))
    r = 1.0 / (y * y)
    series = (1.0 / 6 - r * (1 / 30 - r * (1 / 42 - r * (1 / 30 - r * 5 / 66)))) * r / y
    return 1.0 / y + 0.5 * r + series + acc
