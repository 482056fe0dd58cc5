"""The sampler's decode step: today's numbers exactly, its host reads, the static cache.

Truth: the sampler as it was before (``tests/_sampler_reference.py``: one host read a token,
the inverse CDF in NumPy, the cache grown by appending), held exactly (``torch.equal``) on
tokens, masks, log-probs, the truncation's records and the generator's state afterwards; the
fixed-shape step (CUDA's) run eagerly on the CPU against it within float32 rounding; a count
of host reads (patched ``Tensor`` conversions) for the decode loop.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from _sampler_reference import reference_sample  # noqa: E402
from eligibility.lm import sample as lm_sample  # noqa: E402
from eligibility.lm.edge import decoding as lm_decoding  # noqa: E402
from eligibility.lm.edge import forward as lm_forward  # noqa: E402
from eligibility.lm.edge.model import TinyLM  # noqa: E402
from eligibility.lm.sample import CHECK_EVERY, sample  # noqa: E402
from eligibility.lm.truncation import Sampling  # noqa: E402

V, TAU = 13, 0.8
PROMPTS = [(1, 5, 6, 7, 3), (1, 7), (1, 8, 9, 4), (1, 2)]
TRUNCATIONS = {
    "top-k": Sampling(top_k=4),
    "top-p": Sampling(top_p=0.8),
    "min-p": Sampling(min_p=0.1),
    "penalty": Sampling(repetition_penalty=1.3, top_k=6),
}


def _llama(seed: int = 0):
    return llama(seed)


def llama(seed: int = 0, vocab: int | None = None, layers: int = 2):
    """A small Llama (2 layers, 4 heads over 2 key-value heads) of ``vocab`` tokens (V)."""
    import transformers as tf

    torch.manual_seed(seed)
    cfg = tf.LlamaConfig(
        vocab_size=vocab or V, hidden_size=32, intermediate_size=48, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
        bos_token_id=1, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    return tf.LlamaForCausalLM(cfg).eval()


def _qwen3(seed: int = 2, layers: int = 2):
    """A family the direct forward does not reproduce (its ``decoder`` kind)."""
    import transformers as tf

    torch.manual_seed(seed)
    cfg = tf.Qwen3Config(vocab_size=V, hidden_size=32, intermediate_size=48,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=8, max_position_embeddings=64, eos_token_id=0,
                         pad_token_id=0)  # fmt: skip
    return tf.Qwen3ForCausalLM(cfg).eval()


def _tiny(seed: int = 0):
    torch.manual_seed(seed)
    return TinyLM(V, d_model=16, n_layer=2, n_head=2, max_positions=48).eval()


def _both(model, prompts, *, t_max=10, seed=3, drop_every=CHECK_EVERY, **kw):
    """(ours, the reference's) on the same prompts and seed, and the generators after."""
    rngs = [None, None] if kw.pop("greedy", False) else [np.random.default_rng(seed) for _ in "ab"]
    ours = sample(model, prompts, vocab_size=V - 2, max_new_tokens=t_max, temperature=TAU,
                  rng=rngs[0], **kw)  # fmt: skip
    ref = reference_sample(model, prompts, vocab_size=V - 2, max_new_tokens=t_max,
                           temperature=TAU, rng=rngs[1], drop_every=drop_every, **kw)  # fmt: skip
    return ours, ref, rngs


def _assert_exact(ours, ref, rngs) -> None:
    tokens, mask, logps, ended, raw, sizes = ref
    assert torch.equal(ours.completion_ids, tokens)
    assert torch.equal(ours.completion_mask, mask)
    assert torch.equal(ours.logps, logps)
    assert torch.equal(ours.ended, ended)
    assert (ours.raw_logps is None) == (raw is None)
    if raw is not None:
        assert torch.equal(ours.raw_logps, raw) and torch.equal(ours.kept_sizes, sizes)
    if rngs[0] is not None:  # the generator where the step-by-step draws left it
        assert rngs[0].bit_generator.state == rngs[1].bit_generator.state
        assert rngs[0].random() == rngs[1].random()


def _groups(g: int = 3) -> list[tuple[int, ...]]:
    return [p for p in PROMPTS for _ in range(g)]


def test_the_static_llama_step_gives_the_old_samplers_numbers_exactly(monkeypatch):
    """The direct forward's static cache against the reference: the same tokens, log-probs,
    ends and generator, bit for bit; finished rows dropped at the host reads (as the reference
    drops them at the same steps), or, with the prompts computed anew, every row to the end."""
    model = _llama()
    assert lm_forward.forward_of(model).kind == "direct"
    for seed in range(3):
        _assert_exact(*_both(model, _groups(), seed=seed))
    monkeypatch.setenv("ELIGIBILITY_SHARE_PROMPTS", "0")  # no row dropped
    _assert_exact(*_both(model, _groups(), seed=0, drop_every=None))


def test_the_tiny_models_shared_prompts_give_the_old_samplers_numbers_exactly():
    """The built-in model's indexed cache: the prompts shared, finished rows dropped at the
    host reads; the reference dropping at the same steps."""
    model = _tiny(1)
    for seed in range(3):
        _assert_exact(*_both(model, _groups(4), t_max=12, seed=seed))


def test_a_transformers_decoder_gives_the_old_samplers_numbers_exactly():
    """A family the direct forward does not reproduce (Qwen3: the ``decoder`` kind)."""

    model = _qwen3()
    assert lm_forward.forward_of(model).kind == "decoder"
    _assert_exact(*_both(model, _groups(), seed=1))


@pytest.mark.parametrize("name", sorted(TRUNCATIONS))
def test_truncated_sampling_gives_the_old_samplers_numbers_exactly(name):
    s = TRUNCATIONS[name]
    _assert_exact(*_both(_llama(1), _groups(), seed=2, sampling=s))
    _assert_exact(*_both(_tiny(2), _groups(), seed=2, sampling=s))


def test_greedy_decoding_gives_the_old_samplers_tokens_exactly():
    _assert_exact(*_both(_llama(), _groups(1), greedy=True))
    _assert_exact(*_both(_tiny(), _groups(1), greedy=True))


def test_a_share_of_a_batch_draws_the_batchs_uniforms_exactly():
    """A rank's share (rows 3..8 of 12, padded to the batch's width): its rows' uniforms of
    each step, and the generator where the share's steps of 12 draws leave it."""
    prompts = _groups()
    share = (slice(3, 9), len(prompts), max(len(p) for p in prompts))
    mine = prompts[3:9]
    _assert_exact(*_both(_llama(), mine, seed=4, share=share))
    _assert_exact(*_both(_tiny(), mine, seed=4, share=share))


def _captured_as_on_cuda(monkeypatch):
    """Fixed shapes, as on CUDA: the step (draw and model) warmed up as a capture warms it up
    (``decoding.replayed`` runs it twice, then puts its state back) and run eagerly, so a
    step its warm-up would change (one that advances a position of its own) fails here too."""
    monkeypatch.setattr(lm_decoding, "fixed_shapes", lambda device: True)


def test_the_fixed_shape_step_holds_against_the_old_sampler(monkeypatch):
    """The step CUDA captures (the attention over the whole static buffer, masked; the new keys
    written at a position tensor), run eagerly here: the same tokens, log-probs within float32
    rounding (the masked tail changes the softmax's summation, not its terms). Over 40 tokens
    every row ends long before the last step and the batch's end is read steps after it: the
    completions are still cut where the last row ended, and the generator left there."""
    _captured_as_on_cuda(monkeypatch)
    model = _llama(3)
    for kw in ({}, {"sampling": TRUNCATIONS["penalty"]}, {"t_max": 40}):
        ours, ref, rngs = _both(model, _groups(), seed=5, drop_every=None, **kw)
        assert kw.get("t_max") != 40 or ours.completion_ids.shape[1] < 40 - 10
        tokens, _, logps, ended, _, _ = ref
        assert torch.equal(ours.completion_ids, tokens) and torch.equal(ours.ended, ended)
        torch.testing.assert_close(ours.logps, logps, rtol=0, atol=1e-5)
        assert rngs[0].bit_generator.state == rngs[1].bit_generator.state


class _Reads:
    """Counts the host reads of tensors (``item``, ``tolist``, ``bool``, ``int``, ``float``,
    ``nonzero``, ``numpy``) while patched in."""

    NAMES = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "numpy")

    def __init__(self, monkeypatch) -> None:
        self.n = 0
        for name in self.NAMES:
            own = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._counted(own))

    def _counted(self, own):
        def read(*a, **kw):
            self.n += 1
            return own(*a, **kw)

        return read


def _reads_of_a_decode(monkeypatch, model, t_max: int, fixed: bool | None = None):
    """(host reads in the decode loop of a batch whose rows never end (EOS never drawn), the
    decoding). ``fixed``: the static step's fixed shapes forced on or off (None: the
    device's choice)."""
    if fixed is not None:
        monkeypatch.setattr(lm_decoding, "fixed_shapes", lambda device: fixed)
    prompts = _groups()
    forward = lm_forward.forward_of(model)
    ids = torch.tensor([list(p) + [1] * (5 - len(p)) for p in prompts])
    decoding = forward.decoding(ids, torch.ones_like(ids), (torch.arange(12), torch.arange(12)),
                                t_max, V - 2)  # fmt: skip
    record = lm_sample.Record.empty(ids, torch.ones_like(ids), t_max, V - 2, V - 1, None)
    uniforms = lm_sample._Uniforms(np.random.default_rng(0), t_max, 12, slice(0, 12), ids.device)
    reads = _Reads(monkeypatch)
    steps = lm_sample._decode(decoding, record, uniforms, TAU, None, V - 1, int)
    monkeypatch.undo()
    assert steps == t_max and bool(record.alive.all())
    return reads.n, decoding


def test_the_decode_loops_host_reads_are_one_per_check_not_one_per_token(monkeypatch):
    """The step itself reads nothing on the host: over 8 and 32 tokens the reads are those of
    the checks every CHECK_EVERY steps (whether a row is going; which rows to drop) and one
    count of the steps at the end (one layer: a count of reads, not of the layers' numbers)."""
    for model, per_check in ((llama(layers=1), 2), (_tiny(), 2)):
        for t_max in (8, 32):
            checks = (t_max - 1) // CHECK_EVERY  # none after the last step (1, then 7)
            reads, decoding = _reads_of_a_decode(monkeypatch, model, t_max)
            assert not decoding.fixed and reads == per_check * checks + 1
    assert CHECK_EVERY >= 4  # so 64 tokens take at most 33 reads, where they took ≥ 64


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_the_fixed_shape_decodes_host_reads_do_not_grow_with_the_tokens(family, monkeypatch):
    """With fixed shapes (CUDA's step, run eagerly here; the direct Llama's static cache and
    ``transformers``' ``StaticCache``) the decode loop's host reads are the same over 8 and 32
    tokens, and at most CHECKS + 1 ≤ 4: whether a row is going, read at a few steps
    whatever T_max (no row ever dropped), and the steps taken, once (one layer: a count of
    reads, not of the layers' numbers)."""
    model = llama(layers=1) if family == "llama" else _qwen3(layers=1)
    want = (
        lm_decoding.StaticDecoding if family == "llama" else lm_decoding.TransformersStaticDecoding
    )
    reads = {}
    for t_max in (1, 2, 8, 32):
        reads[t_max], decoding = _reads_of_a_decode(monkeypatch, model, t_max, fixed=True)
        assert type(decoding) is want and decoding.fixed
    assert reads[8] == reads[32] == lm_sample.CHECKS + 1 <= 4
    assert reads[1] == 1 and reads[2] == 2  # no check after the last step
    assert _reads_of_a_decode(monkeypatch, model, 32, fixed=False)[0] > reads[32]  # the CPU's


NO_CUDA = (
    f"no CUDA device: torch {torch.__version__} (CUDA build {torch.version.cuda}) sees none "
    "here; these run where one is, under `make gpu` (`make test` hides it: tests/conftest.py)"
)


def test_a_replayed_graph_keeps_alive_what_it_reads_and_writes(monkeypatch):
    """A CUDA graph reads and writes its tensors by address and holds none of them: the replay
    ``replayed`` returns holds the step and its state, so a tensor only the step holds (the
    sampler's step index) outlives the capture. Freed, its memory went to the host check's
    flag, which reset the index mid-sampling (completions cut short on an H200). The graph is
    stood in for here (torch's CUDA calls), its replay counted."""
    import gc
    import weakref

    class Stream:
        def wait_stream(self, other):
            pass

    replays = []

    class Graph:
        def replay(self):
            replays.append(1)

    monkeypatch.setattr(torch.cuda, "Stream", lambda device: Stream())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", lambda g: contextlib.nullcontext())

    def made():
        t = torch.zeros(1, dtype=torch.long)  # held by the step alone, as the sampler's is
        return lm_decoding.replayed(lambda: t.add_(1), torch.device("cuda"), [t]), weakref.ref(t)

    replay, t = made()
    gc.collect()
    assert t() is not None  # alive (the stand-in's capture runs the step, as CUDA's does not)
    replay()
    assert replays == [1]
    del replay
    gc.collect()
    assert t() is None  # held by the replay, not leaked


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_the_captured_cuda_step_gives_the_eager_steps_tokens(family, dtype, monkeypatch):
    """On CUDA the step is captured once as a CUDA graph and replayed (the direct Llama's
    static cache; Qwen3's through ``transformers``' ``StaticCache``): the tokens of the eager
    step on a growing cache (the CPU's way), log-probs within float32 rounding (bf16: within
    its own), and one capture a sampling; three captured samplings, each the eager one's (a
    graph's fault can depend on what the allocator hands out, and change from one to the
    next: the freed step index did)."""
    from eligibility.lm.edge import device

    model = (_llama(4) if family == "llama" else _qwen3()).cuda()
    captures = []
    own = lm_decoding.replayed
    monkeypatch.setattr(lm_decoding, "replayed", lambda *a: (captures.append(1), own(*a))[1])
    runs = []
    for fixed in (False, True, True, True):
        monkeypatch.setattr(lm_decoding, "fixed_shapes", lambda d, fixed=fixed: fixed)
        with device.precision(dtype, torch.device("cuda")):
            runs.append(sample(model, _groups(4), vocab_size=V - 2, max_new_tokens=24,
                               temperature=TAU, rng=np.random.default_rng(6),
                               sampling=TRUNCATIONS["penalty"]))  # fmt: skip
    assert len(captures) == 3
    eager, *graphs = runs
    atol = 1e-4 if dtype == "float32" else 5e-2
    for graph in graphs:
        assert torch.equal(graph.completion_ids, eager.completion_ids)
        torch.testing.assert_close(graph.logps, eager.logps, rtol=0, atol=atol)


def test_the_truncated_scorer_in_chunks_is_the_whole_pass(monkeypatch):
    """Under truncation the scorer makes its [n, T, V] logits a chunk of rows at a time and
    again in the backward pass: ln π̃, ln π_τ, the tokens outside and the gradient are those
    of one pass over the whole batch (within float32 rounding), and the chunks were used."""
    from eligibility.lm.sample import truncated_token_logps

    model, s = _llama(5), TRUNCATIONS["penalty"]
    batch = sample(model, _groups(), vocab_size=V - 2, max_new_tokens=8, temperature=TAU,
                   rng=np.random.default_rng(7), sampling=s)  # fmt: skip
    calls = []
    own = lm_sample.truncation.scored
    monkeypatch.setattr(lm_sample.truncation, "scored", lambda z, *a: (calls.append(len(z)),
                                                                        own(z, *a))[1])  # fmt: skip

    def scored():
        model.zero_grad()
        got = truncated_token_logps(model, batch, vocab_size=V - 2, temperature=TAU, sampling=s)
        got.logps.sum().backward()
        return got, torch.cat([p.grad.flatten() for p in model.parameters()])

    whole, g_whole = scored()
    t = batch.completion_ids.shape[1]
    monkeypatch.setattr(lm_sample, "SCORED_BYTES", 4 * t * (V - 2) * 5)  # 5 rows a chunk
    calls.clear()
    parts, g_parts = scored()
    assert sorted(calls) == [2, 2, 5, 5, 5, 5]  # 12 rows in chunks, again in the backward
    for a, b in zip(parts, whole, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    torch.testing.assert_close(g_parts, g_whole, rtol=1e-5, atol=1e-6)


def test_the_transformers_static_cache_step_holds_against_the_old_sampler(monkeypatch):
    """A family the direct forward does not reproduce, with the fixed-shape step CUDA captures
    (``transformers``' ``StaticCache``, a 4D mask) run eagerly here: the reference's tokens
    (every row to the end), log-probs within float32 rounding."""
    import transformers as tf

    _captured_as_on_cuda(monkeypatch)
    model = _qwen3()
    decoding = lm_forward.forward_of(model).decoding
    assert decoding.__self__.config is not None  # a StaticCache can hold its cache
    steps = []
    kind = lm_decoding.TransformersStaticDecoding
    own = kind._model_step
    step = lambda self, pos: (steps.append(type(self.cache)), own(self, pos))[1]  # noqa: E731
    monkeypatch.setattr(kind, "_model_step", step)
    ours, ref, rngs = _both(model, _groups(), seed=5, drop_every=None)
    assert steps and set(steps) == {tf.StaticCache}  # the static step ran, on its cache
    tokens, _, logps, ended, _, _ = ref
    assert torch.equal(ours.completion_ids, tokens) and torch.equal(ours.ended, ended)
    torch.testing.assert_close(ours.logps, logps, rtol=0, atol=1e-5)
    assert rngs[0].bit_generator.state == rngs[1].bit_generator.state
