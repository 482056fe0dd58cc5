"""The policy's learner (its model and optimiser, one checkpointable state) and its drift.

:class:`Learner` holds the model and Adam as one ``state_dict`` of the tensors themselves, so a
checkpoint streams them to disk without a copy; :func:`drift` says how far the policy has moved
from the initial one, which ``finetune`` holds against ``--max-kl``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from eligibility.lm.policy import Policy


class Learner:
    """The model and its optimiser as one ``state_dict`` of tensors (the checkpoint's).

    The tensors are the model's and the optimiser's own (no copies): the checkpoint streams
    them to disk. A tensor that the model ties to another (a tied embedding and LM head) is
    saved once; its other names are found again from the model when it is restored. This is
    the state of a policy whose weights are whole on this process; a sharded policy's forms
    (its shards, or its state gathered whole) are the checkpointer's (``lm.checkpointer``).
    """

    def __init__(self, policy: Policy, lr: float) -> None:
        self.policy = policy
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

        The model's part is the policy's :meth:`~eligibility.lm.policy.Policy.trained_state`
        (the adapters alone under LoRA), a tied weight once. The tensors themselves, on their
        device and in their dtype: safetensors streams each.
        """
        out, seen = {}, set()
        for k, v in self.policy.trained_state().items():
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
        self.policy.load_trained_state(d, prefix="policy.")
        if optimizer:
            groups = self.optimizer.state_dict()["param_groups"]
            self.optimizer.load_state_dict({"state": optim_state(d), "param_groups": groups})


def optim_state(d: Mapping[str, torch.Tensor]) -> dict[int, dict[str, torch.Tensor]]:
    """Adam's state in a checkpoint's ``optim.{i}.{name}`` tensors, by parameter index."""
    state: dict[int, dict[str, torch.Tensor]] = {}
    for k in d:
        if k.startswith("optim."):
            _, i, name = k.split(".", 2)
            state.setdefault(int(i), {})[name] = d[k]
    return state


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


__all__ = ["Diverged", "Learner", "drift", "optim_state"]
