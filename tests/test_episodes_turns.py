"""The live episodes' keys and values kept from turn to turn (``lm.episodes.turns``): the tokens,
the log-probs and the generator's state those of the sampler run on each turn's whole contexts
(``lm.sample.sample``, a fresh cache each turn), for the built-in model and (slow: importing
``transformers``) its Llama (direct and decoder forwards), GPT-2 and Qwen3; a sliding window
computes the contexts whole."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility.lm.edge.model import TinyLM  # noqa: E402
from eligibility.lm.episodes.episode_rollout import play  # noqa: E402
from eligibility.lm.episodes.turns import keeps_cache  # noqa: E402
from eligibility.lm.tasks import Answer, guess_task  # noqa: E402

V = 24


class Echo:
    """A world that answers 0 to 3 tokens (its count from the reply) and ends on a reply of 4."""

    def __init__(self, i: int) -> None:
        self.i = i

    def step(self, reply, ended):
        if reply[:1] == [4]:
            return Answer((), reward=1.0, done=True)
        n = (sum(reply) + self.i) % 4  # 0 tokens: the model replies again on its own context
        return Answer(tuple(5 + (self.i + k) % 5 for k in range(n)), reward=0.1 * n)


def echo_task():
    """Prompts of 1 to 4 tokens (two alike: a shared prompt), answers of 0 to 3, K = 4."""
    prompts = ((1,), (2, 3), (1,), (3, 4, 5), (6, 7, 8, 9))
    return dataclasses.replace(guess_task(), prompts=prompts, world=Echo, max_turns=4)


def both(model, task, index, **kw):
    """The episodes and the generator's next draw, on the kept cache and computed whole."""
    out = []
    for cache in (True, False):
        rng = None if kw.get("greedy") else np.random.default_rng(3)
        batch = play(model, task, index, t_max=3, temperature=1.3, rng=rng, cache=cache)
        out.append((batch, None if rng is None else rng.random()))
    return out


def assert_same(kept, whole):
    (a, u), (b, w) = kept, whole
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert torch.equal(a.completion_mask, b.completion_mask)
    assert torch.equal(a.turn, b.turn) and torch.equal(a.turn_rewards, b.turn_rewards)
    torch.testing.assert_close(a.logps, b.logps, rtol=0, atol=1e-5)
    assert u == w  # the generator left where the sampler leaves it


@pytest.mark.parametrize("greedy", [False, True])
def test_the_kept_cache_plays_the_episodes_computed_whole(greedy):
    task = echo_task()
    torch.manual_seed(0)
    model = TinyLM(V, 16, 2, 2, 64)
    assert keeps_cache(model)
    kept, whole = both(model, task, [0, 1, 2, 3, 4] * 3, greedy=greedy)
    assert_same(kept, whole)
    batch = kept[0]
    if not greedy:
        assert len(set(batch.turns.tolist())) > 1  # episodes left at different turns
        assert ((batch.completion_mask == 0) & (batch.turn >= 0)).any()  # the world spoke


def test_the_built_in_game_on_the_kept_cache():
    task = guess_task()
    torch.manual_seed(1)
    model = TinyLM(task.vocab_size, 8, 1, 2, 16)
    assert_same(*both(model, task, [0, 1, 2, 3, 4] * 4))


def _hf(name):
    tf = pytest.importorskip("transformers")
    small = dict(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                 bos_token_id=1, eos_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = tf.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                            bos_token_id=1, eos_token_id=0)  # fmt: skip
        return tf.GPT2LMHeadModel(cfg).eval()
    if name == "qwen3":
        return tf.Qwen3ForCausalLM(tf.Qwen3Config(**small, attention_bias=True)).eval()
    if name == "mistral-window":
        return tf.MistralForCausalLM(tf.MistralConfig(**small, sliding_window=4)).eval()
    return tf.LlamaForCausalLM(tf.LlamaConfig(**small)).eval()


@pytest.mark.slow  # importing transformers takes seconds
@pytest.mark.parametrize(
    ("name", "direct"),
    [("llama", "1"), ("llama", "0"), ("gpt2", "1"), ("qwen3", "1")],
)
def test_transformers_models_keep_their_cache_across_turns(monkeypatch, name, direct):
    monkeypatch.setenv("ELIGIBILITY_DIRECT_FORWARD", direct)
    model = _hf(name)
    assert keeps_cache(model)
    assert_same(*both(model, echo_task(), [0, 1, 2, 3, 4] * 2))


@pytest.mark.slow
def test_a_sliding_window_computes_each_turns_contexts_whole():
    """A window spans positions, pads among them: the cache is not kept (the same episodes)."""
    model = _hf("mistral-window")
    assert not keeps_cache(model)
    assert_same(*both(model, echo_task(), [0, 1, 2, 3, 4]))


NO_CUDA = (
    f"no CUDA device: torch {torch.__version__} (CUDA build {torch.version.cuda}) sees none "
    "here; these run where one is, under `make gpu` (`make test` hides it: tests/conftest.py)"
)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_on_cuda_the_kept_cache_plays_the_captured_samplers_episodes(name):
    """On CUDA the contexts computed whole are sampled by the captured fixed-shape step (the
    direct Llama's static cache, Qwen3's ``StaticCache``); the kept cache steps eagerly: the
    same tokens, log-probs within float32 rounding, the generator left alike."""
    model = _hf(name).cuda()
    assert keeps_cache(model)
    kept, whole = both(model, echo_task(), [0, 1, 2, 3, 4] * 4)
    (a, u), (b, w) = kept, whole
    assert torch.equal(a.completion_ids, b.completion_ids) and u == w
    torch.testing.assert_close(a.logps, b.logps, rtol=0, atol=1e-4)
