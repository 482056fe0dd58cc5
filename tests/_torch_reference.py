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


# reinforce_loss takes one of three paths by size and options (see eligibility.torch.categorical):
# torch's native ops for small CPU calls (cross_entropy, or logsumexp − z_a for many rows of
# V < 16: "native-lse"), the lean in-place node for the common case, and the general node
# (padding masks, the entropy term, validate=False, and the fallback of the other two). The
# parity tests run each one by forcing it.
CATEGORICAL_PATHS = ("native", "native-lse", "lean", "general")


def force_categorical_path(path: str, monkeypatch) -> None:
    """Make reinforce_loss take ``path`` wherever that path applies."""
    from eligibility.torch import categorical as cat

    monkeypatch.setattr(cat, "_native", lambda z: path.startswith("native"))
    if path == "native-lse":
        monkeypatch.setattr(cat, "SMALL_V_LSE_ROWS", 0)
        monkeypatch.setattr(cat, "SMALL_V_LSE_MAX_THREADS", 1 << 30)
    if path == "general":
        monkeypatch.setattr(cat, "_lean_loss", lambda *args: None)
