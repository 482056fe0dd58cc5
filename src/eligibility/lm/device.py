r"""Where a fine-tuning run's tensors live and in which precision its forward passes run.

- :func:`resolve` turns ``--device cpu|cuda|auto`` into a ``torch.device`` (``auto``: CUDA when
  torch sees one, else the CPU). The model, the reference, the sampler's buffers, the rewards
  and Adam's moments are made there; the run's randomness is its NumPy generators (a draw
  copies the [N, V] probabilities of one step to the host, see ``lm.sample``), so a resume on
  another device continues the same streams.
- :func:`precision` is ``--dtype``: ``float32``, or ``bfloat16`` through ``torch.autocast``:
  the matrix products of the forward and backward passes in bf16, the weights, their
  gradients and Adam's moments float32 (master weights kept by construction: autocast casts a
  weight to bf16 for each product and its gradient comes back float32), without autocast's
  cast cache: the run holds one context open across its Adam steps, and the cache would keep
  the first bf16 copy of each weight. Measured against float32 and a bf16 copy of the weights
  in ``bench/lm_bf16.py`` (docs/lm.md, *Sizes*).
- Checkpoints stream the tensors themselves (``lm.learner``): safetensors copies each off its
  device as it writes it, and a restore copies each into the parameter (or Adam's state) where
  it lives, so a checkpoint written on one device resumes on another.
"""

from __future__ import annotations

import contextlib

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


__all__ = [
    "DEVICES",
    "DTYPES",
    "precision",
    "resolve",
]
