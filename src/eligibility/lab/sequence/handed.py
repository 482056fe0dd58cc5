"""The model the check hands the user's code: the sequence problems' policy as a causal LM.

:func:`policy_model` gives a ``transformers`` ``PreTrainedModel``
(:class:`~eligibility.lab.sequence.hf.HFPolicy`) where transformers is installed, and
:class:`PaddedCausalLM`, the same call without it, elsewhere; both share the policy's
parameters and add a pad token V (:func:`~eligibility.lab.sequence.model.padded_logits`), and
both take the call from one implementation,
:class:`~eligibility.lab.sequence.padded.PaddedCall`.
"""

from __future__ import annotations

import torch

from eligibility.lab.sequence.model import TinyCausalLM
from eligibility.lab.sequence.padded import PaddedCall


class PaddedCausalLM(PaddedCall, torch.nn.Module):
    """The policy with the Hugging Face call, without ``transformers``.

    The call is :class:`~eligibility.lab.sequence.padded.PaddedCall`'s; its parameters are
    ``lm``'s own.
    """

    def __init__(self, lm: TinyCausalLM, eos_token_id: int) -> None:
        super().__init__()
        from types import SimpleNamespace

        self.lm = lm
        V = lm.vocab_size
        self.config = SimpleNamespace(
            vocab_size=V + 1, pad_token_id=V, eos_token_id=eos_token_id, use_cache=False
        )


def policy_model(lm: TinyCausalLM, eos_token_id: int) -> torch.nn.Module:
    """``lm`` as the model form hands it, sharing its parameters, with a pad token V.

    A ``transformers`` ``PreTrainedModel`` (:class:`~eligibility.lab.sequence.hf.HFPolicy`),
    or, without transformers, :class:`PaddedCausalLM`.
    """
    try:
        from eligibility.lab.sequence.hf import HFPolicy
    except ImportError:  # transformers is the lm extra
        return PaddedCausalLM(lm, eos_token_id)
    return HFPolicy.wrap(lm, eos_token_id)


__all__ = ["PaddedCausalLM", "policy_model"]
