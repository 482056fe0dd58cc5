"""Every architecture people bring, through ``lm.forward``, against the model's own forward.

Each family is a tiny random model in float64 built from its ``transformers`` config, with the
settings that make it itself: grouped-query heads and biases (Llama, Qwen2), a sliding window
(Mistral, Gemma 2/3), q/k norms (Qwen3, Gemma 3), the embedding scale and the logit and
attention soft-capping (Gemma 2), absolute positions and a Conv1D ``c_attn`` (GPT-2), fused
qkv and gate-up maps (Phi-3). The reference is the model's own forward on each row alone, with
no pad, no mask and no cache (``log_softmax`` of its logits): what the sampler recorded, what
the scorer recomputes with each group's prompt computed once on the model's own cache, and the
gradient of the scorer all agree with it. In float64 the agreement is far inside the 1e-5 the
claim needs, on any CPU (``ATEN_CPU_CAPABILITY=default``, ``avx2``, ``avx512`` alike).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from eligibility.lm.edge import forward as lm_forward
from eligibility.lm.sample import Completions, sample, token_logps

V = 11
TAU = 0.7


def _model(family: str, seed: int = 0):
    import transformers as tf

    torch.manual_seed(seed)
    common = dict(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=0,
        pad_token_id=0,
    )
    small = dict(common, num_key_value_heads=2, head_dim=8)
    sliding = dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"])
    if family == "llama":
        cfg = tf.LlamaConfig(**small, attention_bias=True, mlp_bias=True, tie_word_embeddings=True)
        model = tf.LlamaForCausalLM(cfg)
    elif family == "mistral":  # windowed: the model's own decoder, not the direct forward
        model = tf.MistralForCausalLM(tf.MistralConfig(**small, sliding_window=4))
    elif family == "qwen2":
        model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**small))
    elif family == "qwen3":
        model = tf.Qwen3ForCausalLM(tf.Qwen3Config(**small, attention_bias=True))
    elif family == "gemma2":
        cfg = tf.Gemma2Config(**small, **sliding, query_pre_attn_scalar=8)
        cfg.final_logit_softcapping, cfg.attn_logit_softcapping = 3.0, 5.0
        model = tf.Gemma2ForCausalLM(cfg)
    elif family == "gemma3":
        cfg = tf.Gemma3TextConfig(**small, **sliding, query_pre_attn_scalar=8)
        model = tf.Gemma3ForCausalLM(cfg)
    elif family == "gpt2":
        cfg = tf.GPT2Config(
            vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1,
            eos_token_id=0,
        )  # fmt: skip
        model = tf.GPT2LMHeadModel(cfg)
    elif family == "cohere":  # its head scales the logits: the model's own forward
        model = tf.CohereForCausalLM(tf.CohereConfig(**small, logit_scale=0.5))
    else:
        model = tf.Phi3ForCausalLM(tf.Phi3Config(**common, num_key_value_heads=2))
    # Gemma 2's eager attention softmaxes in float32, where float64's mask value is −∞: a
    # left-padded row is NaN in float64, in the model's own forward too. It runs in float32.
    model = model.float() if family == "gemma2" else model.double()
    for p in model.parameters():  # away from the init's symmetries (zero biases, unit norms)
        p.data.add_(0.1 * torch.randn_like(p))
    return model.eval()


FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "gpt2", "phi3", "cohere"]
KIND = dict.fromkeys(FAMILIES, "decoder") | {"llama": "direct", "qwen2": "direct"}
KIND["cohere"] = "logits"  # Gemma 2's soft-capped head is a decoder kind: the cap in the fused


def _tol(name: str) -> float:
    """How close the log-probs agree: the decoder kind runs the model's own code in float64;
    the direct forward norms in float64 where the models' RMSNorm rounds to float32; Gemma 2
    runs in float32. Every gradient passes through those float32 norms (their backward rounds
    to float32), so gradients are held at 1e-5 of their largest entry, the claim's tolerance.
    """
    return 1e-5 if name == "gemma2" else {"direct": 2e-6}.get(KIND[name], 1e-9)


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    return request.param, _model(request.param)


def _groups(model, seed: int = 0) -> Completions:
    """Groups of 3 completions of 3 prompts of different lengths (so the batch has pads)."""
    prompts = [(1, 5, 6, 7, 3), (1, 7), (1, 8, 9, 4)]
    return sample(
        model,
        [p for p in prompts for _ in range(3)],
        vocab_size=V - 2,
        max_new_tokens=6,
        temperature=TAU,
        rng=np.random.default_rng(seed),
    )


def _reference(model, batch: Completions) -> torch.Tensor:
    """ln π_τ of each completion token from the model's own forward on each row alone."""
    rows = []
    for i in range(len(batch.prompt_ids)):
        prompt = batch.prompt_ids[i][batch.prompt_mask[i].bool()]
        ids = torch.cat([prompt, batch.completion_ids[i]])[None]
        z = model(input_ids=ids).logits[0, len(prompt) - 1 : -1, : V - 2] / TAU
        rows.append(F.log_softmax(z, -1).gather(1, batch.completion_ids[i][:, None])[:, 0])
    return torch.stack(rows) * batch.completion_mask


def test_each_family_takes_its_forward(family):
    name, model = family
    forward = lm_forward.forward_of(model)
    assert forward.kind == KIND[name] and forward.shares
    assert lm_forward.discrepancy(model, forward) < _tol(name)  # padded, then a cached step


@torch.no_grad()
def test_sampled_logps_equal_the_models_own_on_each_row(family):
    """Cached decoding with each group's prompt computed once and its cache indexed out.

    The sampler keeps its log-probs in float32.
    """
    name, model = family
    batch = _groups(model)
    assert batch.prefix is not None and len(batch.prefix[0]) == 3
    assert int(batch.completion_mask.sum()) > 9  # more than one token a row, somewhere
    own = _reference(model, batch).to(batch.logps.dtype)
    torch.testing.assert_close(batch.logps, own, rtol=0, atol=max(_tol(name), 1e-6))


def test_token_logps_and_gradient_equal_the_models_own_on_each_row(family):
    name, model = family
    batch = _groups(model, seed=1)
    weights = torch.linspace(-1, 1, batch.logps.numel(), dtype=torch.float64)

    def grads(logps_of) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        lp = logps_of()
        (lp * weights.view_as(lp)).sum().backward()
        return lp.detach(), [p.grad.clone() for p in model.parameters()]

    got_lp, got_g = grads(lambda: token_logps(model, batch, vocab_size=V - 2, temperature=TAU))
    own_lp, own_g = grads(lambda: _reference(model, batch))
    assert got_lp.dtype == next(model.parameters()).dtype
    torch.testing.assert_close(got_lp, own_lp.to(got_lp.dtype), rtol=0, atol=_tol(name))
    for got, own in zip(got_g, own_g, strict=True):
        torch.testing.assert_close(got, own, rtol=0, atol=1e-5 * float(own.abs().max()))


def test_no_full_vocabulary_logits_where_log_probs_are_wanted(family):
    """The head's own forward never runs on the direct and decoder kinds (the head's first V
    rows are applied to the hidden states); the logits kind keeps the prompt's last only."""
    name, model = family
    lm_forward.forward_of(model)  # the hold (the model's own forward) is behind it
    seen: list[tuple[int, ...]] = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda _m, _i, out: seen.append(tuple(out.shape))
    )
    try:
        batch = _groups(model)
        token_logps(model, batch, vocab_size=V - 2, temperature=TAU)
    finally:
        hook.remove()
    if KIND[name] == "logits":
        assert seen[0] == (3, 1, V) and seen[-1][1] == batch.completion_ids.shape[1] - 1
    else:
        assert seen == []


def test_a_direct_forward_that_differs_is_dropped_with_a_note(capsys):
    model = _model("llama", seed=2)
    model.config.rms_norm_eps = 0.5  # the direct forward reads it; the model's norms kept 1e-6
    forward = lm_forward.forward_of(model)
    assert forward.kind == "decoder"
    err = capsys.readouterr().err
    assert "direct forward of this LlamaForCausalLM differs" in err
    batch = _groups(model)  # and the model's own numbers are what the sampler records
    torch.testing.assert_close(batch.logps.double(), _reference(model, batch), rtol=0, atol=1e-6)
    lm_forward.forward_of(model)
    assert capsys.readouterr().err == ""  # held once per model


def test_a_factory_module_is_called_as_it_is():
    from eligibility.lm.edge.model import TinyLM

    class Wrapped(torch.nn.Module):  # a factory's model: the call convention, an unknown cache
        def __init__(self) -> None:
            super().__init__()
            self.inner = TinyLM(V, d_model=16, n_layer=1, n_head=2)

        def forward(self, **kw):  # type: ignore[no-untyped-def]
            return self.inner(**kw)

    torch.manual_seed(0)
    model = Wrapped().eval()
    forward = lm_forward.forward_of(model)
    assert forward.kind == "plain" and not forward.shares
    widths = []  # every row computed whole: the prompts' call has all the rows
    own = model.forward
    model.forward = lambda **kw: (widths.append(len(kw["input_ids"])), own(**kw))[1]
    batch = _groups(model)
    model.forward = own
    assert widths[0] == len(batch.prompt_ids)
    got = token_logps(model, batch, vocab_size=V - 2, temperature=TAU)
    torch.testing.assert_close(got, batch.logps, rtol=0, atol=1e-5)


@pytest.mark.slow  # importing peft takes about 10 s
def test_a_lora_model_goes_through_its_adapters():
    """A ``peft`` LoRA Llama: the direct forward reads its adapters (merged into the kept
    weights for the sampler, x → A → B for the gradient), and the sampler's log-probs, the
    scorer's and the scorer's gradient of A and B are the model's own (peft's forward).
    """
    peft = pytest.importorskip("peft")
    base = _model("llama", seed=3)
    cfg = peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj", "up_proj"])
    model = peft.get_peft_model(base, cfg).eval()
    for name, p in model.named_parameters():
        if "lora_B" in name:  # away from B = 0, where the adapters change nothing
            p.data.normal_(0, 0.3)
    assert lm_forward.forward_of(model).kind == "direct"
    batch = _groups(model)
    own = _reference(model, batch)
    torch.testing.assert_close(batch.logps, own.float(), rtol=0, atol=1e-6)
    got = token_logps(model, batch, vocab_size=V - 2, temperature=TAU)
    lora = [p for p in model.parameters() if p.requires_grad]
    assert lora and len(lora) < len(list(model.parameters()))
    w = torch.linspace(-1, 1, got.numel(), dtype=torch.float64).view_as(got)
    g_got = torch.autograd.grad((got * w).sum(), lora)
    g_own = torch.autograd.grad((_reference(model, batch) * w).sum(), lora)
    torch.testing.assert_close(got, own, rtol=0, atol=_tol("llama"))  # the direct kind's
    for a, b in zip(g_got, g_own, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5 * float(b.abs().max()))


def test_prompts_computed_anew_give_the_same_numbers(monkeypatch):
    """``ELIGIBILITY_SHARE_PROMPTS=0`` (for timing): every row's prompt runs, nothing else moves."""
    model = _model("qwen3", seed=4)
    shared = _groups(model)
    monkeypatch.setenv("ELIGIBILITY_SHARE_PROMPTS", "0")
    anew = _groups(model)
    assert not lm_forward.forward_of(model).shares  # every row's prompt computed
    assert torch.equal(anew.completion_ids, shared.completion_ids)
    torch.testing.assert_close(anew.logps, shared.logps, rtol=0, atol=1e-6)
    got = token_logps(model, shared, vocab_size=V - 2, temperature=TAU)
    monkeypatch.delenv("ELIGIBILITY_SHARE_PROMPTS")
    torch.testing.assert_close(got, token_logps(model, shared, vocab_size=V - 2, temperature=TAU))


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_a_bfloat16_model_keeps_its_forward_and_float32_log_probs(name):
    """In 16 bits the hold allows 16-bit rounding (the direct and decoder kinds are kept), and
    the log-probs are computed in float32 from the widened hidden states and head: within
    bfloat16's rounding (eps 2⁻⁸; a wrong formula moves log-probs by far more) of the model's
    own forward in float32 on the same rounded weights."""
    model = _model(name).to(torch.bfloat16)
    assert lm_forward.forward_of(model).kind == KIND[name]
    batch = _groups(model)
    got = token_logps(model, batch, vocab_size=V - 2, temperature=TAU)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, batch.logps, rtol=0, atol=0.05)
    with torch.no_grad():
        own = _reference(model.float(), batch).float()
    torch.testing.assert_close(got.detach(), own, rtol=0, atol=0.05)
