"""The sequence problems' policy as a ``transformers`` causal LM (imports transformers).

:class:`HFPolicy` is a ``PreTrainedModel`` around the lab's :class:`TinyCausalLM`, sharing its
parameters, so a loss written for Hugging Face models runs unchanged on it: ``config``,
``device``, ``dtype``, ``model(input_ids=…, attention_mask=…, position_ids=…,
logits_to_keep=k, use_cache=…).logits``, ``get_input_embeddings()``. Its vocabulary is the
policy's V tokens and a pad token V whose probability is below 10⁻²⁰
(:func:`~eligibility.lab.sequence.model.padded_logits`). The call is one implementation with
the torch-only :class:`~eligibility.lab.sequence.handed.PaddedCausalLM`
(:class:`~eligibility.lab.sequence.padded.PaddedCall`).
"""

from __future__ import annotations

from typing import Any

from transformers import GenerationConfig, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from eligibility.lab.sequence.model import TinyCausalLM
from eligibility.lab.sequence.padded import PaddedCall


class PolicyConfig(PretrainedConfig):
    """The policy's configuration: V + 1 tokens (the pad token last), its EOS and pad ids."""

    model_type = "eligibility-sequence-policy"

    def __init__(self, vocab_size: int = 3, hidden_size: int = 3, **kwargs: Any) -> None:
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        super().__init__(**kwargs)
        self.use_cache = False  # no cache: every position recomputed (said to finetune's forward)


class HFPolicy(PaddedCall, PreTrainedModel):
    """The lab's :class:`TinyCausalLM` as a ``PreTrainedModel`` with a pad token (see module).

    The call is :class:`~eligibility.lab.sequence.padded.PaddedCall`'s.
    """

    config_class = PolicyConfig
    base_model_prefix = "lm"
    output_class = CausalLMOutputWithPast

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


__all__ = ["HFPolicy", "PolicyConfig"]
