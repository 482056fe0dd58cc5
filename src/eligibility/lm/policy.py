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
import dataclasses
import gc
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from eligibility.lm.edge import device as devices
from eligibility.lm.edge import hf, lora
from eligibility.lm.edge import ranks as collective
from eligibility.lm.edge.forward import Forward
from eligibility.lm.edge.forward import forward_of as _forward_of
from eligibility.lm.edge.ranks import Ranks
from eligibility.lm.tokenizer import Tokenizer

if TYPE_CHECKING:
    from peft import LoraConfig


class Policy:
    """A causal LM placed on its device, with its forward chosen and held once, where placed.

    Args:
        model: the network (float32, dropout off).
        device: where its tensors live (``torch.device``; default: where they are): a run's
            as the set-up resolved it, a local rank's own (``lm.edge.ranks.home``); on the
            CPU its trainable weights are copied into memory of the process's own
            (``lm.edge.device.own_memory``: not a loaded file's mapping, which the first
            optimiser step would copy a page at a time).
        dtype: the precision of its passes, ``float32`` or ``bfloat16`` (a run's ``--dtype
            auto`` is resolved on its device once, by the set-up: ``lm.build.resolve``).
        ranks: the run's ranks (``lm.edge.ranks``: one process unless a launcher started
            several), or how they are formed from the device's type (``Ranks.from_env``:
            the launcher's, joined here, on the rank's own device as ``device`` is); every
            rank holds the whole model, its trainable weights rank 0's.
        sharded: FSDP2 over the ranks (``--fsdp``): each rank holds a shard of the weights,
            their gradients and Adam's moments; the forward is the model's own call, in which
            each block gathers its weights.
        reference: keep the frozen initial policy of the KL (:meth:`reference`): under
            sharding a full fine-tune's copy is made and sharded before training moves it.
        adapters: LoRA's settings (``lm.edge.lora.wrap``'s keywords): its adapters are put on
            the frozen model here (None: a full fine-tune, or adapters already on it).
        compile_decode: the sampler's captured decode step compiled (``--compile-decode``).
    """

    def __init__(
        self,
        model: nn.Module,
        device: torch.device | None = None,
        dtype: str = "float32",
        ranks: Ranks | Callable[[str], Ranks] | None = None,
        sharded: bool = False,
        reference: bool = False,
        adapters: Mapping[str, Any] | None = None,
        compile_decode: bool = False,
    ) -> None:
        where = device if device is not None else _device_of(model)
        self.compile_decode = compile_decode
        self.dtype = dtype
        if adapters is not None:
            model = lora.wrap(model, **adapters)
        # a full fine-tune's frozen initial weights, copied before sharding (LoRA: the
        # adapters turned off, no copy)
        frozen = lora.reference(model) if reference and not lora.is_lora(model) else None
        self.ranks = ranks(where.type) if callable(ranks) else ranks or Ranks()
        self.device = where
        self.sharded = sharded and self.ranks.world > 1
        model = model.to(where)
        # the forward it runs, chosen and held here in its precision, once per model (a sharded
        # model's is its own call: nothing to hold)
        with devices.precision(dtype, where):
            _forward_of(model, own=self.sharded)
        devices.own_memory(p for p in model.parameters() if p.requires_grad)
        frozen = None if frozen is None else frozen.to(where)
        # rank 0's trainable weights on every rank, and its frozen copy of them
        kept = [] if frozen is None else list(frozen.parameters())
        self.ranks.broadcast_tensors([p for p in model.parameters() if p.requires_grad] + kept)
        if self.sharded:
            model = collective.shard(model, self.ranks.world)
            frozen = frozen and collective.shard(frozen, self.ranks.world)
        self.model, self._frozen = model, frozen
        # data-parallel: DDP sums the gradient over the ranks during the backward
        several = self.ranks.world > 1 and not self.sharded and bool(self.params)
        self._replicas = collective.replicate(model) if several else None

    def __enter__(self) -> Policy:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """The run's end: DDP let go of, then the process group left (``Ranks.close``).

        Nothing may hold the group past its destruction: DDP's reducer keeps it, and a group
        destroyed at the interpreter's exit, its threads still running, aborts the process.
        """
        if self._replicas is not None:  # (one process holds no group: nothing to collect)
            self._replicas = None
            gc.collect()  # the reducer, its hook and the group's last references, gone now
        self.ranks.close(together=kind is None)

    @property
    def forward(self) -> Forward:
        """The forward the sampler and the scorer run (``lm.edge.forward``: held once).

        Made anew at each call (a sampling, a scoring pass): the direct forward keeps its
        merged weights for one sampling, keyed by the tensors' versions, and Adam's fused
        kernel writes the weights without counting a version, so a forward kept across an
        optimiser step would sample from the weights before it. The hold's verdict is kept
        per model (``lm.edge.forward``): it runs once.
        """
        forward = _forward_of(self.model, own=self.sharded)
        return dataclasses.replace(forward, compiled=True) if self.compile_decode else forward

    def largest_in_lockstep(self, n: int) -> int:
        """The largest ``n`` over the ranks that sample in lockstep: ``n`` itself unsharded.

        Each forward of a sharded model gathers weights from every rank, so every rank steps
        its sampler until the last row of the batch has ended, wherever that row is: the
        sampler asks at its host reads, the largest count of rows still going.
        """
        return self.ranks.largest(n) if self.sharded else n

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

    def synchronize(self) -> None:
        """Wait for the passes queued on the policy's device (a phase's clock reads their end)."""
        devices.synchronize(self.device)

    @contextlib.contextmanager
    def training(self) -> Iterator[None]:
        """A gradient pass: LoRA's dropout on inside; the model otherwise stays in eval."""
        with lora.dropout_on(self.model):
            yield

    def reference(self) -> Policy:
        """The frozen initial policy of the KL: adapters off (LoRA) or a frozen copy."""
        frozen = self._frozen if self._frozen is not None else lora.reference(self.model)
        ref = Policy(frozen, self.device, self.dtype)
        ref.ranks, ref.sharded = self.ranks, self.sharded  # already placed and sharded
        return ref

    def trained_state(self) -> dict[str, torch.Tensor]:
        """The tensors training changes, by name: the adapters under LoRA, else every weight."""
        return lora.checkpointed(self.model)

    def trainable_names(self) -> list[str]:
        """The names of :attr:`params`, in their order (the optimiser's state's indices)."""
        return [n for n, p in self.model.named_parameters() if p.requires_grad]

    def clip_gradients(self, max_norm: float) -> float:
        """The gradient's norm ‖g‖, and g scaled to at most ``max_norm``: torch's own clipping.

        Sharded, each rank's gradients are its shards (DTensors): ``clip_grad_norm_`` sums
        their squares over the ranks itself, and the norm is read whole.
        """
        total = torch.nn.utils.clip_grad_norm_(self.params, max_norm)
        return float(total.full_tensor() if hasattr(total, "full_tensor") else total)

    def gradient_pass(self, score: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``score`` run so that the backward of its output sums the gradient over the ranks.

        Data-parallel, through DDP (``lm.edge.ranks.replicate``): the gradient's buckets are
        all-reduced as the backward reaches them; sharded, FSDP's reduce-scatter does it; on
        one process, ``score`` itself.
        """
        replicas = self._replicas
        if replicas is None:
            return score

        def synced(*args: object) -> Any:
            replicas.module.run = score
            return replicas(*args)

        return synced

    def summing(self) -> contextlib.AbstractContextManager[None]:
        """The context of the gradient passes' backward, where DDP sums over the ranks.

        A lost rank or the backend's refusal there is said as one (``Ranks.guarded``).
        """
        return self.ranks.guarded("the gradient's all-reduce")

    def deferred(self) -> contextlib.AbstractContextManager[Any]:
        """A gradient pass whose sum over the ranks waits for the next (DDP's ``no_sync``).

        The micro-batches before an update's last accumulate their gradient locally.
        """
        return self._replicas.no_sync() if self._replicas is not None else contextlib.nullcontext()

    def load_trained_state(self, d: Mapping[str, torch.Tensor], prefix: str = "") -> None:
        """Copy ``prefix + name`` of ``d`` into each of :meth:`trained_state`'s tensors.

        A name missing from ``d`` is left as it is (a tied weight shares a saved tensor's
        storage), except under LoRA, where every adapter must be there.

        Raises:
            ValueError: under LoRA, an adapter missing from ``d``.
        """
        targets = self.trained_state() if self.adapters else self.model.state_dict(keep_vars=True)
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

    def save(
        self,
        directory: Path,
        tokenizer: Tokenizer | None,
        state: dict[str, torch.Tensor] | None = None,
    ) -> None:
        """Save the policy as the kind of directory it came from (adapters alone under LoRA).

        ``state``: the weights to write in place of the model's own (a sharded model's,
        gathered whole: ``lm.checkpointer``).
        """
        hf.save_pretrained(self.model, tokenizer, directory, overwrite=True, state_dict=state)


def lora_fields(peft_config: LoraConfig) -> dict[str, Any]:
    """A ``peft.LoraConfig``'s r, α, dropout and target modules as the config's ``lora_*``."""
    return lora.fields_of(peft_config)


def forward_of(model: nn.Module | Policy) -> Forward:
    """The forward of a :class:`Policy` (chosen once), or of a bare model (found now)."""
    return model.forward if isinstance(model, Policy) else _forward_of(model)


def largest_in_lockstep(model: nn.Module | Policy) -> Callable[[int], int]:
    """n ↦ :meth:`Policy.largest_in_lockstep` of a policy; a bare model's ``n`` itself."""
    return model.largest_in_lockstep if isinstance(model, Policy) else int


def device_of(model: nn.Module | Policy) -> torch.device:
    """Where a policy's (or a model's) parameters are: the CPU for a model without any."""
    return model.device if isinstance(model, Policy) else _device_of(model)


def _device_of(model: nn.Module) -> torch.device:
    return next((p.device for p in model.parameters()), torch.device("cpu"))


__all__ = ["Forward", "Policy", "device_of", "forward_of", "largest_in_lockstep", "lora_fields"]
