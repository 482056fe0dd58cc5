"""The check's causal LM with the Hugging Face structure, and TRL's replayed reference model.

A module of its own so that ``transformers`` is imported only when an adapter needs it
(:func:`eligibility.check.frameworks.trl.hf_classes` imports this on first use).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import GenerationConfig, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutput


class CheckLMConfig(PretrainedConfig):
    """The configuration of the check's causal LM (V and the feature width)."""

    model_type = "eligibility-check-lm"

    def __init__(self, vocab_size: int = 2, hidden_size: int = 4, **kwargs: Any) -> None:
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        super().__init__(**kwargs)


class _Head(torch.nn.Module):
    """lm_head: its ``weight`` is [tokenᵀ | promptᵀ | positionᵀ], V × (2V + n), shared."""

    def __init__(self, lm: Any) -> None:
        super().__init__()
        object.__setattr__(self, "lm", lm)  # shared, not a second registration
        self.bias = None

    @property
    def weight(self) -> Any:
        tables = [self.lm.token.weight, self.lm.prompt.weight]
        if self.lm.position is not None:
            tables.append(self.lm.position.weight)
        return torch.cat([t.T for t in tables], dim=1)

    def forward(self, h: Any) -> Any:
        return h @ self.weight.T


class _Features(torch.nn.Module):
    """The backbone: hₜ = [onehot(xₜ), onehot(x₀), onehot(t)], so lm_head(hₜ) = zₜ."""

    def __init__(self, lm: Any) -> None:
        super().__init__()
        object.__setattr__(self, "lm", lm)

    def forward(self, input_ids: Any, attention_mask: Any = None, **_: Any) -> Any:
        V, dtype = self.lm.vocab_size, self.lm.token.weight.dtype
        one = torch.nn.functional.one_hot
        parts = [one(input_ids, V), one(input_ids[:, :1], V).expand(-1, input_ids.shape[1], -1)]
        if self.lm.position is not None:
            n = self.lm.position.num_embeddings
            t = torch.arange(input_ids.shape[1]).expand_as(input_ids)
            parts.append(one(t, n))
        return BaseModelOutput(last_hidden_state=torch.cat(parts, dim=-1).to(dtype))


class HFCausalLM(PreTrainedModel):
    """The check's :class:`TinyCausalLM` with the Hugging Face structure, sharing its tables.

    ``config``, ``base_model`` (features hₜ) and ``get_output_embeddings()`` (``lm_head``,
    whose weight is the model's tables side by side): lm_head(hₜ) = token[xₜ] + prompt[x₀]
    (+ position[t]) = zₜ, so TRL's fused head computes the model's own log-probs.

    Apart from the model form's causal LM
    (:class:`~eligibility.lab.sequence.padded.PaddedCall`, which adds a pad token V): TRL's
    tokenizer here pads with EOS over the model's own V tokens, and its fused log-prob head
    reads a backbone's features and an ``lm_head``, which that model has no need of.
    """

    config_class = CheckLMConfig
    base_model_prefix = "backbone"

    def __init__(self, config: Any, lm: Any) -> None:
        super().__init__(config)
        self.generation_config = GenerationConfig()  # TRL writes its pad token there
        self.lm = lm
        self.backbone = _Features(lm)
        self.lm_head = _Head(lm)

    def get_output_embeddings(self) -> Any:
        return self.lm_head

    def forward(self, input_ids: Any, attention_mask: Any = None, **_: Any) -> Any:
        return CausalLMOutput(logits=self.lm(input_ids, attention_mask=attention_mask).logits)


class _Replay(torch.nn.Module):
    """Features hₜ whose identity head gives log softmax(hₜ)[xₜ₊₁] = ℓ_ref,ₜ exactly.

    ``ref_logps`` holds a generation's rows; TRL scores them in chunks of its micro-batch, in
    order, so each call replays the next rows (``cursor``; set both before a generation).
    """

    def __init__(self) -> None:
        super().__init__()
        self.ref_logps: Any = None
        self.cursor = 0

    def forward(self, input_ids: Any, attention_mask: Any = None, **_: Any) -> Any:
        n, L = input_ids.shape
        rows = self.ref_logps[self.cursor : self.cursor + n]
        self.cursor += n
        V, W = self.vocab_size, rows.shape[1]
        h = torch.full((n, L, V), -1e4, dtype=torch.float32)
        nxt = input_ids[:, 1:]
        lp = torch.zeros(n, L - 1)
        lp[:, L - 1 - W :] = rows.float().clamp(max=-1e-6)
        other = (nxt + 1) % V  # the rest of the mass on one other token: log(1 − p)
        h[:, :-1].scatter_(-1, nxt[..., None], lp[..., None])
        h[:, :-1].scatter_(-1, other[..., None], torch.log1p(-lp.exp())[..., None])
        return BaseModelOutput(last_hidden_state=h)


class ReplayReference(PreTrainedModel):
    """TRL's reference model, replaying the batch's reference log-probs (``ref_logps``)."""

    config_class = CheckLMConfig
    base_model_prefix = "backbone"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.backbone = _Replay()
        self.backbone.vocab_size = config.vocab_size
        self.lm_head = torch.nn.Linear(config.vocab_size, config.vocab_size, bias=False)
        with torch.no_grad():
            self.lm_head.weight.copy_(torch.eye(config.vocab_size))
        self.lm_head.requires_grad_(False)

    def get_output_embeddings(self) -> Any:
        return self.lm_head

    def forward(self, input_ids: Any, attention_mask: Any = None, **_: Any) -> Any:
        return CausalLMOutput(logits=self.lm_head(self.backbone(input_ids).last_hidden_state))


__all__ = ["CheckLMConfig", "HFCausalLM", "ReplayReference"]
