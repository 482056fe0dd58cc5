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
