"""`finetune --lora-r r`: LoRA adapters through peft, the reference the same model with them off.

Truth: autograd through the merged weights W + (α/r) B A written by hand into the plain model
(``torch.func.functional_call``: peft is not in that computation), in float64; the model's
own forward with no adapter; and ``transformers``/``peft``'s own loaders for the exports.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from _needs import installed

torch = pytest.importorskip("torch")
installed("peft")

from eligibility.lm import FinetuneConfig, finetune, micro  # noqa: E402
from eligibility.lm.edge import lora  # noqa: E402
from eligibility.lm.edge.model import TinyLM  # noqa: E402
from eligibility.lm.objective import loss  # noqa: E402
from eligibility.lm.sample import sample, token_logps  # noqa: E402
from eligibility.torch import options  # noqa: E402

V, R, ALPHA = 7, 2, 6.0


def _models(seed: int = 0):
    torch.manual_seed(seed)
    base = TinyLM(V, d_model=16, n_layer=2, n_head=2, max_positions=12).double().eval()
    plain = TinyLM(V, d_model=16, n_layer=2, n_head=2, max_positions=12).double().eval()
    plain.load_state_dict(base.state_dict())
    wrapped = lora.wrap(base, r=R, alpha=ALPHA, dropout=0.0, targets=("qkv", "mlp.2"))
    return wrapped.double(), plain


def _batch(model):
    prompts = [[1, 2, 3], [4, 2], [5, 6, 1, 2]]
    return sample(model, prompts * 2, vocab_size=V, max_new_tokens=4,
                  rng=np.random.default_rng(3), eos_id=0)  # fmt: skip


def test_adapters_at_zero_give_the_reference_exactly():
    """B = 0 (peft's init): policy = reference = the model without adapters, bit for bit."""
    wrapped, plain = _models()
    batch = _batch(wrapped)
    with torch.no_grad():
        pi = token_logps(wrapped, batch, vocab_size=V)
        ref = token_logps(lora.reference(wrapped), batch, vocab_size=V)
        own = token_logps(plain, batch, vocab_size=V)
    assert torch.equal(pi, ref) and torch.equal(ref, own)
    for name, p in wrapped.named_parameters():
        if "lora_B" in name:
            p.data.normal_()
    with torch.no_grad():  # not vacuous: with B ≠ 0 the policy moves, the reference does not
        assert not torch.allclose(token_logps(wrapped, batch, vocab_size=V), pi)
        assert torch.equal(token_logps(lora.reference(wrapped), batch, vocab_size=V), ref)


class _Merged(torch.nn.Module):
    """The plain model called on the given weights (``functional_call``)."""

    def __init__(self, plain, weights):
        super().__init__()
        self.plain, self.weights = plain, weights

    def forward(self, **kw):
        return torch.func.functional_call(self.plain, self.weights, (), kw)


def _randomised(wrapped):
    """The adapters' parameters away from peft's init (B = 0 would make every check trivial)."""
    g = torch.Generator().manual_seed(1)
    adapters = dict(wrapped.named_parameters())
    for name, p in adapters.items():
        if "lora_" in name:
            p.data.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
    return adapters


def _merged(adapters, plain):
    """Leaves A, B (copies of the adapters') and the plain model on W + (α/r) B A."""
    leaves, merged = {}, dict(plain.named_parameters())
    for module in ("blocks.0.qkv", "blocks.1.qkv", "blocks.0.mlp.2", "blocks.1.mlp.2"):
        key = f"base_model.model.{module}.lora_%s.default.weight"
        a = adapters[key % "A"].detach().clone().requires_grad_(True)
        b = adapters[key % "B"].detach().clone().requires_grad_(True)
        leaves[key % "A"], leaves[key % "B"] = a, b
        merged[f"{module}.weight"] = merged[f"{module}.weight"].detach() + ALPHA / R * b @ a
    return leaves, _Merged(plain, merged)


def test_the_lora_gradient_is_autograd_through_the_merged_weights():
    """∂L/∂A, ∂L/∂B of the peft model = autograd of L(W + (α/r) B A) on the plain model."""
    wrapped, plain = _models()
    adapters = _randomised(wrapped)
    batch = _batch(wrapped)
    w = torch.randn(batch.completion_ids.shape, generator=torch.Generator().manual_seed(2),
                    dtype=torch.float64)  # fmt: skip
    (token_logps(wrapped, batch, vocab_size=V) * w).sum().backward()
    leaves, merged = _merged(adapters, plain)
    (token_logps(merged, batch, vocab_size=V) * w).sum().backward()
    assert len(leaves) == sum(p.requires_grad for p in wrapped.parameters()) == 8
    for name, leaf in leaves.items():
        torch.testing.assert_close(adapters[name].grad, leaf.grad, rtol=1e-10, atol=1e-13)


@functools.cache
def _groups_of_two():
    """The wrapped and plain models, the adapters, a batch of groups of 2, its rewards and
    reference log-probs: built once for the aggregation rows, which only read them (each
    clears the adapters' gradients before it takes them and builds its own merged leaves)."""
    wrapped, plain = _models()
    adapters, g = _randomised(wrapped), 2
    prompts = [[1, 2, 3], [4, 2], [5, 6, 1, 2]]
    batch = sample(wrapped, [p for p in prompts for _ in range(g)], vocab_size=V,
                   max_new_tokens=4, rng=np.random.default_rng(3), eos_id=0)  # fmt: skip
    rewards = torch.from_numpy(np.random.default_rng(1).random(len(prompts) * g))
    with torch.no_grad():
        ref_logps = token_logps(lora.reference(wrapped), batch, vocab_size=V)
    return wrapped, plain, adapters, g, batch, rewards, ref_logps


@pytest.mark.parametrize("aggregation", options.names("aggregation"))
def test_each_aggregation_rows_lora_update_is_autograd_through_the_merged_weights(aggregation):
    """The update's own loss for each aggregation row (RLOO, a k3 KL to the adapters-off
    reference), its gradient of A and B in one pass and in micro-batches of 1 and 5 sequences
    (cutting groups apart) = autograd of the same loss through W + (α/r) B A."""
    wrapped, plain, adapters, g, batch, rewards, ref_logps = _groups_of_two()
    settings = dict(baseline="rloo", scale="none", aggregation=aggregation, kl="k3", beta=0.1,
                    ref_logps=ref_logps, max_completion_length=4)  # fmt: skip
    mask = batch.completion_mask.bool()

    def loss_of(logps):
        return loss(logps, rewards, mask, group_size=g, **settings)[0]

    leaves, merged = _merged(adapters, plain)
    loss_of(token_logps(merged, batch, vocab_size=V)).backward()
    for size in (None, 1, 5):
        wrapped.zero_grad(set_to_none=True)
        score = lambda rows: token_logps(wrapped, rows, vocab_size=V)  # noqa: E731
        micro.backward(score, loss_of, batch, size=size, kl="k3")
        for name, leaf in leaves.items():
            torch.testing.assert_close(adapters[name].grad, leaf.grad, rtol=1e-10, atol=1e-13)


KW = dict(
    task="repeat", d_model=16, n_head=2, n_layer=1, group_size=4, prompts_per_batch=2,
    eval_every=0, target_accuracy=None, progress=False, lr=1e-2, lora_r=4, device="cpu",
)  # fmt: skip


def test_a_lora_checkpoint_holds_the_adapters_and_their_moments_only():
    """After a step, the learner's state (what a checkpoint writes): A, B and Adam's state of
    each of them, no frozen weight."""
    from eligibility.lm.learner import Learner
    from eligibility.lm.policy import Policy

    wrapped, _ = _models()
    learner = Learner(Policy(wrapped), 1e-2)
    batch = _batch(wrapped)
    (-token_logps(wrapped, batch, vocab_size=V).sum()).backward()
    learner.optimizer.step()
    state = learner.state_dict()
    weights = [k for k in state if k.startswith("policy.")]
    assert len(weights) == 8 and all(".lora_A." in k or ".lora_B." in k for k in weights)
    assert {k.split(".")[1] for k in state if k.startswith("optim.")} == {str(i) for i in range(8)}
    learner.load_state_dict({k: v * 0 for k, v in state.items()})  # and back into the model
    assert all(float(p.abs().sum()) == 0 for p in wrapped.parameters() if p.requires_grad)


def test_a_lora_run_loads_back_as_its_policy_for_evaluate_and_export(tmp_path):
    """``runs.load`` (``evaluate``, ``export``) builds the run's model with its adapters and
    reads the adapters-only checkpoint into it: the run's own weights, every one."""
    from eligibility.lm import runs

    out = tmp_path / "run"
    result = finetune(FinetuneConfig(**KW, max_updates=1, checkpoint_every=1, out=str(out)))
    _, model, task = runs.load(out)
    task.close()
    got = model.state_dict()
    assert any(".lora_B." in k for k in got)
    for k, want in result.model.state_dict().items():
        assert torch.equal(want, got[k]), k


def test_a_run_trained_on_cuda_loads_on_a_machine_without_one(tmp_path):
    """``evaluate`` and ``export`` build the run's model on the CPU: a run whose config says
    ``--device cuda`` loads where torch sees no CUDA device."""
    import json

    from eligibility.lm import runs

    out = tmp_path / "run"
    finetune(FinetuneConfig(**{**KW, "lora_r": None}, max_updates=1, out=str(out)))
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "device": "cuda"}))
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: the CPU-only machine is what is tested")
    _, model, task = runs.load(out)
    task.close()
    assert next(model.parameters()).device.type == "cpu"


@pytest.mark.slow
def test_a_lora_run_resumes_exactly(tmp_path):
    """Only A, B and Adam's moments of them are saved; 2 + 2 updates = 4 straight."""
    from safetensors.numpy import load_file

    straight = finetune(FinetuneConfig(**KW, max_updates=4))
    out = tmp_path / "run"
    finetune(FinetuneConfig(**KW, max_updates=2, checkpoint_every=1, out=str(out)))
    saved = load_file(out / "checkpoint.safetensors")
    weights = [k for k in saved if k.startswith("policy.")]
    assert weights and all(".lora_A." in k or ".lora_B." in k for k in weights)
    assert {k.split(".")[1] for k in saved if k.startswith("optim.")} == {
        str(i) for i in range(len(weights))
    }
    resumed = finetune(FinetuneConfig(**KW, max_updates=4), resume=out)
    after = resumed.model.state_dict()
    for k, a in straight.model.state_dict().items():
        assert torch.equal(a, after[k]), k


def test_peft_config_from_python_becomes_the_runs_fields():
    from peft import LoraConfig

    config = LoraConfig(r=3, lora_alpha=5, lora_dropout=0.1, target_modules=["qkv"])
    assert lora.fields_of(config) == {
        "lora_r": 3, "lora_alpha": 5.0, "lora_dropout": 0.1, "lora_target_modules": ("qkv",),
    }  # fmt: skip
    with pytest.raises(ValueError, match="use_dora"):
        lora.fields_of(LoraConfig(r=3, use_dora=True))
    with pytest.raises(ValueError, match="LoraConfig"):
        lora.fields_of({"r": 3})


def test_unknown_target_modules_name_the_flag():
    with pytest.raises(ValueError, match="--lora-target-modules"):
        lora.wrap(TinyLM(V, 16, 1, 2, 8), r=2, alpha=4.0, dropout=0.0, targets=("nope",))


def test_lora_dropout_acts_in_the_gradient_pass_only():
    """peft's dropout on the adapters' input: on inside ``dropout_on`` (the scoring pass with
    gradients), off for the sampler and the reference (the model stays in eval)."""
    torch.manual_seed(0)
    base = TinyLM(V, d_model=16, n_layer=1, n_head=2, max_positions=12).double().eval()
    wrapped = lora.wrap(base, r=R, alpha=ALPHA, dropout=0.5, targets=("qkv",))
    for name, p in wrapped.named_parameters():
        if "lora_B" in name:
            p.data.normal_()
    batch = _batch(wrapped)
    with torch.no_grad():
        plain = token_logps(wrapped, batch, vocab_size=V)
        assert torch.equal(token_logps(wrapped, batch, vocab_size=V), plain)
        with lora.dropout_on(wrapped):
            dropped = token_logps(wrapped, batch, vocab_size=V)
        assert not torch.equal(dropped, plain)
        assert torch.equal(token_logps(wrapped, batch, vocab_size=V), plain)  # off again


def test_wrapping_a_transformers_model_says_nothing_the_user_cannot_act_on():
    """peft reads transformers' deprecated ``is_gradient_checkpointing``; that warning reached
    every LoRA run's stderr ("eligibility finetune: warning: ...")."""
    import warnings

    tf = pytest.importorskip("transformers")
    cfg = tf.LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2)  # fmt: skip
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        wrapped = lora.wrap(tf.LlamaForCausalLM(cfg), r=R, alpha=ALPHA, dropout=0.0, targets=())
    assert lora.is_lora(wrapped)
    assert [str(w.message) for w in seen] == []


# --- the direct Llama-family forward reads LoRA layers (lm.llama): merged for the sampler,
# x → A → B for the gradient; truth: peft's own forward of the same wrapped model ---

_TARGETS = ("q_proj", "v_proj", "o_proj", "up_proj", "down_proj")  # stacked with plain, single


def _adapted(dropout: float = 0.0):
    from test_lm_llama import _model

    wrapped = lora.wrap(_model("llama"), r=R, alpha=ALPHA, dropout=dropout, targets=_TARGETS)
    with torch.no_grad():
        for name, p in wrapped.named_parameters():
            if "lora_B" in name:  # peft's B = 0 would make every adapter term vanish
                p.normal_(0.0, 0.3)
    return wrapped


def _prompts_batch(model, v):
    prompts = [(1, 5, 6), (1, 7), (1, 8, 9, 4)]
    return sample(model, [p for p in prompts for _ in range(3)], vocab_size=v,
                  max_new_tokens=5, temperature=0.7, rng=np.random.default_rng(0))  # fmt: skip


@torch.no_grad()
def test_the_direct_forward_of_a_lora_llama_is_peft_s_with_adapters_on_and_off():
    from eligibility.lm.edge import llama
    from eligibility.lm.edge.forward import forward_of
    from test_lm_llama import _batch, assert_same_sums

    wrapped = _adapted()
    base = wrapped.get_base_model()
    assert forward_of(wrapped).kind == "direct"  # held against peft's own: not dropped
    fast = llama.direct(base)
    ids, mask, pos = _batch()
    real = mask.bool()
    own = wrapped(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    assert_same_sums(fast(ids, mask, pos).logits[real], own[real])
    with wrapped.disable_adapter():  # the reference: W alone, through the same DirectLM
        off = wrapped(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        assert_same_sums(fast(ids, mask, pos).logits[real], off[real])
    assert float((own[real] - off[real]).abs().max()) > 0.1  # the adapters do move it
    assert_same_sums(fast(ids, mask, pos).logits[real], own[real])  # and on again


@torch.no_grad()
def test_the_merged_kept_weights_follow_a_step_of_the_adapters():
    from eligibility.lm.edge import llama
    from test_lm_llama import _batch, assert_same_sums

    wrapped = _adapted()
    fast = llama.direct(wrapped.get_base_model())
    ids, mask, pos = _batch()
    real = mask.bool()
    first = fast(ids, mask, pos).logits
    for name, p in wrapped.named_parameters():
        if "lora_" in name:  # an optimiser's in-place step of A and B only
            p.add_(0.2 * torch.randn_like(p))
    own = wrapped(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    assert_same_sums(fast(ids, mask, pos).logits[real], own[real])
    assert float((first[real] - own[real]).abs().max()) > 1e-2


@torch.no_grad()
def test_under_autocast_the_adapters_merge_in_float32_then_cast():
    """W + (B A) s is made in the weights' dtype, then cast once: a merge under autocast would
    round B A to bf16 first."""
    from eligibility.lm.edge import llama

    wrapped = _adapted()
    layer = wrapped.get_base_model().model.layers[0]
    fast = llama.direct(wrapped.get_base_model())
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        w, _ = fast.merged(layer.self_attn.o_proj)
    o = layer.self_attn.o_proj
    a, b = o.lora_A["default"].weight, o.lora_B["default"].weight
    exact = o.base_layer.weight + (b @ a) * o.scaling["default"]
    assert w.dtype == torch.bfloat16 and torch.equal(w, exact.to(torch.bfloat16))


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_the_direct_lora_gradient_is_peft_s(dropout, monkeypatch):
    """token_logps and ∂/∂A, ∂/∂B through the direct forward (A, B on their own products)
    against peft's own forward, with the dropout of the gradient pass drawn alike (the same
    seed: the adapters' dropouts are called in the model's order on both paths)."""
    from eligibility.lm.edge.forward import forward_of
    from test_lm_llama import V as VL
    from test_lm_llama import assert_same_sums

    wrapped = _adapted(dropout)
    batch = _prompts_batch(wrapped, VL - 2)

    def grads(direct_on: bool):
        monkeypatch.setenv("ELIGIBILITY_DIRECT_FORWARD", "1" if direct_on else "0")
        assert forward_of(wrapped).kind == ("direct" if direct_on else "decoder")  # held here,
        wrapped.zero_grad()  # as the sampler asks first: the hold's probe draws no dropout
        torch.manual_seed(5)
        with lora.dropout_on(wrapped):
            lp = token_logps(wrapped, batch, vocab_size=VL - 2, temperature=0.7)
        (lp * torch.linspace(-1, 1, lp.numel()).view_as(lp)).sum().backward()
        trained = [p for p in wrapped.parameters() if p.requires_grad]
        return lp.detach(), [p.grad.clone() for p in trained]

    own_lp, own_g = grads(False)
    got_lp, got_g = grads(True)
    assert len(got_g) == 2 * len(_TARGETS) * 2  # A and B of 5 maps in 2 layers
    assert_same_sums(got_lp, own_lp)
    for got, own in zip(got_g, own_g, strict=True):
        assert_same_sums(got, own)
    if dropout:  # not vacuous: the masks matter (outside dropout_on there are none)
        with torch.no_grad():
            off = token_logps(wrapped, batch, vocab_size=VL - 2, temperature=0.7)
        assert float((off - own_lp).abs().max()) > 1e-2


def test_a_lora_layer_the_terms_do_not_describe_keeps_peft_s_forward():
    from eligibility.lm.edge import llama

    wrapped = _adapted()
    assert llama.direct(wrapped.get_base_model()) is not None
    layer = wrapped.get_base_model().model.layers[1].self_attn.v_proj
    layer.merge()  # W now holds B A: the terms would count it twice
    assert lora.terms(layer) is None
    assert llama.direct(wrapped.get_base_model()) is None


def test_the_forward_s_hold_leaves_the_scoring_pass_s_dropout_on():
    """The hold (first asked for inside ``dropout_on``) runs the model in eval, then puts each
    module back as it was: the adapters' dropout stays on for the pass that asked."""
    from eligibility.lm.edge.forward import forward_of

    wrapped = _adapted(0.5)
    drops = [m for n, m in wrapped.named_modules() if n.endswith("lora_dropout.default")]
    with lora.dropout_on(wrapped):
        forward_of(wrapped)
        assert all(m.training for m in drops) and not wrapped.training
    assert not any(m.training for m in drops)


def test_the_hold_sees_a_changed_adapter_convention_on_a_fresh_run(monkeypatch, capsys):
    """A fresh LoRA model has B = 0, where every adapter term vanishes: a direct forward that
    misread peft's scaling would compute peft's function exactly there. The hold draws B away
    from zero (on the adapters themselves, put back bit for bit), so a scaling read twice as
    large is seen, and the model's own forward is used, with a note."""
    from eligibility.lm.edge import forward as lm_forward
    from test_lm_llama import _model

    real = lora.terms

    def doubled(module):  # what a peft release with another scaling convention would read as
        out = real(module)
        if out is None:
            return None
        base, adapters = out
        return base, [(a, b, 2 * s, drop) for a, b, s, drop in adapters]

    wrapped = lora.wrap(_model("llama"), r=R, alpha=ALPHA, dropout=0.0, targets=_TARGETS)
    before = {n: p.detach().clone() for n, p in wrapped.named_parameters()}
    assert all(not p.any() for n, p in before.items() if "lora_B" in n)  # fresh: B = 0
    monkeypatch.setattr(lora, "terms", doubled)
    monkeypatch.setattr("eligibility.lm.edge.llama.lora.terms", doubled)
    assert lm_forward.forward_of(wrapped).kind != "direct"  # fell back
    assert "differs from the model's own" in capsys.readouterr().err
    after = dict(wrapped.named_parameters())
    assert all(torch.equal(before[n], after[n]) for n in before)  # B put back exactly
    # not vacuous: without the changed convention the same fresh model keeps the direct kind
    monkeypatch.setattr(lora, "terms", real)
    monkeypatch.setattr("eligibility.lm.edge.llama.lora.terms", real)
    fresh = lora.wrap(_model("llama"), r=R, alpha=ALPHA, dropout=0.0, targets=_TARGETS)
    assert lm_forward.forward_of(fresh).kind == "direct"
