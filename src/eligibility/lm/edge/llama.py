r"""The forward pass of a Llama-family causal LM written directly on its own parameters.

The same function as the model's forward, in a few dozen tensor operations without the
modules' cache and mask objects and keyword plumbing, for the family whose layers are exactly

    h = x + W_o · attn(rope(W_q · n₁(x)), rope(W_k · n₁(x)), W_v · n₁(x))
    x' = h + W_down · (silu(W_gate · n₂(h)) ⊙ W_up · n₂(h))
    z = W_head · n(x_L),     n(x) = w ⊙ x / √(mean(x²) + ε)       (RMSNorm)

(Llama, Mistral and Qwen2 in ``transformers``), each projection W x + b, or with ``peft``'s
LoRA adapters W x + b + Σ s B A dropout(x) (:func:`~eligibility.lm.edge.lora.terms`, merged into
the kept weights where no gradient reaches them: :meth:`DirectLM.linear`). The parameters are
the model's own tensors, not copies, so a gradient reaches them and the optimiser, the
checkpoints and ``save_pretrained`` see the model they were given. The rotary angles come
from the model's own ``rotary_emb``, so every rope scaling it computes in one call is the
model's. Its cache is plain per-layer tensors,
so the sampler and the scoring pass compute a prompt repeated G times (a group) once and index
its keys and values out to the G rows (``lm.sample``). Tested against the model's own
forward (logits, cached decoding and gradients) in ``tests/test_lm_llama.py``, with LoRA
against ``peft``'s in ``tests/test_lm_lora.py``.

:func:`direct` gives the fast forward of a model whose structure it reproduces and ``None``
for any other; ``lm.edge.forward`` then holds it once against the model's own forward on numbers,
and drops it (with a note on stderr) where they differ. ``ELIGIBILITY_DIRECT_FORWARD=0`` in
the environment turns it off, so the two paths can be timed side by side.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from eligibility.lm.edge import lora
from eligibility.lm.edge.model import LMOutput, allowed_keys
from eligibility.torch.hardware import product_layout

FAMILIES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
"""The ``transformers`` classes whose forward :class:`DirectLM` reproduces."""

_SAME_IN_ONE_CALL = ("default", "linear", "llama3", "yarn")
"""Rope types whose angles depend on the positions alone (not on the sequence's length, as
``dynamic`` and ``longrope`` do), so one call of ``rotary_emb`` gives the model's own."""


class DirectLM:
    """The Hugging Face call convention over a Llama-family model's own parameters.

    ``past_key_values`` is this class's own: a list of per-layer (K, V) tensors
    [B, H_kv, S, d_head].
    """

    def __init__(self, model: nn.Module) -> None:
        cfg = model.config
        self.model = model
        self.body = model.model
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(self.body.layers[0].self_attn.head_dim)
        self.scale = float(self.body.layers[0].self_attn.scaling)
        self.eps = float(cfg.rms_norm_eps)
        self._merged: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor | None]] = {}
        # the last weights merged for each group of maps, by the maps' ids: what a compiled
        # decode step reads (:meth:`_merged_terms`)
        self._pinned: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor | None]] = {}

    def merged(
        self, *maps: nn.Module, rows: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The weight and bias of ``maps`` as one map, as the products of ``rows`` take it.

        One map (:func:`_stacked`, LoRA adapters merged into it), kept between calls where no
        gradient is taken through it. A sampler calls the forward once a token with the same
        weights, so the concatenation, the merge and, under autocast, the cast to its dtype
        (``--dtype bfloat16`` runs autocast without its cast cache, which would go stale
        across Adam steps) are made once a call of :func:`direct` (once a sampling), not once
        a token and layer. A kept one is used only while every tensor it was made of is the
        same object at the same version (``_version`` counts in-place writes: an optimiser
        step makes it stale) and every adapter's scale is the same. A kept weight is laid out
        as the products of ``rows`` rows read it best (``torch.hardware.product_layout``: a
        decode step's few rows, on the CPU, column-major; laid out once, then kept so); None:
        as it is.
        """
        return self._merged_terms([_terms(m) for m in maps], rows)

    def _merged_terms(
        self, parts: list[tuple[nn.Linear, list[lora.Adapter]]], rows: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`merged` of maps already read as their terms (W, b and adapters).

        Traced by ``torch.compile`` (a compiled decode step, ``lm.edge.decoding.compiled_step``),
        the weights are those last merged for these maps, read as they are: the step is run
        eagerly once a sampling before its compiled form, so they are the sampling's. A
        version counter cannot be traced.
        """
        pin = tuple(id(base) for base, _ in parts)
        if torch.compiler.is_compiling():
            return self._pinned[pin]
        tensors = [
            t
            for base, adapters in parts
            for t in (base.weight, base.bias, *(x.weight for a in adapters for x in a[:2]))
            if t is not None
        ]
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            return _stacked(parts)  # the gradient must reach the weights through the concat
        scales = tuple(a[2] for _, adapters in parts for a in adapters)
        key = tuple(x for t in tensors for x in (id(t), t._version)) + scales
        if key not in self._merged:
            kind = tensors[0].device.type
            with torch.autocast(kind, enabled=False):  # the merge W + s B A in W's dtype
                w, b = _stacked(parts)
            if torch.is_autocast_enabled(kind) and w.is_floating_point():
                dtype = torch.get_autocast_dtype(kind)
                w, b = w.to(dtype), None if b is None else b.to(dtype)
            # the newest merge of these maps (versions only grow): what a traced step reads
            self._merged[key] = self._pinned[pin] = (w, b)
        w, b = self._merged[key]
        laid = w if rows is None else product_layout(w, rows)
        if laid is not w:  # laid out once, then kept so
            self._merged[key] = self._pinned[pin] = (laid, b)
        return laid, b

    def linear(self, x: torch.Tensor, *maps: nn.Module) -> torch.Tensor:
        """[h₁ | h₂ | …] of maps of the same input x, hᵢ = Wᵢ x + bᵢ + Σ s B A dropout(x).

        One product with the kept stacked weights (:meth:`merged`), the adapters merged into
        them, unless a gradient must reach an adapter or its dropout is on (the scoring pass
        under LoRA): then W x + b with the frozen W kept, and each adapter's term added as
        ``peft`` computes it, x → A → B, so the gradient of A and B costs r-wide products
        and not one of W's size. Where the gradient reaches the weights themselves (a full
        fine-tune's scoring pass), one product with the weights stacked there and then
        (:func:`_stacked_linear`), which keeps no copy of them for the backward pass.
        """
        parts = [_terms(m) for m in maps]
        adapters = [a for _, some in parts for a in some]
        through = any(
            (torch.is_grad_enabled() and (a.weight.requires_grad or b.weight.requires_grad))
            or (drop.training and getattr(drop, "p", 0) > 0)
            for a, b, _, drop in adapters
        )
        rows = x.numel() // x.shape[-1]
        if not adapters and torch.is_grad_enabled() and any(_trained(base) for base, _ in parts):
            return _stacked_linear(x, [base for base, _ in parts])  # a full fine-tune's gradient
        if not through:
            return F.linear(x, *self._merged_terms(parts, rows))
        y = F.linear(x, *self._merged_terms([(base, []) for base, _ in parts], rows))
        pieces = list(y.split([base.out_features for base, _ in parts], dim=-1))
        for i, (_, some) in enumerate(parts):
            for a, b, s, drop in some:
                pieces[i] = pieces[i] + F.linear(F.linear(drop(x), a.weight), b.weight) * s
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=-1)

    def gated(self, gate_up: torch.Tensor, down: nn.Module) -> torch.Tensor:
        """W_down (silu(g) ⊙ u) + b of ``gate_up`` = [g | u], the MLP's output.

        Where a gradient is taken and ``down`` has no adapter, through :class:`_GatedDown`,
        which keeps only [g | u] for the backward pass and computes silu(g) ⊙ u again there:
        autograd would also keep silu(g) ⊙ u (the product's input) and silu(g), each as wide as
        g. Else as the plain ops (a sampler's step, a LoRA adapter on ``down``).
        """
        base, adapters = _terms(down)
        train = torch.is_grad_enabled() and (gate_up.requires_grad or base.weight.requires_grad)
        if adapters or not train:
            gate, up = gate_up.chunk(2, dim=-1)
            return self.linear(F.silu(gate) * up, down)
        w, b = self._merged_terms([(base, [])])  # the weight itself, or a frozen one's cast
        dtype = _product_dtype(gate_up, w)  # read before autocast is turned off for the apply
        with torch.autocast(gate_up.device.type, enabled=False):
            return _GatedDown.apply(gate_up, w, b, dtype)

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin± [B, T, 1, d] of the positions, for rope on [B, T, heads, d].

        rope(u) = u cos + rotate_half(u) sin, and rotate_half(u) sin = roll(u, d/2) sin±, with
        sin± = (−sin₁, sin₂): one roll instead of two slices, a negation and a concatenation;
        applied on [B, T, heads, d] before the transpose, where the products are contiguous.
        """
        d = self.head_dim
        cos, sin = self.body.rotary_emb(x, positions)
        return cos[:, :, None], torch.cat([-sin[..., : d // 2], sin[..., d // 2 :]], dim=-1)[
            :, :, None
        ]

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
        use_cache: bool = False,
        hidden: bool = False,
    ) -> LMOutput:
        """Logits of the new tokens ``input_ids`` [B, T] (and the cache, with ``use_cache``).

        ``hidden``: the last hidden states n(x_L) [B, T, D] in place of the logits (the head is
        then the caller's: ``lm.edge.forward`` applies it to the first V rows only).

        ``attention_mask`` [B, S] covers the cached and new tokens (1: real; None: all real);
        ``position_ids`` [B, T] default to the positions after the cache. A position sees
        itself and the real positions before it: a pad's own row stays finite and is never
        seen by another.
        """
        b, t = input_ids.shape
        # a fixed-shape step (a static cache written at its slot) counts nothing on the host:
        # its positions and keys attended are given
        fixed = isinstance(past_key_values, StaticCache) and past_key_values.slot is not None
        past = 0 if past_key_values is None or fixed else _length(past_key_values)
        if position_ids is None:
            position_ids = torch.arange(past, past + t, device=input_ids.device).expand(b, t)
        allowed, causal = _attended(attention_mask, past_key_values, t, past, input_ids)
        body, h, hk, d = self.body, self.heads, self.kv_heads, self.head_dim
        x = F.embedding(input_ids, body.embed_tokens.weight)
        cos, sin = self._rope(x, position_ids)
        wide, narrow, attention = _attention_precision(x)
        allowed = None if allowed is None else _additive(allowed, narrow)
        cache = []
        for n, layer in enumerate(body.layers):
            attn, mlp = layer.self_attn, layer.mlp
            u = F.rms_norm(x, x.shape[-1:], layer.input_layernorm.weight, self.eps)
            qkv = self.linear(u, attn.q_proj, attn.k_proj, attn.v_proj)
            qkv = qkv.view(b, t, h + 2 * hk, d).to(wide)
            qk = qkv[:, :, : h + hk]
            qk = (qk * cos + qk.roll(d // 2, dims=-1) * sin).transpose(1, 2)
            q, k, v = qk[:, :h], qk[:, h:], qkv[:, :, h + hk :].transpose(1, 2)
            q, k, v = q.to(narrow), k.to(narrow), v.to(narrow)
            k, v = _cached(past_key_values, n, k, v)
            cache.append((k, v))
            with attention:
                a = _attend(q, k, v, allowed, causal, self.scale)
            x = x + self.linear(a.transpose(1, 2).reshape(b, t, h * d), attn.o_proj)
            u = F.rms_norm(x, x.shape[-1:], layer.post_attention_layernorm.weight, self.eps)
            x = x + self.gated(self.linear(u, mlp.gate_proj, mlp.up_proj), mlp.down_proj)
        x = F.rms_norm(x, x.shape[-1:], body.norm.weight, self.eps)
        z = x if hidden else F.linear(x, *self.merged(self.model.lm_head, rows=b * t))
        if isinstance(past_key_values, StaticCache):
            if not fixed:
                past_key_values.filled += t
            cache = past_key_values  # type: ignore[assignment]
        return LMOutput(z, cache if use_cache else None)


def _trained(m: nn.Linear) -> bool:
    """Whether a gradient reaches the map's own weight or bias."""
    return m.weight.requires_grad or (m.bias is not None and m.bias.requires_grad)


def _stacked_linear(x: torch.Tensor, maps: list[nn.Linear]) -> torch.Tensor:
    """[W₁ x + b₁ | W₂ x + b₂ | …] as one product of the stacked weights, none of them kept.

    The numbers of ``F.linear(x, *_stacked(maps))`` under the autocast in force (the product in
    its dtype), and their gradients; but where autograd would keep the stacked weight (or, under
    autocast, its cast) for the backward pass, a copy of every weight a call, :class:`_Stacked`
    keeps the maps' own tensors and stacks and casts them again there.
    """
    dtype = _product_dtype(x, maps[0].weight)
    with torch.autocast(x.device.type, enabled=False):
        weights, biases = [m.weight for m in maps], [m.bias for m in maps]
        return _Stacked.apply(x, dtype, *weights, *biases)


def _product_dtype(x: torch.Tensor, w: torch.Tensor) -> torch.dtype:
    """The dtype ``F.linear(x, w)`` computes in: autocast's where it is on for x's device."""
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else w.dtype


def _product_grads(
    dy: torch.Tensor, w: torch.Tensor | None, x: torch.Tensor | None, bias: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """∂L/∂x, ∂L/∂W and ∂L/∂b of y = x Wᵀ + b from ∂L/∂y, each only where asked.

        ∂L/∂x = ∂L/∂y · W  (``w`` given),   ∂L/∂W = (∂L/∂y)ᵀ x  (``x`` given),
        ∂L/∂b = Σ ∂L/∂y  (``bias``)

    over ∂L/∂y's rows, with the kernels autograd's ``F.linear`` uses (so the same bits), in the
    dtype of ``dy``, ``w`` and ``x`` (the caller casts).
    """
    rows = dy.reshape(-1, dy.shape[-1])
    dx = None if w is None else rows.mm(w).view(*dy.shape[:-1], w.shape[1])
    dw = None if x is None else rows.t().mm(x.reshape(-1, x.shape[-1]))
    return dx, dw, rows.sum(0) if bias else None


class _Stacked(torch.autograd.Function):
    """y = x Wᵀ + b with W = [W₁; W₂; …] and b = [b₁; b₂; …] stacked, keeping x alone.

        ∂L/∂x = ∂L/∂y · W,   ∂L/∂Wᵢ = (∂L/∂yᵢ)ᵀ x,   ∂L/∂bᵢ = Σ ∂L/∂yᵢ

    x, W and b cast to ``dtype`` (x's cast kept, as autocast keeps it), a missing bias as zeros;
    the gradients cast back to each input's dtype, with the kernels autograd uses, so the same
    bits as ``F.linear`` of the stacked weights.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: torch.Tensor, dtype: torch.dtype, *tensors: torch.Tensor | None
    ) -> torch.Tensor:
        n = len(tensors) // 2
        weights, biases = tensors[:n], tensors[n:]
        w, b = _joined(weights, biases)
        xc = x.to(dtype)
        ctx.save_for_backward(xc, *weights)
        ctx.dtype, ctx.x_dtype = dtype, x.dtype
        ctx.biases = [None if b is None else b.dtype for b in biases]
        return F.linear(xc, w.to(dtype), None if b is None else b.to(dtype))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        xc, *weights = ctx.saved_tensors
        need, n = ctx.needs_input_grad, len(weights)
        w = (weights[0] if n == 1 else torch.cat(weights)).to(ctx.dtype) if need[0] else None
        x = xc if any(need[2 : 2 + n]) else None
        dx, dw, db = _product_grads(dy, w, x, any(need[2 + n :]))
        sizes = [len(weight) for weight in weights]
        d_w = [None] * n if dw is None else dw.split(sizes)
        d_b = [None] * n if db is None else db.split(sizes)
        return (
            None if dx is None else dx.to(ctx.x_dtype),
            None,
            *(
                g.to(weight.dtype) if g is not None and k else None
                for g, weight, k in zip(d_w, weights, need[2 : 2 + n], strict=True)
            ),
            *(
                g.to(t) if g is not None and k else None
                for g, t, k in zip(d_b, ctx.biases, need[2 + n :], strict=True)
            ),
        )


class _GatedDown(torch.autograd.Function):
    """y = W (silu(g) ⊙ u) + b, with only [g | u] kept for the backward pass.

        h = silu(g) ⊙ u,   ∂L/∂h = ∂L/∂y · W,   ∂L/∂W = (∂L/∂y)ᵀ h,   ∂L/∂b = Σ ∂L/∂y,
        ∂L/∂u = ∂L/∂h ⊙ silu(g),   ∂L/∂g = ∂L/∂h ⊙ u ⊙ σ(g) (1 + g (1 − σ(g)))

    h is computed again in the backward pass from the kept [g | u]. The numbers are autocast's
    ``F.linear(F.silu(g) * u, W, b)``'s: h in [g | u]'s dtype, the product in ``dtype`` (W, b and
    h cast to it), the gradients cast back to each input's dtype; the same kernels in the same
    order (``silu_backward``, the flattened products), so the same bits.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, gate_up: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, dtype: torch.dtype
    ) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        h = F.silu(gate) * up
        ctx.save_for_backward(gate_up, w, b)
        ctx.dtype = dtype
        return F.linear(h.to(dtype), w.to(dtype), None if b is None else b.to(dtype))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        gate_up, w, b = ctx.saved_tensors
        gate, up = gate_up.chunk(2, dim=-1)
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        silu = F.silu(gate)
        h = (silu * up).to(ctx.dtype) if need_w else None  # h again, where ∂L/∂W asks for it
        dh, d_w, d_b = _product_grads(dy, w.to(ctx.dtype) if need_x else None, h, need_b)
        d_gate_up = None
        if dh is not None:
            dh = dh.to(gate_up.dtype)
            d_gate = torch.ops.aten.silu_backward(dh * up, gate)
            d_gate_up = torch.cat([d_gate, dh * silu], dim=-1)
        return (
            d_gate_up,
            None if d_w is None else d_w.to(w.dtype),
            None if d_b is None else d_b.to(b.dtype),
            None,
        )


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    allowed: torch.Tensor | None,
    causal: bool,
    scale: float,
) -> torch.Tensor:
    """softmax(q kᵀ · scale + mask) v, query head j reading key head ⌊j / g⌋ (g = H / H_kv).

    One new token a row (a decoding step): the g query heads of a key head are taken as g
    query positions of that head, [B, H_kv, g, d], so the kernel needs no grouped heads (on
    CUDA the kernel that takes a mask has none: with both, torch falls back to its math
    kernel, which copies the keys and values out to every query head at every step).
    """
    b, h, t, d = q.shape
    hk = k.shape[1]
    if t == 1 and h != hk:
        grouped = q.reshape(b, hk, h // hk, d)
        a = F.scaled_dot_product_attention(grouped, k, v, attn_mask=allowed, scale=scale)
        return a.reshape(b, h, 1, d)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed, is_causal=causal, scale=scale, enable_gqa=h != hk
    )


def _attention_precision(
    x: torch.Tensor,
) -> tuple[torch.dtype, torch.dtype, contextlib.AbstractContextManager[Any]]:
    """The attention's precisions for the hidden states ``x``: (wide, narrow, context).

    wide: the rope's and the projections' dtype; narrow: q, k, v's and the cache's; context:
    the attention product's. Under autocast on the CPU the attention (rope, the cache, the
    products of q, k, v) runs in float32, autocast off: the CPU's bf16 attention kernel took 6x
    its float32 one's time at a sampler's shapes (AVX-512 BF16), more than the rest of a bf16
    sampler's step. On a GPU q, k, v and the cache are autocast's dtype: the attention casts
    them to it anyway, and a cache kept in float32 was cast whole, in every layer of every step.
    """
    kind = x.device.type
    if kind == "cpu" and torch.is_autocast_enabled("cpu"):
        return torch.float32, torch.float32, torch.autocast("cpu", enabled=False)
    if kind != "cpu" and torch.is_autocast_enabled(kind):
        return x.dtype, torch.get_autocast_dtype(kind), contextlib.nullcontext()
    return x.dtype, x.dtype, contextlib.nullcontext()


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask of the keys attended as the attention adds it: 0 where True, −∞ else.

    Made once a call; given as booleans, the attention makes it again in every layer.
    """
    if allowed.dtype != torch.bool:
        return allowed
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, torch.full_like(zero, float("-inf")))


def _attended(
    mask: torch.Tensor | None, cache: object, t: int, past: int, ids: torch.Tensor
) -> tuple[torch.Tensor | None, bool]:
    """The keys each new position attends to, [B, 1, t, S] or None, and whether causally.

    With no mask a single new token attends to every key and several causally among
    themselves; a static cache of fixed shapes gives its own (the whole buffer's).
    """
    if isinstance(cache, StaticCache) and cache.allowed is not None:
        return cache.allowed, False
    if mask is None and not (t > 1 and past):
        return None, t > 1
    if mask is None:
        mask = torch.ones(len(ids), past + t, dtype=torch.long, device=ids.device)
    return allowed_keys(mask, t), False


def _cached(
    cache: list[tuple[torch.Tensor, torch.Tensor]] | StaticCache | None,
    n: int,
    k: torch.Tensor,
    v: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer ``n``'s keys and values attended: the cache's followed by the new ``k``, ``v``."""
    if cache is None:
        return k, v
    if isinstance(cache, StaticCache):
        return cache.write(n, k, v)
    return _appended(cache[n][0], k), _appended(cache[n][1], v)


class StaticCache:
    """A sampling's keys and values, allocated once at their final size.

    Per layer, K and V buffers [B, H_kv, S_max, d] (S_max = P + T_max); positions
    [0, ``filled``) hold the tokens computed so far. Two ways to write a token's and read:

    * ``slot`` None (eager): the new keys at ``filled``, the attention over the filled
      positions alone, [B, H_kv, filled + t, d] views: the numbers of a cache grown by
      appending, exactly (the same shapes reach every kernel).
    * ``slot`` a [1] position tensor and ``allowed`` a [B, 1, 1, S_max] mask (fixed shapes):
      the new keys at ``slot`` (``index_copy_``), the attention over the whole buffer masked
      by ``allowed``: no shape changes from step to step and no host read, so the step can be
      captured once (a CUDA graph) and replayed.
    """

    def __init__(self, layers: list[tuple[torch.Tensor, torch.Tensor]], size: int) -> None:
        self.filled = int(layers[0][0].shape[2])
        self.layers = []
        for k, v in layers:
            b, h, s, d = k.shape
            buffers = (k.new_zeros(b, h, size, d), v.new_zeros(b, h, size, d))
            buffers[0][:, :, :s], buffers[1][:, :, :s] = k, v
            self.layers.append(buffers)
        self.slot: torch.Tensor | None = None
        self.allowed: torch.Tensor | None = None

    def reorder_cache(self, index: torch.Tensor) -> None:
        """Keep the rows ``index`` (``transformers``' name): the buffers made again with them."""
        self.layers = [(k.index_select(0, index), v.index_select(0, index)) for k, v in self.layers]

    def write(self, n: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``n``'s new ``k``, ``v`` [B, H_kv, t, d] written; the keys and values attended."""
        keys, values = self.layers[n]
        if self.slot is not None:
            keys.index_copy_(2, self.slot, k)
            values.index_copy_(2, self.slot, v)
            return keys, values
        end = self.filled + k.shape[2]
        keys[:, :, self.filled : end], values[:, :, self.filled : end] = k, v
        return keys[:, :, :end], values[:, :, :end]


def _length(cache: list[tuple[torch.Tensor, torch.Tensor]] | StaticCache) -> int:
    """The positions a cache holds."""
    return cache.filled if isinstance(cache, StaticCache) else int(cache[0][0].shape[2])


def _appended(past: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """``past`` [B, H, S, d] followed by ``new`` [B, H, t, d] along the positions.

    A sampler appends one token's keys and values a step, and a concatenation copies the whole
    cache each time (O(T²) in all: a fifth of a sampling of SmolLM2 with 70-token prompts).
    Where no gradient is taken, the cache is a view of a larger buffer with room after its S
    positions: ``new`` is written there and the view widened. Only the buffer's latest view
    grows (its base records how many positions are filled): an earlier view, or a view
    appended to a second time, reads what it held, since its append is a copy. A buffer with no
    room left is replaced by one a quarter larger (at least 16 positions more), so the copies
    add up to a few times the final cache. With a gradient, the concatenation.
    """
    graph = torch.is_grad_enabled() and (past.requires_grad or new.requires_grad)
    if graph or past.dtype != new.dtype:
        return torch.cat([past, new], dim=2)
    b, h, s, d = past.shape
    t, base = new.shape[2], past._base
    latest = (
        base is not None
        and getattr(base, "_filled", None) == s
        and base.shape[2] >= s + t
        and base.shape[:2] == past.shape[:2]
        and (base.stride(), base.storage_offset()) == (past.stride(), past.storage_offset())
    )
    if not latest:
        base = past.new_empty(b, h, s + t + max(16, (s + t) // 4), d)
        base[:, :, :s] = past
    base[:, :, s : s + t] = new
    base._filled = s + t  # type: ignore[attr-defined]
    return base[:, :, : s + t]


def _terms(module: nn.Module) -> tuple[nn.Linear, list[lora.Adapter]]:
    """:func:`~eligibility.lm.edge.lora.terms` of a map :func:`_plain_linears` has admitted."""
    parts = lora.terms(module)
    if parts is None:
        raise TypeError(f"the direct forward cannot compute a {type(module).__name__}")
    return parts


def _stacked(
    parts: list[tuple[nn.Linear, list[lora.Adapter]]],
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) for several maps of the same input: one matmul, not three.

    Each map's weight is W + Σ (B A) s over its adapters (``peft``'s merge, in its order),
    joined (:func:`_joined`).
    """
    weights = [base.weight for base, _ in parts]
    for i, (_, adapters) in enumerate(parts):
        for a, b, s, _ in adapters:
            weights[i] = weights[i] + (b.weight @ a.weight) * s
    return _joined(weights, [base.bias for base, _ in parts])


def _joined(
    weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor | None]
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """W = [W₁; W₂; …] and b = [b₁; b₂; …] of maps of the same input.

    A missing bias is zeros (no bias at all: None); one map's own weight and bias (no copy).
    """
    w = weights[0] if len(weights) == 1 else torch.cat(list(weights))
    if all(b is None for b in biases):
        return w, None
    if len(weights) == 1:
        return w, biases[0]
    zero = weights[0].new_zeros
    return w, torch.cat(
        [zero(len(m)) if b is None else b for m, b in zip(weights, biases, strict=True)]
    )


def _windowed(cfg: object) -> bool:
    """Whether the model's attention looks back over a sliding window only."""
    if getattr(cfg, "sliding_window", None) is None:
        return False
    types = getattr(cfg, "layer_types", None)
    if types is not None:  # Qwen2 keeps a window in its config with every layer full
        return "sliding_attention" in types
    return getattr(cfg, "use_sliding_window", True) is not False


_PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")
_PROJECTIONS += ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def _plain_linears(model: nn.Module) -> bool:
    """Whether every map the direct forward reads is W x + b, plus LoRA terms on projections.

    The head and the embedding plain; each projection an ``nn.Linear`` or a ``peft`` LoRA
    layer that :func:`~eligibility.lm.edge.lora.terms` describes. Any other layer injected in place
    must run its own forward.
    """
    layers = getattr(model.model, "layers", ())
    maps = [layer.get_submodule(n) for layer in layers for n in _PROJECTIONS]
    return (
        type(model.model.embed_tokens) is nn.Embedding
        and type(model.lm_head) is nn.Linear
        and all(lora.terms(m) is not None for m in maps)
    )


def _reproduced(model: nn.Module) -> bool:
    """Whether :class:`DirectLM` computes what ``model`` does, as far as its structure shows.

    ``lm.edge.forward`` also holds it against the model's own forward once, on numbers.
    """
    if type(model).__name__ not in FAMILIES or not type(model).__module__.startswith(
        "transformers."
    ):
        return False
    cfg = model.config
    body = getattr(model, "model", None)
    rotary = getattr(body, "rotary_emb", None)
    return (
        _plain_linears(model)
        and getattr(cfg, "hidden_act", None) == "silu"
        and getattr(rotary, "rope_type", None) in _SAME_IN_ONE_CALL
        and int(getattr(cfg, "pretraining_tp", 1) or 1) == 1
        and getattr(cfg, "_attn_implementation", "sdpa") in ("sdpa", "eager")
        and not _windowed(cfg)
    )


def direct(model: nn.Module) -> DirectLM | None:
    """The direct forward of ``model``, or None where it is not one this module reproduces.

    Built at each call (a few attribute reads): a model in training mode, or with the
    environment's ``ELIGIBILITY_DIRECT_FORWARD=0``, runs through its own forward.
    """
    if os.environ.get("ELIGIBILITY_DIRECT_FORWARD", "1") == "0" or model.training:
        return None
    return DirectLM(model) if _reproduced(model) else None
