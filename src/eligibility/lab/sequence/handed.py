"""The model the check hands the user's code: the sequence problems' policy as a causal LM.

:func:`policy_model` gives a ``transformers`` ``PreTrainedModel``
(:class:`~eligibility.lab.sequence.hf.HFPolicy`) where transformers is installed, and
:class:`PaddedCausalLM`, the same call without it, elsewhere; both share the policy's
parameters and add a pad token V (:func:`~eligibility.lab.sequence.model.padded_logits`).
"""

from __future__ import annotations

from typing import Any

import torch

from eligibility.lab.sequence.model import CausalLMOutput, TinyCausalLM, padded_logits


class PaddedCausalLM(torch.nn.Module):
    """The policy called as a Hugging Face causal LM is, with a pad token of its own.

    ``model(input_ids=…, attention_mask=…, position_ids=…, logits_to_keep=k, use_cache=…)
    .logits`` (:func:`padded_logits`); ``config`` holds ``vocab_size`` (V + 1),
    ``pad_token_id`` (V) and ``eos_token_id``; ``device`` and ``dtype`` are its parameters'.
    Its parameters are ``lm``'s own. The check hands this where ``transformers`` is not
    installed (:func:`policy_model`).
    """

    def __init__(self, lm: TinyCausalLM, eos_token_id: int) -> None:
        super().__init__()
        from types import SimpleNamespace

        self.lm = lm
        V = lm.vocab_size
        self.config = SimpleNamespace(
            vocab_size=V + 1, pad_token_id=V, eos_token_id=eos_token_id, use_cache=False
        )

    @property
    def device(self) -> torch.device:
        """The parameters' device."""
        return self.lm.token.weight.device

    @property
    def vocab_size(self) -> int:
        """V + 1, the tokens of its logits."""
        return int(self.config.vocab_size)

    @property
    def dtype(self) -> torch.dtype:
        """The parameters' dtype."""
        return self.lm.token.weight.dtype

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        use_cache: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutput:
        """Logits [N, L, V + 1] (see :func:`padded_logits`); ``attention_mask`` changes nothing."""
        c = self.config
        return CausalLMOutput(
            logits=padded_logits(
                self.lm,
                input_ids,
                c.pad_token_id,
                c.eos_token_id,
                position_ids=position_ids,
                logits_to_keep=logits_to_keep,
            )
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
