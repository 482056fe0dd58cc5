"""The sampler on a ``transformers`` Llama, against a plain loop that re-runs the whole prefix.

Slow (importing ``transformers`` takes seconds); the default suite's representative is
``test_lm.py::test_sampler_matches_plain_loop_and_trainer_logps`` on the built-in model. These
cover the path only a ``transformers`` model takes: a batch with no pad is run with no mask
(positions from the cache, causal attention), and one with pads with the mask.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from eligibility.lm.sample import _draw, sample, token_logps
from test_lm import _Replay

pytestmark = pytest.mark.slow

EOS = 0


def _llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=12,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
        bos_token_id=1,
        eos_token_id=EOS,
    )
    return LlamaForCausalLM(cfg).eval()


@torch.no_grad()
def _plain_loop(model, prompt, v, t_max, tau, rng):
    """One prompt, no cache, no padding: the whole prefix through the model at every step."""
    ids, lps = list(prompt), []
    for _ in range(t_max):
        z = model(input_ids=torch.tensor([ids])).logits[0, -1, :v]
        logp = F.log_softmax(z / tau, -1)
        tok = int(_draw(logp[None], rng)[0])
        ids.append(tok)
        lps.append(float(logp[tok]))
        if tok == EOS:
            break
    return ids[len(prompt) :], lps


@pytest.mark.parametrize(
    "prompts",
    [
        [(1, 3, 4), (1, 5, 6), (1, 7, 8), (1, 9, 10)],  # no pad: the unmasked path
        [(1, 3), (1, 5, 6, 7), (1, 8, 9), (1, 10)],  # pads: the masked path
    ],
    ids=["same-length", "padded"],
)
def test_llama_sampler_draws_the_plain_loops_tokens(prompts):
    model, v, t_max, tau = _llama(), 10, 6, 0.8
    batch = sample(
        model,
        prompts,
        vocab_size=v,
        max_new_tokens=t_max,
        temperature=tau,
        rng=np.random.default_rng(3),
    )
    u = np.random.default_rng(3).random((t_max, len(prompts)))
    for i, p in enumerate(prompts):
        toks, lps = _plain_loop(model, p, v, t_max, tau, _Replay(u, i))
        n = int(batch.lengths[i])
        assert batch.completion_ids[i, :n].tolist() == toks
        torch.testing.assert_close(batch.logps[i, :n], torch.tensor(lps), atol=1e-5, rtol=0)
        assert bool(batch.ended[i]) == (toks[-1] == EOS)
    # the scoring pass: log π_τ of the same tokens from one forward, against log_softmax
    recomputed = token_logps(model, batch, vocab_size=v, temperature=tau)
    torch.testing.assert_close(recomputed, batch.logps, atol=1e-5, rtol=0)


def test_llama_greedy_is_the_plain_loops_argmax():
    model, prompts = _llama(1), [(1, 4, 4), (1, 6, 2)]
    batch = sample(model, prompts, vocab_size=12, max_new_tokens=5)
    for i, p in enumerate(prompts):
        ids = list(p)
        for _ in range(5):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
            if ids[-1] == EOS:
                break
        assert batch.completion_ids[i, : int(batch.lengths[i])].tolist() == ids[len(p) :]
