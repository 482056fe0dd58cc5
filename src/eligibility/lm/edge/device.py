r"""Where a fine-tuning run's tensors live and in which precision its forward passes run.

- :func:`resolve` turns ``--device cpu|cuda|auto`` into a ``torch.device`` (``auto``: CUDA when
  torch sees one, else the CPU; under a launcher, a local rank of several on CUDA its own,
  ``cuda:LOCAL_RANK``, from the start: ``lm.edge.ranks.home``). The model, the reference, the
  sampler's buffers, the rewards and Adam's moments are made there; the run's randomness is
  its NumPy generators (a draw copies the [N, V] probabilities of one step to the host, see
  ``lm.sample``), so a resume on another device continues the same streams.
- :func:`resolved_dtype` turns ``--dtype auto`` into ``bfloat16`` where the device computes
  bf16 natively (:func:`native_bf16`: a CUDA GPU torch says has it, a CPU with AVX-512 BF16 or
  AMX), else ``float32``: where bf16 is emulated its products cost more than float32's. The
  config resolves it once, so config.json and the logs hold the concrete value and a resume on
  another machine keeps the run's precision.
- :func:`precision` is ``--dtype``: ``float32``, or ``bfloat16`` through ``torch.autocast``:
  the matrix products of the forward and backward passes in bf16, the weights, their
  gradients and Adam's moments float32 (master weights kept by construction: autocast casts a
  weight to bf16 for each product and its gradient comes back float32), without autocast's
  cast cache: the run holds one context open across its Adam steps, and the cache would keep
  the first bf16 copy of each weight. Measured against float32 and a bf16 copy of the weights
  in ``bench/lm/lm_bf16.py`` (docs/lm.md, *Sizes*).
- :func:`own_memory` copies the weights a CPU run trains into memory of the process's own: a
  model loaded from safetensors keeps them in a private mapping of the file, each page of which
  is copied at its first write, one fault at a time, in the first optimiser step.
- Checkpoints stream the tensors themselves (``lm.learner``): safetensors copies each off its
  device as it writes it, and a restore copies each into the parameter (or Adam's state) where
  it lives, so a checkpoint written on one device resumes on another.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import torch

from eligibility.lm.edge.ranks import home
from eligibility.torch.hardware import native_bf16

DEVICES = ("cpu", "cuda", "auto")
"""The values of ``--device``."""

DTYPES = ("auto", "float32", "bfloat16")
"""The values of ``--dtype`` (``auto``: :func:`resolved_dtype`)."""


def resolve(device: str) -> torch.device:
    """The ``torch.device`` of ``--device`` (``auto``: CUDA when available, else the CPU).

    A local rank of several on CUDA runs on its own, ``cuda:LOCAL_RANK``
    (``lm.edge.ranks.home``); one process on CUDA on the device torch picks.

    Raises:
        ValueError: ``cuda`` on a machine where torch sees no CUDA device, or another name;
            a launcher's ``LOCAL_RANK`` past the CUDA devices torch sees.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "--device cuda: torch sees no CUDA device here (torch "
            f"{torch.__version__}, cuda {torch.version.cuda}); use --device cpu or auto"
        )
    if device not in ("cpu", "cuda"):
        raise ValueError(f"--device {device!r}: give one of {', '.join(DEVICES)}")
    return home(torch.device(device))


def resolved_dtype(dtype: str, device: str | torch.device) -> str:
    """``--dtype`` as the precision a run on ``--device`` uses (``auto``: :func:`_auto`).

    Args:
        dtype: a value of :data:`DTYPES`; ``float32`` and ``bfloat16`` come back as given.
        device: a value of :data:`DEVICES`, resolved (:func:`resolve`) for ``auto`` only; or
            the ``torch.device`` it resolved to.

    Raises:
        ValueError: ``auto`` on ``--device cuda`` where torch sees no CUDA device.
    """
    if dtype != "auto":
        return dtype
    return _auto(device if isinstance(device, torch.device) else resolve(device))


def _auto(where: torch.device) -> str:
    """``bfloat16`` where ``where`` computes it natively (:func:`native_bf16`), else ``float32``."""
    return "bfloat16" if native_bf16(where) else "float32"


def precision(dtype: str, device: torch.device) -> contextlib.AbstractContextManager[None]:
    """The context the run's forward and backward passes run in (see the module docstring).

    Raises:
        ValueError: a dtype other than those of :data:`DTYPES`.
    """
    if dtype == "auto":
        dtype = _auto(device)
    if dtype == "float32":
        return contextlib.nullcontext()
    if dtype == "bfloat16":
        # no cast cache: autocast keeps a weight's bf16 copy until its outermost context exits,
        # and the run holds one context open across its Adam steps (stale weights otherwise)
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False)
    raise ValueError(f"--dtype {dtype!r}: give one of {', '.join(DTYPES)}")


def own_memory(params: Iterable[torch.Tensor]) -> None:
    """Each CPU tensor of ``params`` given a copy of its values as its own storage, in place.

    ``transformers`` loads safetensors weights as views of a private mapping of the file: the
    first write to each 4 KiB page of it copies that page, one fault at a time. That write is
    the first optimiser step's: SmolLM2-135M's took 1.3 s against 0.1 s for the next ones on
    2 threads, and 0.35 s once its weights had been copied (the copy: 0.16 s). The values are
    the same (and a tied weight, one parameter, stays one): nothing computed from them changes.
    """
    with torch.no_grad():
        for p in params:
            if p.device.type == "cpu":
                p.data = p.data.clone()


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (CUDA's kernels run after the host returns)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


__all__ = [
    "DEVICES",
    "DTYPES",
    "native_bf16",
    "own_memory",
    "precision",
    "resolve",
    "resolved_dtype",
    "synchronize",
]
