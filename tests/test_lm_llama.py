"""The direct Llama-family forward (``lm.llama``) against the models' own ``transformers`` forward.

Each family is built at random with the settings that change its arithmetic (grouped-query
heads, biases, tied embeddings, a rope scaling) and compared on what the sampler and the trainer
ask of it: the logits of a padded and an unpadded batch, cached decoding, and the gradient of
``token_logps`` (the direct forward with each group's prompt computed once, against the model's
own forward on every row).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from eligibility.lm.edge import llama
from eligibility.lm.sample import Completions, sample, token_logps

V = 11


def _model(family: str, seed: int = 0):
    import transformers as tf

    torch.manual_seed(seed)
    common = dict(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=32,
        bos_token_id=1,
        eos_token_id=0,
    )
    if family == "llama":  # grouped-query heads, biases, a scaled rope, tied embeddings
        cfg = tf.LlamaConfig(
            **common,
            num_key_value_heads=2,
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=True,
            rope_scaling={"rope_type": "linear", "factor": 2.0},
        )
        model = tf.LlamaForCausalLM(cfg)
    elif family == "qwen2":  # q, k, v biases
        model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**common, num_key_value_heads=4))
    else:
        cfg = tf.MistralConfig(**common, num_key_value_heads=1, sliding_window=None)
        model = tf.MistralForCausalLM(cfg)
    for p in model.parameters():  # away from the init's symmetries (zero biases, unit norms)
        p.data.add_(0.1 * torch.randn_like(p))
    return model.eval()


FAMILIES = ["llama", "qwen2", "mistral"]


def assert_same_sums(got: torch.Tensor, own: torch.Tensor, ulps: float = 256) -> None:
    """Two float32 computations of the same sums in another order agree to a few ulps of the
    largest entry, not of each one: an entry that cancels to near 0 keeps the rounding of the
    terms that cancelled, and which order (which kernels, how many threads) depends on the CPU.

    So the tolerance is ``ulps · eps · max|own|`` per tensor. Measured worst: 20 ulps of the
    gradients over the three families × 4 seeds × ATEN_CPU_CAPABILITY default/avx2/avx512 × 1
    and 2 threads; a wrong formula moves entries by a sizeable fraction of max|own|.
    """
    atol = ulps * torch.finfo(own.dtype).eps * float(own.abs().max())
    torch.testing.assert_close(got, own, rtol=0, atol=atol)


def _batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, V, (6, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    mask[4, :1] = 0
    return ids, mask, (mask.cumsum(1) - 1).clamp(min=0)


@pytest.mark.parametrize("family", FAMILIES)
@torch.no_grad()
def test_logits_equal_the_models_own_forward(family):
    model = _model(family)
    fast = llama.direct(model)
    assert fast is not None
    ids, mask, pos = _batch()
    own = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    got = fast(ids, mask, pos).logits
    real = mask.bool()
    assert_same_sums(got[real], own[real])
    assert_same_sums(fast(ids).logits, model(input_ids=ids).logits)


@torch.no_grad()
def test_the_kept_stacked_weights_follow_an_in_place_step():
    """One direct forward, called again after its weights are written in place (an optimiser
    step under no_grad), computes with the new weights, as the model's own forward does."""
    model = _model("llama")
    fast = llama.direct(model)
    ids, mask, pos = _batch()
    first = fast(ids, mask, pos).logits
    assert len(fast._merged) == 4 * len(model.model.layers) + 1  # 4 maps a layer, the head
    assert not any(w.t().is_contiguous() for w, _ in fast._merged.values())  # many rows
    one = fast(ids[:, :-1], mask[:, :-1], pos[:, :-1], use_cache=True)
    step = fast(ids[:, -1:], mask, pos[:, -1:], one.past_key_values)  # a decode step's rows
    assert_same_sums(step.logits[:, -1], first[:, -1])
    assert all(w.t().is_contiguous() for w, _ in fast._merged.values())  # laid out, kept so
    assert len(fast._merged) == 4 * len(model.model.layers) + 1
    assert_same_sums(fast(ids, mask, pos).logits, first)  # kept: the same numbers
    for p in model.parameters():
        p.add_(0.05 * torch.randn_like(p))
    own = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    real = mask.bool()
    assert_same_sums(fast(ids, mask, pos).logits[real], own[real])
    assert (first[real] - own[real]).abs().max() > 1e-2  # the step moved the logits


@torch.no_grad()
def test_under_autocast_the_kept_weights_are_cast_once_and_follow_a_step():
    """``--dtype bfloat16``: the direct forward is the one chosen, its kept weights are bf16
    (cast once, not once a call), its attention float32 on the CPU, its logits the model's
    own under the same autocast to bf16's rounding, and a step is seen."""
    from eligibility.lm.edge.forward import forward_of

    model = _model("llama")
    fast = llama.direct(model)
    ids, mask, pos = _batch()
    real = mask.bool()
    bf16 = torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False)
    with bf16:  # first asked for under a run's autocast: held in float32, and kept
        assert forward_of(model).kind == "direct"
    for _ in range(2):  # before and after an in-place step
        with bf16:
            got = fast(ids, mask, pos).logits[real].float()
            own = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[real]
        assert {w.dtype for w, _ in fast._merged.values()} == {torch.bfloat16}
        with bf16:
            keys, values = fast(ids, mask, pos, use_cache=True).past_key_values[0]
        assert keys.dtype == values.dtype == torch.float32  # the attention's, on the CPU
        exact = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[real]
        scale = float(exact.abs().max())
        assert float((got - own.float()).abs().max()) < 0.03 * scale  # bf16's rounding
        assert float((got - exact).abs().max()) < 0.03 * scale
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))


@pytest.mark.parametrize("family", FAMILIES)
@torch.no_grad()
def test_cached_decoding_equals_the_models_own(family):
    model = _model(family)
    fast = llama.direct(model)
    ids, _, _ = _batch()
    own = model(input_ids=ids[:, :4], use_cache=True)
    got = fast(ids[:, :4], use_cache=True)
    for s in range(4, ids.shape[1]):  # one token a step, then the rest at once
        new = ids[:, s : s + 1]
        own = model(input_ids=new, past_key_values=own.past_key_values, use_cache=True)
        got = fast(new, past_key_values=got.past_key_values, use_cache=True)
        assert_same_sums(got.logits, own.logits)
    whole = model(input_ids=ids).logits
    rest = fast(ids[:, 6:], past_key_values=fast(ids[:, :6], use_cache=True).past_key_values)
    assert_same_sums(rest.logits, whole[:, 6:])


def test_a_cache_grows_in_place_and_every_view_keeps_what_it_held():
    """Without a gradient an append writes into room after the cache (no copy of the cache a
    step); only the buffer's latest view grows, so an earlier view, and a view appended to a
    second time, read what they held; every result is the concatenation, bit for bit."""
    g = torch.Generator().manual_seed(0)

    def x(t: int) -> torch.Tensor:
        return torch.randn(2, 3, t, 4, generator=g)

    def cat(*parts: torch.Tensor) -> torch.Tensor:
        return torch.cat(parts, dim=2)

    first, n1, n2, n3 = x(5), x(1), x(1), x(2)
    with torch.no_grad():
        a = llama._appended(first, n1)  # a buffer with room
        b = llama._appended(a, n2)  # the latest view: written in place
        c = llama._appended(a, n3)  # a again: not the latest any more, so a copy
        assert b.data_ptr() == a.data_ptr() != c.data_ptr()
        assert torch.equal(a, cat(first, n1)) and torch.equal(b, cat(first, n1, n2))
        assert torch.equal(c, cat(first, n1, n3))
        d = b
        for _ in range(40):  # past the buffer's room: a larger one, the same numbers
            d = llama._appended(d, n2)
        assert torch.equal(d, cat(first, n1, *[n2] * 41)) and torch.equal(b, cat(first, n1, n2))
    w = first.clone().requires_grad_()
    grown = llama._appended(w, n1)  # a gradient is taken: the concatenation, differentiable
    grown.sum().backward()
    assert torch.equal(grown, cat(first, n1)) and torch.equal(w.grad, torch.ones_like(w))


def _grads(model, batch, direct_on: bool, monkeypatch) -> tuple[torch.Tensor, list[torch.Tensor]]:
    monkeypatch.setenv("ELIGIBILITY_DIRECT_FORWARD", "1" if direct_on else "0")
    model.zero_grad()
    lp = token_logps(model, batch, vocab_size=V - 2, temperature=0.7)
    (lp * torch.linspace(-1, 1, lp.numel()).view_as(lp)).sum().backward()
    return lp.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("family", FAMILIES)
def test_token_logps_and_gradient_equal_the_models_own(family, monkeypatch):
    """Groups of repeated prompts (computed once) with pads, against every row computed."""
    model = _model(family)
    prompts = [(1, 5, 6), (1, 7), (1, 8, 9, 4)]
    batch = sample(
        model,
        [p for p in prompts for _ in range(3)],
        vocab_size=V - 2,
        max_new_tokens=5,
        temperature=0.7,
        rng=np.random.default_rng(0),
    )
    assert batch.prefix is not None and len(batch.prefix[0]) == 3
    own_lp, own_g = _grads(model, batch, False, monkeypatch)
    got_lp, got_g = _grads(model, batch, True, monkeypatch)
    assert_same_sums(got_lp, own_lp)
    assert_same_sums(got_lp, batch.logps)  # the sampler's own
    for got, own in zip(got_g, own_g, strict=True):
        assert_same_sums(got, own)


def test_the_sampler_draws_the_same_completions_on_both_paths(monkeypatch):
    model = _model("llama")
    prompts = [(1, 5, 6)] * 4 + [(1, 7)] * 4

    def draw(on: bool) -> Completions:
        monkeypatch.setenv("ELIGIBILITY_DIRECT_FORWARD", "1" if on else "0")
        return sample(model, prompts, vocab_size=V, max_new_tokens=6, rng=np.random.default_rng(3))

    own, got = draw(False), draw(True)
    assert torch.equal(got.completion_ids, own.completion_ids)
    assert_same_sums(got.logps, own.logps)
    assert own.prefix is not None and got.prefix is not None  # both share each group's prompt


def test_direct_is_only_for_what_it_reproduces(monkeypatch):
    import transformers as tf

    model = _model("llama")
    assert llama.direct(model).model is model  # the model's own parameters, no copy
    monkeypatch.setenv("ELIGIBILITY_DIRECT_FORWARD", "0")
    assert llama.direct(model) is None
    monkeypatch.delenv("ELIGIBILITY_DIRECT_FORWARD")
    assert llama.direct(model.train()) is None  # dropout: the model's own forward
    windowed = tf.MistralForCausalLM(
        tf.MistralConfig(
            vocab_size=V, hidden_size=16, intermediate_size=16, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=2, sliding_window=4,
        )
    ).eval()  # fmt: skip
    assert llama.direct(windowed) is None
    dynamic = tf.LlamaForCausalLM(
        tf.LlamaConfig(
            vocab_size=V, hidden_size=16, intermediate_size=16, num_hidden_layers=1,
            num_attention_heads=2, rope_scaling={"rope_type": "dynamic", "factor": 2.0},
        )
    ).eval()  # fmt: skip
    assert llama.direct(dynamic) is None
    gpt2 = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=V, n_embd=16, n_layer=1, n_head=2)).eval()
    assert llama.direct(gpt2) is None


def _kept_beyond(f, held):  # type: ignore[no-untyped-def]
    """f()'s result and the bytes autograd keeps for its backward beyond the storages of
    ``held()`` (asked after f ran)."""
    kept: list[torch.Tensor] = []

    def keep(t: torch.Tensor) -> torch.Tensor:
        kept.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        out = f()
    mine = {t.untyped_storage().data_ptr() for t in held()}
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in kept}
    return out, sum(n for ptr, n in storages.items() if ptr not in mine)


def _casts(direct: llama.DirectLM) -> list[torch.Tensor]:
    """The weights (and biases) the direct forward keeps merged or cast."""
    return [t for pair in direct._merged.values() for t in pair if t is not None]


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("frozen", [False, True])
def test_the_mlp_keeps_only_gate_and_up_for_the_backward_and_gives_autograds_bits(
    autocast, bias, frozen
):
    """W_down (silu(g) ⊙ u) + b through ``DirectLM.gated``: the same output and gradients, bit
    for bit, as autograd's plain ops (bfloat16 autocast or float32; a frozen W_down, whose kept
    cast is read), with nothing kept for the backward but [g | u] and the weights."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 8, generator=g)
    w_gate_up = torch.randn(24, 8, generator=g) / 3
    down = torch.nn.Linear(12, 8, bias=bias)
    down.weight.requires_grad_(not frozen)
    dy = torch.randn(3, 5, 8, generator=g)
    direct = llama.DirectLM(_model("llama"))

    def plain(gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, down.weight, down.bias)

    def run(gated: bool) -> tuple[list[torch.Tensor], int]:
        xs = x.clone().requires_grad_()
        down.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            gate_up = F.linear(xs, w_gate_up)
            # the bytes kept beyond [g | u] and the weights (or their kept casts)
            y, extra = _kept_beyond(
                lambda: direct.gated(gate_up, down) if gated else plain(gate_up),
                lambda: [gate_up, *down.parameters(), *_casts(direct)],
            )
        y.backward(dy)
        grads = [y, xs.grad] + [p.grad for p in down.parameters() if p.grad is not None]
        return grads, extra

    got, extra = run(True)
    own, own_extra = run(False)
    assert len(got) == len(own) == 3 + bias - frozen
    for a, b in zip(got, own, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
    g_bytes = 3 * 5 * 12 * (2 if autocast else 4)  # autograd keeps silu(g), and h for ∂L/∂W
    assert extra == 0 and own_extra >= g_bytes * (1 if frozen else 2)


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("biases", ["none", "some", "all"])
@pytest.mark.parametrize("maps", [1, 3])
def test_stacked_products_keep_no_copy_of_the_weights_and_give_autograds_bits(
    autocast, biases, maps
):
    """[W₁ x + b₁ | …] through ``_stacked_linear``: the same output and gradients, bit for bit,
    as autograd's ``F.linear`` of the stacked weights (bfloat16 autocast or float32), keeping
    nothing for the backward pass but x (autocast's cast of it) and the maps' own tensors."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 7, 8, generator=g)
    dy = torch.randn(2, 7, 6 * maps, generator=g)
    linears = []
    for i in range(maps):
        bias = biases == "all" or (biases == "some" and i == 1)
        linear = torch.nn.Linear(8, 6, bias=bias)
        linears.append(linear)
    if maps == 3:
        linears[2].weight.requires_grad_(False)  # a frozen map among trained ones

    params = [p for m in linears for p in m.parameters()]

    def run(ours: bool) -> tuple[list[torch.Tensor], int]:
        xs = x.clone().requires_grad_()
        for m in linears:
            m.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            y, extra = _kept_beyond(
                lambda: (
                    llama._stacked_linear(xs, linears)
                    if ours
                    else F.linear(xs, *llama._stacked([(m, []) for m in linears]))
                ),
                lambda: [xs, *params],
            )
        y.backward(dy)
        grads = [y, xs.grad] + [p.grad for p in params if p.grad is not None]
        x_cast = x.numel() * 2 if autocast else 0  # autocast's bf16 x, kept by both
        return grads, extra - x_cast

    got, extra = run(True)
    own, own_extra = run(False)
    assert len(got) == len(own)
    for a, b in zip(got, own, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert extra == 0
    if maps > 1 or autocast:  # autograd keeps the stacked weight, or its cast
        assert own_extra >= 6 * maps * 8 * (2 if autocast else 4)
