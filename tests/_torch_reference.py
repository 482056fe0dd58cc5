"""Reference reductions for the torch loss tests (autograd through plain torch ops)."""

from __future__ import annotations

import torch


def reduce_reference(ell: torch.Tensor, reduction: str, mask: torch.Tensor | None) -> torch.Tensor:
    """Padding zeroed, then "none" as is, "sum", or "mean" over the real steps (0 if none)."""
    if mask is not None:
        ell = torch.where(mask, ell, torch.zeros_like(ell))
    if reduction == "none":
        return ell
    if reduction == "sum":
        return ell.sum()
    n = ell.numel() if mask is None else int(mask.sum())
    return ell.sum() / max(n, 1)
