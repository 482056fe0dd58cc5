"""The sequence problems' policy as a ``transformers`` causal LM (imports transformers).

:class:`HFPolicy` is a ``PreTrainedModel`` around the lab's :class:`TinyCausalLM`, sharing its
parameters, so a loss written for Hugging Face models runs unchanged on it: ``config``,
``device``, ``dtype``, ``model(input_ids=…, attention_mask=…, position_ids=…,
logits_to_keep=k, use_cache=…).logits``, ``get_input_embeddings()``. Its vocabulary is the
policy's V tokens and a pad token V whose probability is below 10⁻²⁰
(:func:`~eligibility.lab.sequence.model.padded_logits`).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import GenerationConfig, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from eligibility.lab.sequence.model import TinyCausalLM, padded_logits


class PolicyConfig(PretrainedConfig):
    """The policy's configuration: V + 1 tokens (the pad token last), its EOS and pad ids."""

    model_type = "eligibility-sequence-policy"

    def __init__(self, vocab_size: int = 3, hidden_size: int = 3, **kwargs: Any) -> None:
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        super().__init__(**kwargs)
        self.use_cache = False  # no cache: every position recomputed (said to finetune's forward)


class HFPolicy(PreTrainedModel):
    """The lab's :class:`TinyCausalLM` as a ``PreTrainedModel`` with a pad token (see module)."""

    config_class = PolicyConfig
    base_model_prefix = "lm"

    def __init__(self, config: PolicyConfig, lm: TinyCausalLM) -> None:
        super().__init__(config)
        self.lm = lm  # its parameters, not copies: no init_weights runs
        self.generation_config = GenerationConfig(
            eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
        )

    @classmethod
    def wrap(cls, lm: TinyCausalLM, eos_token_id: int) -> HFPolicy:
        """``lm`` with pad token V = ``lm.vocab_size`` and EOS ``eos_token_id``."""
        V = lm.vocab_size
        config = PolicyConfig(
            vocab_size=V + 1, hidden_size=V, pad_token_id=V, eos_token_id=eos_token_id
        )
        return cls(config, lm)

    @property
    def vocab_size(self) -> int:
        """V + 1, the tokens of its logits (as ``LlamaForCausalLM.vocab_size``)."""
        return int(self.config.vocab_size)

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
    ) -> CausalLMOutputWithPast:
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
        return CausalLMOutputWithPast(logits=logits)


__all__ = ["HFPolicy", "PolicyConfig"]
