r"""Where a fine-tuning run's tensors live and in which precision its forward passes run.

- :func:`resolve` turns ``--device cpu|cuda|auto`` into a ``torch.device`` (``auto``: CUDA when
  torch sees one, else the CPU). The model, the reference, the sampler's buffers, the rewards
  and Adam's moments are made there; the run's randomness is its NumPy generators (a draw
  copies the [N, V] probabilities of one step to the host, see ``lm.sample``), so a resume on
  another device continues the same streams.
- :func:`precision` is ``--dtype``: ``float32``, or ``bfloat16`` through ``torch.autocast``:
  the matrix products of the forward and backward passes in bf16, the weights, their
  gradients and Adam's moments float32 (master weights kept by construction: autocast casts a
  weight to bf16 for each product and its gradient comes back float32). Chosen over a bf16
  copy of the model beside float32 masters by measurement (``bench/lm_bf16.py``; docs/lm.md).
- :func:`to_host` is the one way a tensor leaves the device for a file: checkpoints and exports
  call it, so none of them calls ``.numpy()`` on a CUDA tensor.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

DEVICES = ("cpu", "cuda", "auto")
"""The values of ``--device``."""

DTYPES = ("float32", "bfloat16")
"""The values of ``--dtype``."""


def resolve(device: str) -> torch.device:
    """The ``torch.device`` of ``--device`` (``auto``: CUDA when available, else the CPU).

    Raises:
        ValueError: ``cuda`` on a machine where torch sees no CUDA device, or another name.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "--device cuda: torch sees no CUDA device here (torch "
            f"{torch.__version__}, cuda {torch.version.cuda}); use --device cpu or auto"
        )
    if device not in ("cpu", "cuda"):
        raise ValueError(f"--device {device!r}: give one of {', '.join(DEVICES)}")
    return torch.device(device)


def precision(dtype: str, device: torch.device) -> contextlib.AbstractContextManager[None]:
    """The context the run's forward and backward passes run in (see the module docstring).

    Raises:
        ValueError: a dtype other than those of :data:`DTYPES`.
    """
    if dtype == "float32":
        return contextlib.nullcontext()
    if dtype == "bfloat16":
        # no cast cache: autocast keeps a weight's bf16 copy until its outermost context exits,
        # and the run holds one context open across its Adam steps (stale weights otherwise)
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False)
    raise ValueError(f"--dtype {dtype!r}: give one of {', '.join(DTYPES)}")


def of(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s first parameter (the CPU for a model without any)."""
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def to_host(tensor: torch.Tensor) -> np.ndarray:
    """A NumPy copy of ``tensor`` on the CPU, detached, whatever its device.

    bfloat16 (which NumPy lacks) is widened to float32; the run's weights and moments are
    float32 in every ``--dtype`` (autocast keeps them so), so a checkpoint never holds one.
    """
    t = tensor.detach()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.cpu().numpy().copy()


def to_device(array: np.ndarray, like: torch.Tensor | torch.device) -> torch.Tensor:
    """``array`` as a tensor on ``like``'s device (a copy: the array may be read-only)."""
    where = like if isinstance(like, torch.device) else like.device
    return torch.from_numpy(np.array(array)).to(where)


__all__ = [
    "DEVICES",
    "DTYPES",
    "of",
    "precision",
    "resolve",
    "to_device",
    "to_host",
]
