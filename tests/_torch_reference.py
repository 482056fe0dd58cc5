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


# reinforce_loss takes one of its paths by size and options (eligibility.torch.categorical.PATHS):
# torch's native ops for small CPU calls (cross_entropy, or logsumexp − z_a for many rows of
# V < 16: "native-lse"), the lean in-place node for the common case, and the general node
# (padding masks, the entropy term, validate=False, and the fallback of the other two). The
# parity tests run each one by forcing it: the table without the paths before it, and the
# native path's size limits lifted.
CATEGORICAL_PATHS = ("native", "native-lse", "lean", "general")


def force_categorical_path(path: str, monkeypatch) -> None:
    """Make reinforce_loss take ``path`` wherever that path applies."""
    from eligibility.torch import _categorical_native as native
    from eligibility.torch import categorical as cat

    monkeypatch.setattr(native, "fits", lambda z: path.startswith("native"))
    if path == "native-lse":
        monkeypatch.setattr(native, "SMALL_V_LSE_ROWS", 0)
        monkeypatch.setattr(native, "SMALL_V_LSE_MAX_THREADS", 1 << 30)
    skip = {"lean": ("native",), "general": ("native", "lean")}.get(path, ())
    monkeypatch.setattr(cat, "PATHS", tuple(p for p in cat.PATHS if p.name not in skip))
