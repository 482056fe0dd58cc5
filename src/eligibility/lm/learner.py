"""The policy's learner (its model and optimiser, one checkpointable state) and its drift.

:class:`Learner` holds the model and Adam as one ``state_dict`` of the tensors themselves, so a
checkpoint streams them to disk without a copy; :func:`drift` says how far the policy has moved
from the initial one, which ``finetune`` holds against ``--max-kl``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from eligibility.lm.policy import Policy
from eligibility.runs.directory import CHECKPOINT

SHARDS = "shards"
"""The name, in a sharded run's checkpoint, of the tensor that says which of the two shard
directories (``checkpoint.shards-0`` or ``-1``) holds its weights and Adam's state."""


class Learner:
    """The model and its optimiser as one ``state_dict`` of tensors (the checkpoint's).

    The tensors are the model's and the optimiser's own (no copies): the checkpoint streams
    them to disk. A tensor that the model ties to another (a tied embedding and LM head) is
    saved once; its other names are found again from the model when it is restored.

    A sharded policy with a run directory ``home`` (every rank's path to it) checkpoints each
    rank's shards instead (``torch.distributed.checkpoint``): into whichever of two directories
    the checkpoint on disk does not name, made whole under a temporary name first, so a run
    killed while writing keeps the previous checkpoint whole. Its ``state_dict`` is then the
    tensor naming that directory, which the run writes as its checkpoint, atomically, last.
    """

    def __init__(
        self, policy: Policy | torch.nn.Module, lr: float, home: str | Path | None = None
    ) -> None:
        self.home = None if home is None else Path(home)
        self.policy = policy if isinstance(policy, Policy) else Policy(policy)
        self.model = self.policy.model
        self.params = self.policy.params
        # Adam's fused kernel where torch has one (floating point on CPU or CUDA): the same
        # update, one call for every tensor instead of a loop of small operations per tensor
        fused = not self.policy.sharded and all(
            p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in self.params
        )
        self.optimizer = torch.optim.Adam(self.params, lr=lr, fused=fused or None)
        self.steps = 0  # optimiser steps taken by this process

    def state_dict(self) -> dict[str, torch.Tensor]:
        """``policy.*`` (the model's part of a checkpoint) and ``optim.*`` (Adam's state).

        The model's part is the policy's :meth:`~eligibility.lm.policy.Policy.checkpointed`
        (the adapters alone under LoRA), a tied weight once. The tensors themselves, on their
        device and in their dtype: safetensors streams each.
        """
        if self.policy.sharded and self.home is not None:  # each rank its shards (every rank)
            ranks = self.policy.ranks
            slot = ranks.broadcast(self._free_slot() if ranks.main else None)
            self.policy.save_shards(self.optimizer, self._shards(slot))
            return {SHARDS: torch.tensor([slot])}
        if self.policy.sharded:  # the whole state, gathered to rank 0 (empty elsewhere)
            weights, optim = self.policy.full_state(self.optimizer)
            out = {f"policy.{k}": v for k, v in weights.items()}
            for i, s in optim.items():
                out.update({f"optim.{i}.{k}": torch.as_tensor(v) for k, v in s.items()})
            return out
        out, seen = {}, set()
        for k, v in self.policy.checkpointed().items():
            key = (v.data_ptr(), tuple(v.shape), v.dtype)
            if v.numel() and key in seen:  # a tied weight: its storage is saved under a name
                continue
            seen.add(key)
            out[f"policy.{k}"] = v.detach()
        for i, s in self.optimizer.state_dict()["state"].items():
            out.update({f"optim.{i}.{k}": torch.as_tensor(v) for k, v in s.items()})
        return out

    def load_state_dict(self, d: Mapping[str, torch.Tensor], optimizer: bool = True) -> None:
        """Copy the weights (and the optimiser's state) in ``d``, one tensor at a time.

        Raises:
            ValueError: under LoRA, an adapter missing from ``d``.
        """
        if SHARDS in d:  # a sharded run's checkpoint: its directory, resharded for this one
            path = self._shards(int(d[SHARDS][0]))
            self.policy.load_shards(self.optimizer if optimizer else None, path)
            return
        state: dict[int, dict[str, torch.Tensor]] = {}
        for k in d:
            if k.startswith("optim."):
                _, i, name = k.split(".", 2)
                state.setdefault(int(i), {})[name] = d[k]
        if self.policy.sharded:
            weights = {k[len("policy.") :]: v for k, v in d.items() if k.startswith("policy.")}
            optim = self.optimizer if optimizer else None
            self.policy.load_full_state(optim, weights, state)
            return
        self.policy.load_checkpointed(d, prefix="policy.")
        if not optimizer:
            return
        groups = self.optimizer.state_dict()["param_groups"]
        self.optimizer.load_state_dict({"state": state, "param_groups": groups})

    def expected(self) -> Mapping[str, Any]:
        """The names and shapes the checkpoint in ``home`` must hold (``runs.read_checkpoint``).

        Nothing for a sharded checkpoint (its directory is checked as it is read); else the
        unsharded form, whose shapes a sharded policy gives without gathering a tensor.
        """
        if self._slot() is not None:
            return {}
        if not self.policy.sharded:
            return self.state_dict()
        seen: set[int] = set()
        out: dict[str, Any] = {}
        trained = self.policy.trainable_names()
        for k, v in self.model.state_dict(keep_vars=True).items():
            if id(v) in seen or (self.policy.adapters and k not in trained):
                continue  # a tied weight once (as the unsharded form); the adapters alone
            seen.add(id(v))
            out[f"policy.{k}"] = np.broadcast_to(np.zeros((), np.float32), tuple(v.shape))
        return out

    def _shards(self, slot: int) -> Path:
        return Path(self.home or ".") / f"checkpoint.shards-{slot}"

    def _slot(self) -> int | None:
        """The shard directory the checkpoint in ``home`` names (None: none, or unsharded)."""
        path = None if self.home is None else self.home / CHECKPOINT
        if path is None or not path.is_file():
            return None
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                return int(f.get_tensor(SHARDS)[0]) if SHARDS in f.keys() else None
        except Exception:  # unreadable: read_checkpoint says so, naming the file
            return None

    def drop_shards(self) -> None:
        """Rank 0, after an unsharded checkpoint: the shard directories a sharded run left.

        A sharded checkpoint resumed without ``--fsdp`` is followed by an unsharded one, which
        names no directory: they are stale (their temporary siblings too), and removed.
        """
        if self.home is not None and not self.policy.sharded and self._slot() is None:
            for slot in (0, 1):
                self.policy.clear_shards(self._shards(slot))

    def _free_slot(self) -> int:
        """Rank 0: the shard directory the checkpoint on disk does not name, cleared."""
        current = self._slot()
        slot = 0 if current is None else 1 - current
        self.policy.clear_shards(self._shards(slot))
        return slot


class Diverged(ValueError):
    """The run was stopped as wrecked (``lm.watches``: what was measured is in the message)."""


def drift(kl: float | None, entropy: float, first_entropy: float) -> float:
    """How far the policy is from the initial one, in nats per token.

    The KL to the reference where the run keeps one (``kl``: k1 on a batch sampled from the
    policy); without one, the rise of the sampled tokens' surprisal −ln π(oₜ) since the first
    update (``entropy − first_entropy``): a model driven to noise samples tokens it finds
    improbable.
    """
    return float(kl) if kl is not None else float(entropy) - float(first_entropy)


__all__ = ["Diverged", "Learner", "drift"]
