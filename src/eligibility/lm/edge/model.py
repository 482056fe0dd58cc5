"""The built-in policy network: a small causal transformer, called as a Hugging Face causal LM is.

Both are called the Hugging Face way, ``model(input_ids=…, attention_mask=…, position_ids=…,
past_key_values=…, use_cache=…)`` → an object with ``.logits`` and ``.past_key_values``, so the
sampler and the trainer have one code path. The policy over a task's V tokens is the softmax of
the first V logits (divided by the temperature): a model's vocabulary must hold the task's.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F


class LMOutput(NamedTuple):
    """What a forward pass returns (the fields a Hugging Face model's output has).

    A named tuple, so that torch's pytree sees the logits: FSDP2 gathers a sharded root's
    weights again for the backward through a hook on the forward's output tensors, and a plain
    dataclass hid them (torch 2.11: the backward read the freed root weights).
    """

    logits: torch.Tensor
    past_key_values: list[tuple[torch.Tensor, torch.Tensor]] | None


def allowed_keys(attention_mask: torch.Tensor, t: int) -> torch.Tensor:
    """Which keys each of the last ``t`` positions may attend to: [B, 1, t, S] booleans.

    Query i sees key j when j ≤ i and j is a real token (``attention_mask`` [B, S], 1: real),
    and always sees itself, so a padding row never has an empty softmax (and is seen by none).
    """
    b, s = attention_mask.shape
    i = torch.arange(s - t, s, device=attention_mask.device).view(t, 1)
    j = torch.arange(s, device=attention_mask.device).view(1, s)
    return (((j <= i) & attention_mask.bool().view(b, 1, s)) | (j == i))[:, None]


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(LN x), then x + MLP(LN x)."""

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(
        self,
        x: torch.Tensor,
        allowed: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """One block over new positions ``x`` [B, T, D]; ``allowed`` [B, 1, T, S] (S = past + T)."""
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x)), (k, v)


class TinyLM(nn.Module):
    """A small GPT-style causal transformer with a KV cache (learned positions, pre-norm).

    Args:
        vocab_size: V.
        d_model: width.
        n_layer: blocks.
        n_head: attention heads (divides ``d_model``).
        max_positions: the longest prompt + completion.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        n_layer: int = 2,
        n_head: int = 4,
        max_positions: int = 64,
    ) -> None:
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model ({d_model}) must be a multiple of n_head ({n_head})")
        self.vocab_size = vocab_size
        self.max_positions = max_positions
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_positions, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        for m in self.modules():
            if isinstance(m, nn.Linear | nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)
        for blk in self.blocks:  # GPT-2's scaled init of the residual projections
            nn.init.normal_(blk.proj.weight, std=0.02 / math.sqrt(2 * n_layer))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
        use_cache: bool = False,
    ) -> LMOutput:
        """Logits of the new positions; keys j may be seen by query i when j ≤ i and j is real.

        ``attention_mask`` [B, S] covers the cached and the new positions (1: a real token;
        default all real); ``position_ids`` [B, T] default to the positions after the cache, as
        in Hugging Face's causal LMs. Every position sees itself, so a padding row never has an
        empty softmax.
        """
        b, t = input_ids.shape
        past = 0 if past_key_values is None else past_key_values[0][0].shape[-2]
        if attention_mask is None:
            attention_mask = torch.ones(b, past + t, dtype=torch.long, device=input_ids.device)
        if position_ids is None:
            position_ids = torch.arange(past, past + t, device=input_ids.device).expand(b, t)
        allowed = allowed_keys(attention_mask, t)
        x = self.tok(input_ids) + self.pos(position_ids.clamp(0, self.max_positions - 1))
        cache = []
        for n, blk in enumerate(self.blocks):
            x, kv = blk(x, allowed, None if past_key_values is None else past_key_values[n])
            cache.append(kv)
        return LMOutput(self.head(self.ln_f(x)), cache if use_cache else None)


def tiny_params(vocab: int, positions: int, *, d_model: int, n_layer: int) -> int:
    """|θ| of the built-in transformer: embeddings, head and 12 d² (+ biases) per block."""
    return (2 * vocab + positions) * d_model + n_layer * (12 * d_model**2 + 13 * d_model)
