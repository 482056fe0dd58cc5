"""REINFORCE losses for PyTorch whose backward pass is the characteristic eligibility.

``loss.backward()`` on ``-(A * Categorical(logits=z).log_prob(a)).mean()`` makes autograd
rebuild, through several B×V temporaries, a gradient that has a closed form: −A (onehot(a) − π),
Williams' (1992) characteristic eligibility scaled by the advantage. The losses here return the
same forward value and hand autograd that closed form directly (:mod:`eligibility.distributions`
holds the formulas, and the tests hold these losses to them):

* :func:`reinforce_loss`: categorical policy over logits, one in-place B×V buffer;
* :func:`fused_linear_reinforce_loss`: categorical policy whose logits are ``hidden @ weight.T``,
  computed chunk by chunk and never held whole (memory O(chunk × V), not O(B × V));
* :func:`fused_linear_logprobs`: per-token ln π(a) (and H) of a linear head the same way,
  differentiable for any loss on top (the backward recomputes the logits by chunks);
* :func:`bernoulli_reinforce_loss` and :func:`normal_reinforce_loss`: the same for Bernoulli and
  Gaussian heads;
* :func:`group_advantages`, :func:`kl_penalised_rewards`, :func:`whiten_advantages`,
  :func:`sequence_reinforce_loss` and :func:`off_policy_loss`: REINFORCE over whole
  completions of a language model, on-policy and off (:mod:`eligibility.torch.advantages`,
  :mod:`eligibility.torch.sequence`, :mod:`eligibility.torch.offpolicy`), every option a row
  of :mod:`options` (the table: each row's formula, names elsewhere, needs and verdicts).

Each loss imports torch at its first use; the option table (:mod:`options`: its names and
verdicts, not its functions) imports without it, so that ``finetune --help`` parses without
torch, and ``import eligibility`` alone imports none of this.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from eligibility.torch import options

if TYPE_CHECKING:
    from eligibility.torch.bernoulli import bernoulli_reinforce_loss
    from eligibility.torch.categorical import reinforce_loss
    from eligibility.torch.fused import fused_linear_reinforce_loss
    from eligibility.torch.fused_logprobs import fused_linear_logprobs
    from eligibility.torch.normal import normal_reinforce_loss
    from eligibility.torch.offpolicy import off_policy_loss
    from eligibility.torch.sequence import (
        group_advantages,
        kl_penalised_rewards,
        sequence_reinforce_loss,
        whiten_advantages,
    )

_HOME = {
    "bernoulli_reinforce_loss": "bernoulli",
    "reinforce_loss": "categorical",
    "fused_linear_reinforce_loss": "fused",
    "fused_linear_logprobs": "fused_logprobs",
    "normal_reinforce_loss": "normal",
    "off_policy_loss": "offpolicy",
    "group_advantages": "sequence",
    "kl_penalised_rewards": "sequence",
    "sequence_reinforce_loss": "sequence",
    "whiten_advantages": "sequence",
}
"""Each loss's module, imported (with torch) at the loss's first use."""


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"eligibility.torch.{_HOME[name]}"), name)
    raise AttributeError(f"module 'eligibility.torch' has no attribute {name!r}")


__all__ = [
    "bernoulli_reinforce_loss",
    "fused_linear_logprobs",
    "fused_linear_reinforce_loss",
    "group_advantages",
    "kl_penalised_rewards",
    "normal_reinforce_loss",
    "off_policy_loss",
    "options",
    "reinforce_loss",
    "sequence_reinforce_loss",
    "whiten_advantages",
]
