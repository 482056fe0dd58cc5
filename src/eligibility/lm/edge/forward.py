r"""One forward for every causal LM: what the sampler and the scorer call, whatever the model.

The sampler and the scorer ask three things of a model: the outputs of new tokens on top of a
cache, a cache whose rows can be indexed (so a prompt repeated G times in a batch, a group, is
computed once and its keys and values are repeated to the G rows), and the log-probabilities of
chosen tokens among the first V logits at temperature τ,

    ln π_τ(oₜ) = zₜ[oₜ]/τ − logsumexp(zₜ[:V]/τ),   zₜ = W_head hₜ + b,

where a linear head lets them come from the last hidden states hₜ through
:func:`~eligibility.torch.fused_linear_logprobs`, chunk by chunk, with no [N, T, V] logits
held. :func:`forward_of` picks, once per model:

* ``direct``: the Llama family's direct forward (:mod:`eligibility.lm.edge.llama`), its hidden
  states and the model's ``lm_head``. It is held against the model's own forward the first time
  it is asked for (a padded batch and a cached step); if they differ it is dropped, with a note
  on stderr, for the next kind.
* ``decoder``: any other ``transformers`` causal LM whose head is one plain linear map, or one
  followed by Gemma 2's logit soft-cap z = c tanh(W h/c) (``final_logit_softcapping``, which
  :func:`~eligibility.torch.fused_linear_logprobs` takes as ``softcap``): its decoder
  (``get_decoder()``) with the model's own cache (``Cache.reorder_cache`` indexes its rows,
  sliding-window layers included) and the head applied here, held the same way.
* ``logits``: a ``transformers`` model whose head is more than that (a logit scale): the model
  itself, with its own cache, and ``logits_to_keep=1`` where only the last position is needed.
* ``plain``: the built-in :class:`~eligibility.lm.edge.model.TinyLM` (whose cache is a list of
  per-layer (K, V) tensors, so it shares prompts too) and a factory's ``nn.Module`` (called as
  it is, each row computed, since its cache's layout is unknown).

A ``peft`` model (LoRA) is its base model with adapter layers injected in place. The direct
kind reads plain LoRA layers itself (``lora.terms``: the sampler's products take W + s B A,
merged once a sampling; a gradient pass adds each s B A x to W x); the other kinds run the
layers. Either way the hold compares against the wrapper's own forward. Device and
dtype are the model's: nothing here moves or casts its tensors, except that 16-bit hidden
states and head are widened to float32 for the log-probabilities.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import sys
import weakref
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from eligibility.lm.edge import decoding, lora
from eligibility.lm.edge.decoding import Decoding
from eligibility.lm.edge.llama import DirectLM, _windowed, direct
from eligibility.lm.edge.model import TinyLM
from eligibility.torch import fused_linear_logprobs

Run = Callable[..., tuple[torch.Tensor, Any]]
"""(ids [B, t], mask [B, S] or None, positions [B, t] or None, cache, use_cache, last) →
(outputs [B, t or 1, ·], cache)."""

_verdicts: weakref.WeakKeyDictionary[nn.Module, dict[str, bool]] = weakref.WeakKeyDictionary()
"""What the hold found for each model (keyed by the model the user gave): kind → held."""


@dataclass
class Forward:
    """A model's forward as the sampler and the scorer use it.

    Attributes:
        kind: ``direct``, ``decoder``, ``logits`` or ``plain`` (see the module docstring).
        run: the forward (see :data:`Run`).
        head: (W, b) of the linear head when ``run`` gives hidden states; None when it gives
            logits.
        softcap: c of a soft-capped head, z = c tanh((W h + b)/c); None: none.
        shares: the cache's rows can be indexed (:meth:`expand`).
        hf: a batch with no pad may run with no mask (a ``transformers`` model then takes its
            positions from the cache and attends causally).
        merged_head: the head (W, b) as products of ``rows`` take it, for :meth:`logits`
            (the direct kind's merged weights: cast once a sampling under autocast and laid
            out for a decode step's rows, see ``DirectLM.merged``); None: ``head`` as it is.
        direct: the direct kind's forward, whose sampler's decoding is static
            (:meth:`decoding`); None for the other kinds.
        config: the config of a ``transformers`` model whose cache ``StaticCache`` can stand
            for (every layer full attention): its decoding is static on CUDA; None: not.
        prefix: the direct kind's prompts computed after their common prefix, which is
            computed once (:meth:`prompts`; a greedy evaluation's, where every prompt has the
            chat template's system turn before it).
        compiled: a static decoding's model step, captured, is compiled first
            (``--compile-decode``: ``lm.edge.decoding.compiled_step``).
    """

    kind: str
    run: Run
    head: tuple[torch.Tensor, torch.Tensor | None] | None
    shares: bool
    hf: bool
    softcap: float | None = None
    merged_head: Callable[..., tuple[torch.Tensor, torch.Tensor | None]] | None = None
    direct: DirectLM | None = None
    config: Any = None
    prefix: bool = False
    compiled: bool = False

    def __call__(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor | None,
        cache: Any = None,
        *,
        use_cache: bool = False,
        last: bool = False,
    ) -> tuple[torch.Tensor, Any]:
        """Outputs of new tokens ``ids`` [B, t] with ``mask`` [B, S] over the cached and new ones.

        ``mask`` None: every token is real. Positions count real tokens only (a left-padded
        prompt starts at 0). ``last``: only the last position's outputs.
        """
        pos = None if mask is None else positions(mask)[:, mask.shape[1] - ids.shape[1] :]
        return self.run(ids, mask, pos, cache, use_cache, last)

    def logits(self, out: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """The first V logits of ``out`` (hidden states through the head, or logits)."""
        if self.head is None:
            return out[..., :vocab_size]
        rows = out.numel() // out.shape[-1]
        w, b = self.head if self.merged_head is None else self.merged_head(rows=rows)
        z = F.linear(out, w[:vocab_size], None if b is None else b[:vocab_size])
        return z if self.softcap is None else torch.tanh(z / self.softcap) * self.softcap

    def logps(
        self, out: torch.Tensor, tokens: torch.Tensor, vocab_size: int, temperature: float
    ) -> torch.Tensor:
        """ln π_τ(tokens) among the first V logits, in float32 at least (differentiable)."""
        if self.head is None:
            z = out[..., :vocab_size]
            z = z.to(torch.promote_types(z.dtype, torch.float32)) / temperature
            return z.gather(-1, tokens[..., None])[..., 0] - z.logsumexp(-1)
        w, b = self.head
        wide = torch.promote_types(out.dtype, torch.float32)  # 16-bit log-probs lose too much
        w, b = w[:vocab_size].to(wide), None if b is None else b[:vocab_size].to(wide)
        lp = fused_linear_logprobs(
            out.to(wide), w, tokens, bias=b, temperature=temperature, softcap=self.softcap
        )
        return lp  # type: ignore[return-value]

    def decoding(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        groups: tuple[torch.Tensor, torch.Tensor],
        max_new_tokens: int,
        vocab_size: int,
    ) -> Decoding:
        """A sampling's model side, its prompts computed (arguments: :class:`Decoding`'s).

        Static for the direct forward, and with fixed shapes (``decoding.fixed_shapes``: built
        for CUDA, held back) for a ``transformers`` model whose cache ``StaticCache`` holds;
        else :class:`Decoding`. The one place that asks for the device.
        """
        kind: type[Decoding] = Decoding
        if self.direct is not None:
            kind = decoding.StaticDecoding
        elif self.config is not None and decoding.fixed_shapes(ids.device):
            kind = decoding.TransformersStaticDecoding
        return kind(self, ids, mask, groups, max_new_tokens, vocab_size)

    def masked(self, mask: torch.Tensor) -> bool:
        """Whether a batch of prompts with ``mask`` [N, P] must be given its mask.

        It must when the batch has a pad, or when the model is not a ``transformers`` one (the
        built-in model and a factory's take the mask as an argument). A ``transformers`` model
        on a batch with no pad takes its positions from the cache and attends causally, with no
        mask to build (the same logits; the pads' mask and positions cost a mask per layer and
        step). One host read a batch.
        """
        return not (self.hf and bool(mask.all()))

    def prompts(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor | None,
        groups: tuple[torch.Tensor, torch.Tensor],
    ) -> tuple[torch.Tensor, Any]:
        """Outputs at the last prompt position [N, 1, ·] and the prompts' cache.

        Each distinct prompt is computed once where the cache's rows can be indexed
        (``groups``: [U] the first row of each distinct prompt, [N] each row's): its keys and
        values are repeated to its rows, the same numbers, and the gradient sums over the
        copies as it would over separate computations. ``mask`` None: no pad, none given.
        With :attr:`prefix`, the tokens every distinct prompt starts with are computed once too
        (:meth:`after_prefix`).
        """
        if not self.shares:
            return self(ids, mask, use_cache=True, last=True)
        firsts, index = (g.to(ids.device) for g in groups)
        rows = None if mask is None else mask.index_select(0, firsts)
        ids = ids.index_select(0, firsts)
        c, head = common_prefix(ids, rows) if self.prefix and self.direct is not None else (0, None)
        if c:
            out, cache = self.after_prefix(ids, rows, head)
        else:
            out, cache = self(ids, rows, use_cache=True, last=True)
        if len(firsts) == len(index):  # every prompt distinct: each row its own, in order
            return out, cache
        return out.index_select(0, index), self.expand(cache, index)

    def after_prefix(
        self, ids: torch.Tensor, mask: torch.Tensor | None, head: torch.Tensor
    ) -> tuple[torch.Tensor, Any]:
        """:meth:`prompts` of left-padded rows ``ids`` [U, W] that all start with ``head`` [c].

        The head is computed once, at positions 0 … c − 1; each row's rest on the head's keys
        and values, laid out [head | the row's pads | its rest], at the positions after it
        (counted from the mask, as every call counts them). The keys and values are then put
        back in the prompts' own layout, [pads | head | rest]: a key carries its position in
        its rotation, not in its slot, so moving it changes no number.
        """
        (u, w), c = ids.shape, len(head)
        _, cache = self(head[None], None, use_cache=True)
        cache = [tuple(x.expand(u, *x.shape[1:]) for x in layer) for layer in cache]  # views
        pads = torch.zeros(u, 1, dtype=torch.long, device=ids.device)
        if mask is not None:
            pads = w - mask.sum(1, keepdim=True)
        s = torch.arange(w, device=ids.device)
        rest = torch.where(s[: w - c] < pads, s[: w - c], s[: w - c] + c)  # pads, then rest
        full = (
            None
            if mask is None
            else torch.cat([mask[:, :c].new_ones(u, c), mask.gather(1, rest)], 1)
        )
        out, cache = self(ids.gather(1, rest), full, cache, use_cache=True, last=True)
        if mask is None:  # no pad: [head | rest] is the prompts' layout
            return out, cache
        back = torch.where(s < pads, s + c, torch.where(s < pads + c, s - pads, s))[
            :, None, :, None
        ]
        return out, [tuple(x.gather(2, back.expand_as(x)) for x in layer) for layer in cache]

    def continued(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
        groups: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        """The outputs [N, T, ·] at the positions that predict each completion token.

        Each distinct prompt once (:meth:`prompts`), then the completions on its cache, where
        the cache's rows can be indexed; else every row whole. Every position after the prompt is
        read, whatever ``completion_mask`` says (an episode's world tokens are context, not
        scored); a pad after a completion's EOS is seen by no scored position: only the
        prompts' pads count.
        """
        p, t = prompt_ids.shape[1], completion_ids.shape[1]
        masked = self.masked(prompt_mask)
        if not self.shares:  # every position after the prompt read (an episode's world tokens)
            ids = torch.cat([prompt_ids, completion_ids], dim=1)
            mask = torch.cat([prompt_mask, torch.ones_like(completion_mask)], dim=1)
            return self(ids, mask if masked else None)[0][:, p - 1 : p + t - 1]
        out, cache = self.prompts(prompt_ids, prompt_mask if masked else None, groups)
        if t == 1:
            return out
        full = torch.cat([prompt_mask, torch.ones_like(completion_ids)], dim=1)
        rest, _ = self(completion_ids[:, :-1], full[:, :-1] if masked else None, cache)
        return torch.cat([out, rest], dim=1)

    def expand(self, cache: Any, index: torch.Tensor) -> Any:
        """The cache of U rows as the cache of N rows, row n a copy of row ``index[n]``."""
        if hasattr(cache, "reorder_cache"):  # transformers' Cache: every layer index_selected
            cache.reorder_cache(index)
            return cache
        return [tuple(x.index_select(0, index) for x in layer) for layer in cache]


MIN_PREFIX = 2
"""The fewest tokens a common prefix has for :meth:`Forward.after_prefix` to compute it once."""


def common_prefix(ids: torch.Tensor, mask: torch.Tensor | None) -> tuple[int, torch.Tensor | None]:
    """(c, the tokens) every row of left-padded ``ids`` [U, W] starts with; (0, None): none.

    c < the shortest row's length, so each row keeps a token of its own after it (its last,
    whose outputs the sampler reads); none under :data:`MIN_PREFIX` tokens, or for one row.
    One host read.
    """
    u, w = ids.shape
    lengths = torch.full((u,), w, device=ids.device) if mask is None else mask.sum(1)
    shortest = int(lengths.min())
    if u < 2 or shortest <= MIN_PREFIX:
        return 0, None
    j = torch.arange(shortest, device=ids.device)
    aligned = ids.gather(1, (w - lengths)[:, None] + j)  # each row's real tokens, from its first
    same = (aligned == aligned[:1]).all(0).long().cumprod(0)
    c = min(int(same.sum()), shortest - 1)
    return (c, aligned[0, :c]) if c >= MIN_PREFIX else (0, None)


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position of each token among the real ones (0 at the first real token; pads at 0)."""
    return (mask.cumsum(1) - 1).clamp(min=0)


def unwrapped(model: nn.Module) -> nn.Module:
    """The ``transformers`` model inside a ``peft`` wrapper (its adapters injected in place)."""
    if lora.is_lora(model) and hasattr(model, "get_base_model"):
        return model.get_base_model()
    return model


def _cache_out(out: Any) -> Any:
    # transformers 5 renamed past_key_values to cache (the old name warns)
    return out["cache"] if "cache" in out else out.get("past_key_values")


def _cache_name(module: nn.Module) -> str:
    params = inspect.signature(module.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _run_direct(fast: DirectLM) -> Run:
    def run(ids, mask, pos, cache, use_cache, last):  # type: ignore[no-untyped-def]
        out = fast(ids, mask, pos, cache, use_cache, hidden=True)
        return (out.logits[:, -1:] if last else out.logits), out.past_key_values

    return run


def _run_decoder(decoder: nn.Module) -> Run:
    name = _cache_name(decoder)

    def run(ids, mask, pos, cache, use_cache, last):  # type: ignore[no-untyped-def]
        kw = {name: cache} if cache is not None else {}
        out = decoder(
            input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=use_cache, **kw
        )
        h = out.last_hidden_state
        return (h[:, -1:] if last else h), _cache_out(out) if use_cache else None

    return run


def _run_model(model: nn.Module, hf: bool) -> Run:
    base = unwrapped(model)
    name = _cache_name(base) if hf else "past_key_values"
    keep = hf and "logits_to_keep" in inspect.signature(base.forward).parameters

    def run(ids, mask, pos, cache, use_cache, last):  # type: ignore[no-untyped-def]
        kw: dict[str, Any] = {name: cache} if cache is not None else {}
        if mask is not None:
            kw.update(attention_mask=mask, position_ids=pos)
        if use_cache:  # a factory's model may take none of the keywords it is not given
            kw["use_cache"] = True
        if keep and last:
            kw["logits_to_keep"] = 1
        out = model(input_ids=ids, **kw)
        z = out.logits[:, -1:] if last else out.logits
        return z, (_cache_out(out) if hf else out.past_key_values) if use_cache else None

    return run


def _plain_linear(module: Any) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    return (module.weight, module.bias) if type(module) is nn.Linear else None


_SCALED_HEADS = ("logit_scale", "logits_scaling", "output_multiplier")
"""Config fields of a head that is more than W h + b (Cohere's and Granite's scales): the
``decoder`` kind is not tried for them."""

_SOFTCAP = "final_logit_softcapping"
"""The config field of Gemma 2's soft-capped head, z = c tanh((W h + b)/c)."""


def _linear_head(
    model: nn.Module,
) -> tuple[tuple[torch.Tensor, torch.Tensor | None], float | None] | None:
    """The model's head (W, b) and soft-cap c, or None when it is neither linear nor capped.

    Linear: the logits are W h + b of the decoder's outputs (c None); capped: c tanh((W h + b)/c).
    """
    cfg = getattr(model, "config", None)
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else None  # multimodal
    configs = [c for c in (cfg, text) if c is not None]
    if any(getattr(c, n, None) not in (None, 1, 1.0) for c in configs for n in _SCALED_HEADS):
        return None
    caps = {getattr(c, _SOFTCAP, None) for c in configs} - {None}
    if len(caps) > 1 or not all(isinstance(c, int | float) and c > 0 for c in caps):
        return None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    linear = _plain_linear(head)
    return None if linear is None else (linear, float(caps.pop()) if caps else None)


@contextmanager
def _evaluating(model: nn.Module):  # type: ignore[no-untyped-def]
    """The model in eval mode (dropout off) for the block, then each module as it was.

    Each module's own mode comes back, not the model's spread to all: inside the scoring
    pass, LoRA's dropout is on in a model in eval (``lora.dropout_on``).
    """
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, mode in modes:
            m.training = mode


def _probe(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of 7 tokens on the model's device, the first left-padded by 2."""
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 64)
    device = next(model.parameters()).device
    ids = (torch.arange(14, device=device).view(2, 7) * 5 + 3) % min(vocab, 97)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    return ids, mask


@torch.no_grad()
def discrepancy(model: nn.Module, fast: Forward) -> float:
    """‖z_fast − z_own‖ / ‖z_own‖ over the real positions of a padded probe batch.

    ``fast`` computes the probe in two pieces (its first 5 tokens with a cache, then 2 on
    it); ``model``'s own forward computes it whole, with its own mask and positions. Both in
    the model's own dtype, autocast off: whether ``fast`` computes the model's function does
    not depend on where a run's ``--dtype bfloat16`` rounds (the direct forward keeps its
    attention in float32 on the CPU, where the model's own rounds it to bf16).
    """
    ids, mask = _probe(model)
    with _evaluating(model), torch.autocast(ids.device.type, enabled=False):
        own = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).logits
        v = own.shape[-1]
        out, cache = fast(ids[:, :5], mask[:, :5], use_cache=True)
        rest, _ = fast(ids[:, 5:], mask, cache)
        got = fast.logits(torch.cat([out, rest], dim=1), v)
    real = mask.bool()
    diff = (got[real] - own[real]).double().norm() / own[real].double().norm().clamp(min=1e-30)
    return float(diff)


def _tolerance(model: nn.Module) -> float:
    """The relative difference that two exact computations of one forward stay within.

    Rounding in a different order moves logits by a few ulps per layer: far below this in
    32 and 64 bits, where a structural difference (a bias, a scale, a rope not reproduced)
    moves them by percents; 16-bit rounding needs more room.
    """
    dtype = next(model.parameters()).dtype
    return 3e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-4


def _held(model: nn.Module, fast: Forward) -> bool:
    """Whether ``fast`` reproduces ``model`` (found once per model and kind; a note if not)."""
    verdicts = _verdicts.setdefault(model, {})
    if fast.kind not in verdicts:
        try:  # on adapters drawn away from B = 0, where a misread adapter would show
            with lora.perturbed(model):
                error = f"relative error {discrepancy(model, fast):.2g}"
            verdicts[fast.kind] = float(error.split()[-1]) <= _tolerance(model)
        except Exception:  # a decoder that does not take the call: not this kind, and no note
            verdicts[fast.kind] = False  # (if the model's own call fails too, the probe says so)
            return False
        if not verdicts[fast.kind]:
            name = type(unwrapped(model)).__name__
            print(
                f"note: the {fast.kind} forward of this {name} differs from the model's own "
                f"({error} on a probe batch); using the model's own forward",
                file=sys.stderr,
            )
    return verdicts[fast.kind]


def forward_of(model: nn.Module, own: bool = False) -> Forward:
    """The forward the sampler and the scorer use for ``model`` (see the module docstring).

    Two switches in the environment, so the paths can be timed side by side:
    ``ELIGIBILITY_DIRECT_FORWARD=0`` skips the ``direct`` kind, ``ELIGIBILITY_SHARE_PROMPTS=0``
    computes every row's prompt anew. ``own``: the model's own call only (a sharded model
    gathers its weights in its modules' calls; the direct and decoder kinds read them).
    """
    forward = _chosen(model, own)
    if os.environ.get("ELIGIBILITY_SHARE_PROMPTS", "1") == "0":
        return dataclasses.replace(forward, shares=False)
    return forward


def _chosen(model: nn.Module, own: bool = False) -> Forward:
    if isinstance(model, TinyLM):
        return Forward("plain", _run_model(model, False), None, shares=True, hf=False)
    base = unwrapped(model)
    # a class of transformers', or FSDP's subclass of one (``fully_shard`` makes one)
    if not any(c.__module__.startswith("transformers.") for c in type(base).__mro__):
        return Forward("plain", _run_model(model, False), None, shares=False, hf=False)
    if getattr(getattr(base, "config", None), "use_cache", True) is False:
        # a model that keeps no cache (its config says so): every row computed whole
        return Forward("logits", _run_model(model, True), None, shares=False, hf=True)
    if own:
        return Forward("logits", _run_model(model, True), None, shares=True, hf=True)
    if os.environ.get("ELIGIBILITY_DIRECT_FORWARD", "1") != "0":
        fast = direct(base)
        if fast is not None:
            head = _plain_linear(base.lm_head)
            merged = functools.partial(fast.merged, base.lm_head)
            candidate = Forward(
                "direct", _run_direct(fast), head, True, True, merged_head=merged, direct=fast
            )
            if _held(model, candidate):
                return candidate
    linear = _linear_head(base)
    if linear is not None:
        head, cap = linear
        decoder = _run_decoder(base.get_decoder())
        candidate = Forward(
            "decoder", decoder, head, shares=True, hf=True, softcap=cap, config=_static_config(base)
        )
        if _held(model, candidate):
            return candidate
    return Forward(
        "logits", _run_model(model, True), None, shares=True, hf=True, config=_static_config(base)
    )


def _static_config(model: nn.Module) -> Any:
    """The model's config where ``transformers``' ``StaticCache`` holds its cache, else None.

    It does where every layer is full attention (no sliding window, no linear or recurrent one).
    """
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if text is None or _windowed(text):
        return None
    types = getattr(text, "layer_types", None)
    return config if not types or set(types) == {"full_attention"} else None
