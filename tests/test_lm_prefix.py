"""The prompts' common prefix computed once: the same outputs, cache and greedy tokens.

Truth: the prompts computed whole (the forward without ``prefix``), and ``transformers``' own
greedy ``generate`` of each prompt alone, on random Llamas small enough to run in milliseconds.
"""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import test_lm_decode  # noqa: E402
from eligibility.lm.edge.forward import Forward, common_prefix, forward_of, positions  # noqa: E402
from eligibility.lm.sample import distinct, left_pad, sample  # noqa: E402

V = 24
HEAD = [1, 7, 3, 9, 4, 4, 11]  # a system turn every prompt starts with


def _llama(seed: int = 0):
    """The decode tests' small Llama (GQA, 2 layers), at this file's vocabulary."""
    return test_lm_decode.llama(seed, vocab=V)


PROMPTS = {
    "padded": [[*HEAD, 5, 6], [*HEAD, 8], [*HEAD, 12, 13, 14, 15], [*HEAD, 8]],
    "same lengths": [[*HEAD, 5, 6], [*HEAD, 8, 2], [*HEAD, 16, 6]],
    "one differs at once": [[*HEAD, 5], [2, *HEAD]],
    "one is another's head": [HEAD, [*HEAD, 5, 6, 7]],
}


def test_the_common_prefix_is_the_longest_head_that_leaves_each_row_a_token():
    """c by enumeration: the longest j such that every row's real tokens agree on the first j,
    at most the shortest row's length − 1; none under MIN_PREFIX tokens, none for one row."""
    for name, prompts in PROMPTS.items():
        ids, mask = left_pad(prompts, 0)
        c, head = common_prefix(ids, mask)
        shortest = min(len(p) for p in prompts)
        agree = 0
        while agree < shortest and len({tuple(p[: agree + 1]) for p in prompts}) == 1:
            agree += 1
        want = min(agree, shortest - 1)
        want = want if want >= 2 else 0
        assert c == want, name
        assert (head is None) == (c == 0) and (c == 0 or head.tolist() == prompts[0][:c])
    assert common_prefix(*left_pad([[*HEAD, 5]], 0)) == (0, None)  # one row


@pytest.mark.parametrize("name", list(PROMPTS))
def test_the_prompts_after_their_prefix_are_the_prompts_computed_whole(name):
    """The last position's hidden states and every real key and value (each in the prompts'
    own left-padded layout) as the whole prompts give them, to float32 rounding."""
    model = _llama()
    whole = forward_of(model)
    assert whole.kind == "direct"
    shared = dataclasses.replace(whole, prefix=True)
    prompts = PROMPTS[name]
    ids, mask = left_pad(prompts, 0)
    groups = distinct(prompts)
    masked = mask if whole.masked(mask) else None
    with torch.no_grad():
        out0, cache0 = whole.prompts(ids, masked, groups)
        out1, cache1 = shared.prompts(ids, masked, groups)
    torch.testing.assert_close(out1, out0, atol=1e-5, rtol=1e-5)
    real = mask.bool()
    for (k0, v0), (k1, v1) in zip(cache0, cache1, strict=True):
        assert k1.shape == k0.shape
        for a, b in ((k0, k1), (v0, v1)):
            torch.testing.assert_close(b.transpose(1, 2)[real], a.transpose(1, 2)[real],
                                       atol=1e-5, rtol=1e-5)  # fmt: skip


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_tokens_after_the_prefix_are_transformers_generate_of_each_prompt(seed, monkeypatch):
    """Greedy completions with the prefix computed once: the tokens of the sampler without it
    and of ``generate`` (greedy) on each prompt alone, EOS and the length cut included."""
    model = _llama(seed)
    prompts = PROMPTS["padded"] + [[*HEAD, 3, 3, 3], [*HEAD, 20]]
    t_max = 6
    heads = []
    after = Forward.after_prefix
    monkeypatch.setattr(
        Forward, "after_prefix", lambda f, i, m, h: heads.append(h) or after(f, i, m, h)
    )
    got = sample(model, prompts, vocab_size=V, max_new_tokens=t_max, eos_id=0, prefix=True)
    assert [h.tolist() for h in heads] == [HEAD]
    plain = sample(model, prompts, vocab_size=V, max_new_tokens=t_max, eos_id=0)
    assert got.completions() == plain.completions()
    assert torch.equal(got.ended, plain.ended)
    for p, tokens, ended in zip(prompts, got.completions(), got.ended.tolist(), strict=True):
        with torch.no_grad():
            ref = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p)),
                                 max_new_tokens=t_max, do_sample=False, eos_token_id=0,
                                 pad_token_id=0)[0, len(p) :].tolist()  # fmt: skip
        want = ref[: ref.index(0)] if 0 in ref else ref
        assert tokens == want and ended == (0 in ref)


def test_positions_count_real_tokens_in_the_layout_the_rest_is_computed_in():
    """[head | pads | rest]: the rest's positions follow the head's, the pads not counted."""
    mask = torch.tensor([[1, 1, 1, 0, 0, 1, 1]])
    assert positions(mask)[0, 5:].tolist() == [3, 4]
