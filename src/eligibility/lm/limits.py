r"""What one update would allocate, estimated before anything is allocated.

A size past the machine is refused up front with the number it would need, instead of
hanging or being killed.

The estimate counts the float32 tensors of one update of N = prompts × G sequences of length
L = P + T_max (the longest prompt and the completion budget), a model of width d, n layers,
h heads and V logits:

    bytes ≈ 4 · (5 · |θ| + N · L · (n · (16 d + 2 h L) + 3 V))

5 · |θ|: the weights, their gradient, Adam's two moments and the frozen reference; per token
and layer about 16 d activations kept for the backward pass (attention's q, k, v and output,
the MLP's 4d hidden before and after its nonlinearity, two norms) and the h × L attention
scores with their softmax; per token the logits, their log-softmax and its gradient. It is a
floor (allocator overheads and temporaries come on top), so what it refuses cannot fit.
"""

from __future__ import annotations

import os


def update_bytes(
    n: int, length: int, *, d_model: int, n_layer: int, n_head: int, vocab: int, params: int
) -> int:
    """bytes ≈ 4 · (5 · |θ| + N · L · (n · (16 d + 2 h L) + 3 V)) (see the module docstring)."""
    per_token = n_layer * (16 * d_model + 2 * n_head * length) + 3 * vocab
    return 4 * (5 * params + n * length * per_token)


def tiny_params(vocab: int, positions: int, *, d_model: int, n_layer: int) -> int:
    """|θ| of the built-in transformer: embeddings, head and 12 d² (+ biases) per block."""
    return (2 * vocab + positions) * d_model + n_layer * (12 * d_model**2 + 13 * d_model)


def machine_bytes() -> int:
    """The machine's physical memory (a large number where the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 1 << 50


def check_fits(need: int, what: str) -> None:
    """A ValueError saying what ``what`` would need, when it is more than the machine has."""
    have = machine_bytes()
    if need > have:
        raise ValueError(
            f"{what} would need about {need / 2**30:,.1f} GiB for one update, more than this "
            f"machine's {have / 2**30:,.1f} GiB: lower it (or --prompts-per-batch, "
            "--group-size, --max-completion-length)"
        )


__all__ = ["check_fits", "machine_bytes", "tiny_params", "update_bytes"]
