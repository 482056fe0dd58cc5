"""What counts as one reward, or one value a reward function logs: a finite real number."""

from __future__ import annotations

import math
import numbers

import numpy as np


def as_reward(value: object) -> float | None:
    """A reward as a float (None stays None), or a ValueError saying what it is instead.

    Real numbers of any type are rewards: ``bool``, ``int``, ``float``, NumPy scalars and
    one-element NumPy arrays or torch tensors.
    """
    if value is None:
        return None
    if hasattr(value, "numel") and hasattr(value, "item"):  # torch
        if value.numel() != 1 or value.is_complex():
            raise ValueError(f"a tensor of shape {tuple(value.shape)}, not one number")
        value = value.item()
    elif isinstance(value, np.ndarray | np.generic):
        if value.size != 1 or not np.isrealobj(value) or value.dtype.kind not in "biuf":
            raise ValueError(f"an array of dtype {value.dtype} and shape {value.shape}")
        value = value.item()
    if not isinstance(value, numbers.Real):
        raise ValueError(f"a {type(value).__name__} ({str(value)[:40]!r}), not a number")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"{out} (return None for a completion it does not apply to)")
    return out


__all__ = ["as_reward"]
