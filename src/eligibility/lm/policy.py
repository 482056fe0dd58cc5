r"""The model as the training loop sees it: one object, built once at the edge.

    ℓᵢ,ₜ = ln π_θ(oᵢ,ₜ | q, oᵢ,<ₜ)   (the scorer),   oᵢ,ₜ ~ π_θ(· | q, oᵢ,<ₜ)   (the sampler)

The loop (``trainer``, ``learner``, ``sample``, ``micro``, ``evaluation``) asks a
:class:`Policy` for the forward the sampler and the scorer run, the reference of the KL, the
trainable parameters, a training pass (LoRA's dropout on), the state a checkpoint holds, the
exported model, and the device and precision its passes run in. Which model it is (the built-in
one, a ``transformers`` model, a ``peft`` wrapper, a factory's module), on which device and in
which dtype, is known here and in :mod:`eligibility.lm.edge` only: the loop's modules import
neither (a test holds it).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from eligibility.lm.edge import device as devices
from eligibility.lm.edge import hf, lora
from eligibility.lm.edge.forward import Forward
from eligibility.lm.edge.forward import forward_of as _forward_of
from eligibility.lm.edge.ranks import Ranks


class Policy:
    """A causal LM placed on its device, with its forward chosen and held once.

    Args:
        model: the network (float32, dropout off), LoRA adapters already on it if any.
        device: where its tensors live (``torch.device``; default: where they are).
        dtype: the precision of its passes, ``float32`` or ``bfloat16`` (``auto`` is resolved
            against ``device`` here: the run saves what it chose).
        ranks: the run's ranks (``lm.edge.ranks``: one process unless a launcher started
            several); every rank holds the whole model, its trainable weights rank 0's.
    """

    def __init__(
        self,
        model: nn.Module,
        device: torch.device | None = None,
        dtype: str = "float32",
        ranks: Ranks | None = None,
    ) -> None:
        if device is not None:
            model = model.to(device)
        self.model = model
        self.device = device if device is not None else _device_of(model)
        self.dtype = devices.resolved_dtype(dtype, self.device.type)
        self.ranks = ranks or Ranks()
        self.ranks.broadcast_tensors(self.params)  # one policy, whatever each rank built

    @functools.cached_property
    def forward(self) -> Forward:
        """The forward the sampler and the scorer run (``lm.edge.forward``: held once)."""
        return _forward_of(self.model)

    @property
    def params(self) -> list[nn.Parameter]:
        """The parameters a step moves (the adapters alone under LoRA)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    @property
    def adapters(self) -> bool:
        """Whether only LoRA adapters train (the checkpoint holds them alone)."""
        return lora.is_lora(self.model)

    def precision(self) -> contextlib.AbstractContextManager[None]:
        """The context every forward and backward pass of the run runs in (``--dtype``)."""
        return devices.precision(self.dtype, self.device)

    @contextlib.contextmanager
    def training(self) -> Iterator[None]:
        """A gradient pass: LoRA's dropout on inside; the model otherwise stays in eval."""
        with lora.dropout_on(self.model):
            yield

    def reference(self) -> Policy:
        """The frozen initial policy of the KL: adapters off (LoRA) or a frozen copy."""
        return Policy(lora.reference(self.model), self.device, self.dtype, self.ranks)

    def checkpointed(self) -> dict[str, torch.Tensor]:
        """The tensors a checkpoint holds: the adapters under LoRA, else every weight."""
        return lora.checkpointed(self.model)

    def load_checkpointed(self, d: Mapping[str, torch.Tensor], prefix: str = "") -> None:
        """Copy ``prefix + name`` of ``d`` into each of :meth:`checkpointed`'s tensors.

        A name missing from ``d`` is left as it is (a tied weight shares a saved tensor's
        storage), except under LoRA, where every adapter must be there.

        Raises:
            ValueError: under LoRA, an adapter missing from ``d``.
        """
        targets = self.checkpointed() if self.adapters else self.model.state_dict(keep_vars=True)
        if self.adapters and (missing := [k for k in targets if f"{prefix}{k}" not in d]):
            raise ValueError(f"the checkpoint lacks the adapters {missing[:3]}")
        with torch.no_grad():
            for k, v in targets.items():
                if f"{prefix}{k}" in d:
                    v.copy_(d[f"{prefix}{k}"])

    @property
    def exportable(self) -> bool:
        """Whether the policy has a Hugging Face format (the base model's, under LoRA)."""
        return lora.exportable(self.model)

    def save(self, directory: Path, tokenizer: Any) -> None:
        """Save the policy as the kind of directory it came from (adapters alone under LoRA)."""
        hf.save_pretrained(self.model, tokenizer, directory, overwrite=True)


def lora_fields(peft_config: Any) -> dict[str, Any]:
    """A ``peft.LoraConfig``'s r, α, dropout and target modules as the config's ``lora_*``."""
    return lora.fields_of(peft_config)


def forward_of(model: nn.Module | Policy) -> Forward:
    """The forward of a :class:`Policy` (chosen once), or of a bare model (found now)."""
    return model.forward if isinstance(model, Policy) else _forward_of(model)


def device_of(model: nn.Module | Policy) -> torch.device:
    """Where a policy's (or a model's) parameters are: the CPU for a model without any."""
    return model.device if isinstance(model, Policy) else _device_of(model)


def _device_of(model: nn.Module) -> torch.device:
    return next((p.device for p in model.parameters()), torch.device("cpu"))


__all__ = ["Forward", "Policy", "device_of", "forward_of", "lora_fields"]
