"""What a device computes in hardware: the one place the library asks (its losses, ``lm``)."""

from __future__ import annotations

import torch


def native_bf16(where: torch.device) -> bool:
    """Whether ``where`` computes bf16 products in hardware rather than emulating them.

    CUDA: ``torch.cuda.is_bf16_supported`` without its emulation (compute capability 8.0 on,
    or ROCm). CPU: torch's own feature query, ``torch.cpu.get_capabilities()``: AVX-512 BF16
    or AMX BF16 (oneDNN's native bf16 kernels). Anything else: False.
    """
    if where.type == "cuda":
        try:
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except TypeError:  # an older torch: no argument, and no emulation counted
            return bool(torch.cuda.is_bf16_supported())
    if where.type == "cpu":
        query = getattr(torch.cpu, "get_capabilities", None)
        if query is None:  # an older torch: the same flags, one query each
            return bool(
                getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()
                or getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
            )
        caps = query()
        return bool(caps.get("avx512_bf16", False) or caps.get("amx_bf16", False))
    return False


FEW_ROWS = 32
"""The most rows a product has for :func:`product_layout` to lay its weight out column-major."""


def product_layout(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """``weight`` W [out, in] laid out as the device reads it best in products ``x Wᵀ`` of ``rows``.

    On the CPU in float32, at most :data:`FEW_ROWS` rows (a decode step's): column-major (its
    transpose contiguous, a copy; ``W.t()`` is then the matrix MKL's sgemm multiplies by
    untransposed, where it reads a row-major W transposed, several times slower at so few
    rows). At a hundred rows or more the two layouts take the same time or row-major less,
    and the products' numbers are the same. Elsewhere (bf16, whose products oneDNN packs
    itself; CUDA) and at more rows: W as it is. For weights kept across a sampling's steps, so
    the copy is paid once; a column-major W is returned as it is.
    """
    few = weight.device.type == "cpu" and weight.dtype == torch.float32 and rows <= FEW_ROWS
    if few and weight.dim() == 2 and weight.stride() != (1, weight.shape[0]):  # no view made
        return weight.t().contiguous().t()
    return weight
