r"""What one update would allocate, estimated before anything is allocated.

A size past the machine is refused up front with the number it would need, instead of
hanging or being killed.

The estimate counts the tensors of one update of N = prompts × G sequences of length
L = P + T_max (the longest prompt and the completion budget) scored and backpropagated M at a
time (``--micro-batch-size``; M = N without it), a model of width d, n layers, h heads and V
logits:

    bytes ≈ 4 · c · |θ| + b · M · L · (n · (16 d + 2 h L) + 3 V)

c · |θ|: c = 5 float32 copies for a full fine-tune (the weights, their gradient, Adam's two moments
and the frozen reference; 4 without a KL term, β = 0), c = 1 under LoRA (the weights; the adapters,
their gradient and moments and no reference copy are small beside them); b = 4 bytes per activation
in float32, 2 under ``--dtype bfloat16`` (autocast keeps the products' inputs in bf16); per token
and layer about 16 d activations kept for the backward pass (attention's q, k, v and output, the
MLP's 4d hidden before and after its nonlinearity or a gated MLP's gate and up, two norms) and
the h × L attention scores with their softmax; per token the logits, their log-softmax and its
gradient. It is a floor (allocator overheads and temporaries come on top), so what it refuses
cannot fit.

Sharded (``--fsdp``) over W ranks, each rank holds 1/W of the c copies, and whole only the
weights it gathers at once: γ, the root's own (embeddings, final norm, head) and two blocks
(the one computing and the one prefetched), with their gradients before the reduce-scatter
under a full fine-tune (k = 2; k = 1 under LoRA, whose frozen weights have none):

    bytes per rank ≈ 4 · (c · |θ| / W + k · γ) + b · M · L · (n · (16 d + 2 h L) + 3 V)
"""

from __future__ import annotations

import os
from typing import Protocol


class Sizes(Protocol):
    """A model's sizes as the estimate reads them (``lm.edge.loaders.Dims`` gives them).

    Attributes:
        vocab: V, the logits a position gives.
        d_model, n_layer, n_head: d, n and h.
        params: |θ|.
        positions: the positions the model holds (None: it does not say).
        root: the parameters outside the blocks (what a sharded rank gathers whole besides two
            blocks, :func:`held_whole`).
        blocks: each block's parameters.
    """

    vocab: int
    d_model: int
    n_layer: int
    n_head: int
    params: int
    positions: int | None
    root: int
    blocks: tuple[int, ...]


def update_bytes(
    n: int,
    length: int,
    dims: Sizes,
    *,
    copies: int = 5,
    activation_bytes: int = 4,
    shards: int = 1,
    whole: int = 2,
    held: int = 0,
) -> int:
    """bytes ≈ 4 · (c · |θ| / W + k · γ) + b · M · L · (n · (16 d + 2 h L) + 3 V) (module doc).

    ``n``: the sequences scored at once (M); ``dims``: d, n, h, V and |θ|; ``copies``: c
    (0: the weights aside); ``activation_bytes``: b; ``shards``: W, the ranks the weights are
    sharded over (1: not sharded, and no γ term); ``whole``: k; ``held``: γ, the weights a
    sharded rank holds whole at once.
    """
    d, h = dims.d_model, dims.n_head
    per_token = dims.n_layer * (16 * d + 2 * h * length) + 3 * dims.vocab
    kept = -(-copies * dims.params // shards) + (whole * held if shards > 1 else 0)
    return 4 * kept + activation_bytes * n * length * per_token


def sample_bytes(n: int, length: int, dims: Sizes, *, activation_bytes: int = 4) -> int:
    """bytes ≈ b · n · L · (2 n_layer d + 16 d + 2 h L) + 12 n V: sampling n rows, no gradient.

    Each row keeps its keys and values at every layer (2 d per token and layer, b bytes each);
    the prompts' pass holds one layer's activations at a time (16 d and the h × L scores per
    token, as :func:`update_bytes` counts them per layer); each step's logits, their
    log-softmax and the draw's CDF are V floats of 4 bytes a row. The weights are not counted:
    they are the model's, held already.
    """
    d = dims.d_model
    per_token = 2 * dims.n_layer * d + 16 * d + 2 * dims.n_head * length
    return activation_bytes * n * length * per_token + 12 * n * dims.vocab


def eval_rows(rows: int, length: int, dims: Sizes, activation_bytes: int = 4) -> int:
    """The rows an evaluation samples at once: as many as one update's activations allow.

        n = max(M, ⌊M · A_update / A_sample⌋)

    A_update: the activations :func:`update_bytes` counts for one of the update's M rows
    scored at once (the weights aside); A_sample: :func:`sample_bytes`'s for one row. The
    update of M rows is known to fit (it is checked before the run and runs), and the
    evaluation's n rows need no more than its activations: about 8 · M for a deep model,
    whose update keeps 16 d a token and layer for the backward pass where the sampler keeps 2 d.

    Args:
        rows: M, the sequences an update scores at once.
        length: L, the longest prompt + T_max.
        dims: the model's sizes.
        activation_bytes: b (:func:`sizes`).
    """
    update = update_bytes(1, length, dims, copies=0, activation_bytes=activation_bytes)
    one = sample_bytes(1, length, dims, activation_bytes=activation_bytes)
    return max(rows, rows * update // one)


def sizes(*, lora: bool, dtype: str, reference: bool = True, shards: int = 1) -> dict[str, int]:
    """The ``copies``, ``activation_bytes``, ``shards`` and ``whole`` of :func:`update_bytes`.

    ``reference``: the run keeps a frozen copy of the weights for its KL term; ``shards``: W
    under ``--fsdp`` (1 without).
    """
    copies = 1 if lora else 4 + int(reference)
    bytes_ = 2 if dtype == "bfloat16" else 4
    return {"copies": copies, "activation_bytes": bytes_, "shards": shards, "whole": 2 - lora}


def held_whole(root: int, blocks: list[int]) -> int:
    """γ = |θ_root| + 2 max_b |θ_b|: what a sharded rank holds whole at once (module doc).

    ``root``: the parameters outside the blocks; ``blocks``: each block's.
    """
    return root + 2 * max(blocks, default=0)


def machine_bytes() -> int:
    """The machine's physical memory (a large number where the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 1 << 50


def check(dims: Sizes, length: int, n: int, what: str, **sizes: int) -> None:
    """An update of ``n`` sequences of ``length`` tokens at once fits the machine.

    ``sizes``: :func:`sizes`'s ``copies``, ``activation_bytes``, ``shards`` and ``whole``.
    (The model's positions are checked where it is loaded, ``lm.edge.loaders.load``.)

    Raises:
        ValueError: more memory than the machine has (naming how much).
    """
    whole = held_whole(dims.root, list(dims.blocks)) if sizes.get("shards", 1) > 1 else 0
    check_fits(update_bytes(n, length, dims, held=whole, **sizes), what)


def check_fits(need: int, what: str) -> None:
    """A ValueError saying what ``what`` would need, when it is more than the machine has."""
    have = machine_bytes()
    if need > have:
        raise ValueError(
            f"{what} would need about {need / 2**30:,.1f} GiB for one update, more than this "
            f"machine's {have / 2**30:,.1f} GiB: lower it (or --prompts-per-batch, "
            "--group-size, --max-completion-length)"
        )


__all__ = [
    "Sizes",
    "check",
    "check_fits",
    "eval_rows",
    "held_whole",
    "machine_bytes",
    "sample_bytes",
    "sizes",
    "update_bytes",
]
