r"""A causal language model small enough to enumerate, with the Hugging Face calling convention.

:class:`TinyCausalLM` is log-linear: the logits for the token after position t are

    zₜ = token[xₜ] + prompt[x₀] (+ position[t]),      π(xₜ₊₁ = v | x_{≤t}) = softmax(zₜ)_v,

a bigram table (``token.weight``, V×V: row = the current token) steered by the prompt's first
token (``prompt.weight``, V×V, added at every position) and, optionally, by a learned absolute
position (``position.weight``, n_positions×V, as GPT-2 has one). All are ``torch.nn.Embedding``
rows, so ``named_parameters()`` is ``token.weight``, ``prompt.weight`` (, ``position.weight``):
2V² (+ n_positions·V) parameters, few enough for a z-test per component, each with a readable
meaning (row = context, column = next token). It is causal by construction (position t sees
xₜ, x₀ and t only), so right padding never changes the logits of earlier positions and
``attention_mask`` is accepted and unused.

``model(input_ids, attention_mask=None).logits`` has shape [N, L, V], and ``logits[:, t]``
predicts ``input_ids[:, t + 1]`` (the shift every Hugging Face causal LM has).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass
class CausalLMOutput:
    """What a Hugging Face causal LM returns, reduced to the one field used here."""

    logits: torch.Tensor


class TinyCausalLM(torch.nn.Module):
    """zₜ = token[xₜ] + prompt[x₀] (+ position[t]): a bigram LM steered by the prompt.

    Args:
        vocab_size: V, the number of tokens (the EOS token among them).
        token: the bigram logits, V×V (row = current token, column = next token); zeros if None.
        prompt: the prompt logits, V×V (row = the prompt's first token); zeros if None.
        position: the position logits, n_positions×V (row = t); none if None (no such table).
        dtype: the parameters' dtype.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        token: Any = None,
        prompt: Any = None,
        position: Any = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be at least 2 (EOS and one token), got {vocab_size}")
        self.vocab_size = vocab_size
        self.token = torch.nn.Embedding(vocab_size, vocab_size, dtype=dtype)
        self.prompt = torch.nn.Embedding(vocab_size, vocab_size, dtype=dtype)
        tables = [("token", token, vocab_size), ("prompt", prompt, vocab_size)]
        self.position: torch.nn.Embedding | None = None
        if position is not None:
            n = np.shape(position)[0] if np.ndim(position) == 2 else -1
            self.position = torch.nn.Embedding(max(n, 1), vocab_size, dtype=dtype)
            tables.append(("position", position, n))
        with torch.no_grad():
            for name, table, rows in tables:
                w = np.zeros((rows, vocab_size)) if table is None else np.asarray(table)
                if w.shape != (rows, vocab_size) or not np.isfinite(w).all():
                    raise ValueError(
                        f"{name} must be a finite ({'V' if name != 'position' else 'n'}, V) "
                        f"table with V = {vocab_size}, got shape {w.shape}"
                    )
                getattr(self, name).weight.copy_(torch.as_tensor(w, dtype=dtype))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> CausalLMOutput:
        """Logits [N, L, V]: zₜ = token[xₜ] + prompt[x₀] (+ position[t]) at every position t.

        Called as a Hugging Face causal LM is: ``position_ids`` (default 0, 1, …, L − 1) index
        the position table; ``attention_mask`` changes nothing (causal by construction: right
        padding changes nothing before it).
        """
        del attention_mask
        logits = self.token(input_ids) + self.prompt(input_ids[:, :1])
        if self.position is not None:
            L = input_ids.shape[1]
            n = self.position.num_embeddings
            top = L if position_ids is None else int(position_ids.max()) + 1
            if top > n:
                raise ValueError(f"input_ids has {top} positions but the model has {n}")
            if position_ids is None:
                logits = logits + self.position.weight[:L]
            else:
                logits = logits + self.position(position_ids)
        return CausalLMOutput(logits=logits)


PAD_LOGIT = -50.0
"""The pad token's logit (no parameter): its probability is below 10⁻²⁰ at every position, so
the policy never samples it and every other token's log-probability is the same to float64
precision, while a loss that scores it (padding left in) gets a finite log-probability and a
gradient, as a real model's pad token does."""


def padded_logits(
    lm: torch.nn.Module,
    input_ids: torch.Tensor,
    pad_token_id: int,
    eos_token_id: int,
    *,
    position_ids: torch.Tensor | None = None,
    logits_to_keep: int | torch.Tensor = 0,
) -> torch.Tensor:
    """The logits of ``lm`` over its vocabulary and a pad token, [N, L or k, V + 1].

    The pad id reads as EOS (padding follows EOS, and right padding changes nothing before
    it); column V (``pad_token_id``) is :data:`PAD_LOGIT`. ``logits_to_keep`` is Hugging
    Face's: an int k > 0 keeps the last k positions, 0 all of them, a tensor those indices.
    """
    ids = torch.where(input_ids == pad_token_id, eos_token_id, input_ids)
    z = lm(ids, position_ids=position_ids).logits
    z = torch.cat([z, torch.full_like(z[..., :1], PAD_LOGIT)], dim=-1)
    if isinstance(logits_to_keep, int):
        return z[:, -logits_to_keep:] if logits_to_keep else z
    return z[:, logits_to_keep]


__all__ = [
    "PAD_LOGIT",
    "CausalLMOutput",
    "TinyCausalLM",
    "padded_logits",
]
