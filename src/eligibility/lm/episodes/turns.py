r"""The live episodes' keys and values, kept from turn to turn: each context extends the last.

An episode's next context is its last one with its reply and the world's answer appended
(:meth:`~eligibility.lm.episodes.episode.Episode.context`), so the keys and values of what the
model has read stay valid: a turn gives the model the world's new tokens alone, on the cache of
everything before, and samples the reply a token a step on it. The cache's rows are the live
episodes: the prompts left-padded, then every token since; a pad (a reply's EOS padding after
its end, the left padding of a turn's new tokens) is masked out and counted in no position
(positions count the real tokens, ``lm.edge.forward.positions``), so each row's logits are those
of its context computed whole, as ``lm.sample.sample`` computes them on a fresh cache.

The decode loop is the sampler's (``lm.sample.decode``): :class:`Turns` is its model side, as
``lm.edge.decoding.Decoding`` is for fresh prompts, so the uniforms, their rewind, the host
reads and the truncation (the kept sets recorded, ``lm.truncation``) are those of
``lm.sample.sample``. A reply's last tokens the loop did not feed (it stops at a host read, or
at T) are fed with the world's answer at the next turn (:meth:`Turns.catch_up`). So the tokens,
the log-probs and the generator's state are those of ``lm.sample.sample`` on each episode's
whole context, turn by turn, up to float rounding in the logits (a test holds them).

It runs where the model's cache rows can be indexed (finished episodes leave it) and its
attention is full (a sliding window counts the pads among the positions it spans).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from eligibility.lm.policy import Policy, device_of, forward_of, largest_in_lockstep
from eligibility.lm.sample import Completions, decode, distinct, left_pad
from eligibility.lm.truncation import Sampling


def keeps_cache(model: nn.Module | Policy) -> bool:
    """Whether :class:`Turns` runs on ``model``: rows it can index, full attention.

    The built-in model's cache is a list of per-layer tensors; the direct forward reproduces
    full-attention Llamas only; the other ``transformers`` kinds carry a config where every
    layer attends to all (``Forward.config``, the one ``StaticCache`` stands for).
    """
    forward = forward_of(model)
    if not forward.shares:
        return False
    return forward.kind == "plain" or forward.direct is not None or forward.config is not None


class Turns:
    """Every live episode's cache, its mask and the logits of its next token.

    The sampler's model side for a reply (``lm.sample.decode``): ``rows`` (every row of the
    cache), ``z``, :meth:`advance` and :meth:`shrink` as ``lm.edge.decoding.Decoding`` has them
    (the shapes not fixed; no row leaves during a reply: the cache's rows are the episodes').

    Args:
        model: the policy (or a bare causal LM).
        prompts: each episode's prompt.
        vocab_size: V.
        eos_id: EOS (and the pad).
    """

    fixed = False

    @torch.no_grad()
    def __init__(
        self,
        model: nn.Module | Policy,
        prompts: Sequence[Sequence[int]],
        *,
        vocab_size: int,
        eos_id: int,
    ) -> None:
        self.forward, self.largest = forward_of(model), largest_in_lockstep(model)
        self.device, self.v, self.eos = device_of(model), vocab_size, eos_id
        ids, mask = (x.to(self.device) for x in left_pad(prompts, eos_id))
        out, self.cache = self.forward.prompts(ids, mask, distinct(prompts))
        self.mask = mask
        self.z = self.forward.logits(out[:, -1], vocab_size)
        self.fed = [len(p) for p in prompts]  # each row's context tokens in the cache
        self.rows = torch.arange(len(prompts), device=self.device)  # the sampler computes all
        self.steps = 0  # the reply's tokens fed so far (:meth:`advance`)

    def keep(self, rows: Sequence[int]) -> None:
        """Only ``rows`` of the cache (the episodes still going), in that order."""
        if list(rows) == list(range(len(self.fed))):
            return
        index = torch.tensor(list(rows), dtype=torch.long, device=self.device)
        self.cache = self.forward.expand(self.cache, index)
        self.mask, self.z = self.mask.index_select(0, index), self.z.index_select(0, index)
        self.fed = [self.fed[r] for r in rows]
        self.rows = self.rows[: len(self.fed)]

    @torch.no_grad()
    def feed(self, tokens: torch.Tensor, real: torch.Tensor) -> None:
        """Append ``tokens`` [m, w], left-padded (``real`` [m, w] 1 on a token, 0 on a pad).

        A row given a token takes the logits after its last one; a row given none keeps its own.
        """
        self.mask = torch.cat([self.mask, real], dim=1)
        out, self.cache = self.forward(tokens, self.mask, self.cache, use_cache=True, last=True)
        z = self.forward.logits(out[:, -1], self.v)
        self.z = torch.where(real[:, -1:].bool(), z, self.z)

    def catch_up(self, contexts: Sequence[Sequence[int]]) -> None:
        """Feed each row what its context has beyond the cache (a reply's last, the world's)."""
        new = [list(c[f:]) for c, f in zip(contexts, self.fed, strict=True)]
        if any(new):
            ids, real = left_pad(new, self.eos, 1)
            self.feed(ids.to(self.device), real.to(self.device))
        self.fed = [len(c) for c in contexts]

    def advance(self, t: int, tokens: torch.Tensor, live: torch.Tensor) -> None:
        """The sampler's step: feed step ``t``'s ``tokens`` [n] (``live`` [n]: a row's token)."""
        self.feed(tokens[:, None], live.long()[:, None])
        self.steps = t + 1

    def shrink(self, going: torch.Tensor) -> None:
        """No row leaves during a reply (an ended one is fed pads: the next turn reads it)."""

    @torch.no_grad()
    def reply(
        self,
        contexts: Sequence[Sequence[int]],
        t_max: int,
        temperature: float,
        rng: np.random.Generator | None,
        share: tuple[slice, int] | None = None,
        sampling: Sampling | None = None,
    ) -> Completions:
        """A reply of at most ``t_max`` tokens for every row, on its context (``contexts``).

        The context's tokens beyond the cache are fed first (:meth:`catch_up`). ``share``:
        ``(columns, total)``, these rows are those columns of a turn of ``total`` rows (a
        rank's), as ``lm.sample.sample``'s. Returns the replies as it does, the generator
        where this rank's steps leave it.
        """
        self.catch_up(contexts)
        n = len(self.fed)
        ids, mask = (x.to(self.device) for x in left_pad(contexts, self.eos))
        self.steps = 0
        replies = decode(
            self,
            ids,
            mask,
            max_new_tokens=t_max,
            vocab_size=self.v,
            temperature=temperature,
            rng=rng,
            eos_id=self.eos,
            share=share or (slice(0, n), n),
            sampling=sampling,
            largest=self.largest,
        )
        fed = replies.completion_mask[:, : self.steps].sum(1).tolist()  # the rest: next turn
        self.fed = [f + int(k) for f, k in zip(self.fed, fed, strict=True)]
        return replies


__all__ = ["Turns", "keeps_cache"]
