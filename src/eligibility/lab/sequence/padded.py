"""The Hugging Face call of the sequence problems' policy, with a pad token: one implementation.

:class:`PaddedCall` is mixed into both models the check hands a user's code
(:func:`eligibility.lab.sequence.handed.policy_model`), over ``torch.nn.Module`` or over
``transformers``' ``PreTrainedModel``; this module imports torch only.
"""

from __future__ import annotations

from typing import Any

import torch

from eligibility.lab.sequence.model import CausalLMOutput, TinyCausalLM, padded_logits


class PaddedCall:
    """The Hugging Face call of the sequence problems' policy, with a pad token of its own.

    One implementation for both models the check hands the user's code: the torch-only
    :class:`~eligibility.lab.sequence.handed.PaddedCausalLM` and
    :class:`~eligibility.lab.sequence.hf.HFPolicy` (a ``transformers`` ``PreTrainedModel``)
    mix it in over their own base class.
    ``model(input_ids=…, attention_mask=…, position_ids=…, logits_to_keep=k, use_cache=…)
    .logits`` (:func:`padded_logits`); ``config`` holds ``vocab_size`` (V + 1),
    ``pad_token_id`` (V) and ``eos_token_id``; ``device`` and ``dtype`` are its parameters'.

    Two other tiny causal LMs stay apart, for reasons of their own: ``finetune``'s
    :class:`eligibility.lm.model.TinyLM` is a GPT-style transformer trained from a random
    start, whose parameters are its checkpoints' (the policy here is a log-linear table at a θ
    chosen by hand); and the framework adapters' ``HFCausalLM``
    (:mod:`eligibility.check.frameworks._hf_models`) has no pad token and exposes the policy
    as features and an ``lm_head``, the structure TRL's fused log-prob head reads.
    """

    lm: TinyCausalLM
    config: Any
    output_class: Any = CausalLMOutput
    """What ``forward`` returns (``transformers``' own output class in ``HFPolicy``)."""

    @property
    def device(self) -> torch.device:
        """The parameters' device."""
        return self.lm.token.weight.device

    @property
    def vocab_size(self) -> int:
        """V + 1, the tokens of its logits (as ``LlamaForCausalLM.vocab_size``)."""
        return int(self.config.vocab_size)

    @property
    def dtype(self) -> torch.dtype:
        """The parameters' dtype."""
        return self.lm.token.weight.dtype

    def get_input_embeddings(self) -> torch.nn.Module:
        """The token table (the bigram logits' rows), as Hugging Face names it."""
        return self.lm.token

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        use_cache: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """Logits [N, L or k, V + 1] (:func:`padded_logits`).

        ``attention_mask`` and the cache change nothing: the model is causal by construction
        and recomputes every position.
        """
        c = self.config
        logits = padded_logits(
            self.lm,
            input_ids,
            c.pad_token_id,
            c.eos_token_id,
            position_ids=position_ids,
            logits_to_keep=logits_to_keep,
        )
        return self.output_class(logits=logits)


__all__ = ["PaddedCall"]
