"""Array plumbing shared by the math: one namespace for NumPy and torch (array API standard).

Every function in :mod:`eligibility.distributions` is written once against the array API
standard (through ``array-api-compat``), so the same code runs on NumPy arrays and on torch
tensors, on any device, and answers in the caller's own array library, dtype and device.
"""

from __future__ import annotations

from typing import Any

import array_api_compat
import numpy as np

Array = Any
"""An array of any library that speaks the array API standard (NumPy, torch)."""


def is_array(x: object) -> bool:
    """True for NumPy arrays and scalars, torch tensors and other array-API arrays."""
    return array_api_compat.is_array_api_obj(x)


def namespace(*xs: object) -> Any:
    """The array namespace of the arrays among ``xs`` (NumPy when there are none).

    Python scalars and lists carry no namespace; they are converted to the namespace of the
    arrays they travel with, or to NumPy.

    Raises:
        ValueError: the arrays come from different libraries (say, NumPy and torch).
    """
    arrays = [x for x in xs if is_array(x)]
    if not arrays:
        return array_api_compat.array_namespace(np.empty(0))
    try:
        return array_api_compat.array_namespace(*arrays)
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
