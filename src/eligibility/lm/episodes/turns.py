r"""The live episodes' keys and values, kept from turn to turn: each context extends the last.

An episode's next context is its last one with its reply and the world's answer appended
(:meth:`~eligibility.lm.episodes.episode.Episode.context`), so the keys and values of what the
model has read stay valid: a turn gives the model the world's new tokens alone, on the cache of
everything before, and samples the reply a token a step on it. The cache's rows are the live
episodes: the prompts left-padded, then every token since; a pad (a reply's EOS padding after
its end, the left padding of a turn's new tokens) is masked out and counted in no position
(positions count the real tokens, ``lm.edge.forward.positions``), so each row's logits are those
of its context computed whole, as ``lm.sample.sample`` computes them on a fresh cache.

The draws are the sampler's: T uniforms a live row drawn up front (step t's row t), each token
drawn and recorded by the sampler's own step (``lm.sample.draw_step``), the generator then set where
one a row and step for the steps taken leaves it. So the tokens, the log-probs and the
generator's state are those of ``lm.sample.sample`` on each episode's whole context, turn by
turn, up to float rounding in the logits (a test holds them).

It runs where the model's cache rows can be indexed (finished episodes leave it) and its
attention is full (a sliding window counts the pads among the positions it spans).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from eligibility.lm.policy import device_of, forward_of, largest_in_lockstep
from eligibility.lm.sample import CHECK_EVERY, Completions, Record, distinct, draw_step, left_pad


def keeps_cache(model: Any) -> bool:
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

    Args:
        model: the policy (or a bare causal LM).
        prompts: each episode's prompt.
        vocab_size: V.
        eos_id: EOS (and the pad).
    """

    @torch.no_grad()
    def __init__(
        self, model: Any, prompts: Sequence[Sequence[int]], *, vocab_size: int, eos_id: int
    ) -> None:
        self.forward, self.largest = forward_of(model), largest_in_lockstep(model)
        self.device, self.v, self.eos = device_of(model), vocab_size, eos_id
        ids, mask = (x.to(self.device) for x in left_pad(prompts, eos_id))
        out, self.cache = self.forward.prompts(ids, mask, distinct(prompts))
        self.mask = mask
        self.z = self.forward.logits(out[:, -1], vocab_size)
        self.fed = [len(p) for p in prompts]  # each row's context tokens in the cache

    def keep(self, rows: Sequence[int]) -> None:
        """Only ``rows`` of the cache (the episodes still going), in that order."""
        if list(rows) == list(range(len(self.fed))):
            return
        index = torch.tensor(list(rows), dtype=torch.long, device=self.device)
        self.cache = self.forward.expand(self.cache, index)
        self.mask, self.z = self.mask.index_select(0, index), self.z.index_select(0, index)
        self.fed = [self.fed[r] for r in rows]

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
        """Feed each row what its context has beyond the cache (the world's answer)."""
        new = [list(c[f:]) for c, f in zip(contexts, self.fed, strict=True)]
        if any(new):
            ids, real = left_pad(new, self.eos, 1)
            self.feed(ids.to(self.device), real.to(self.device))
        self.fed = [len(c) for c in contexts]

    @torch.no_grad()
    def reply(
        self,
        t_max: int,
        temperature: float,
        rng: np.random.Generator | None,
        share: tuple[slice, int] | None = None,
    ) -> Completions:
        """A reply of at most ``t_max`` tokens for every row, each token fed as it is drawn.

        ``share``: ``(columns, total)``, these rows are those columns of a turn of ``total``
        rows (a rank's): each step's ``total`` uniforms drawn, the columns' used, as
        ``lm.sample.sample``'s ``share``. Returns the replies as it does (no prompts: the
        contexts are held here), the generator where this rank's steps leave it.
        """
        n = len(self.fed)
        mine, total = share or (slice(0, n), n)
        state = None if rng is None else rng.bit_generator.state
        u = None
        if rng is not None:
            u = torch.from_numpy(np.ascontiguousarray(rng.random((t_max, total))[:, mine]))
            u = u.to(self.device)
        rows = torch.arange(n, device=self.device)
        r = Record.empty(rows[:, None], None, t_max, self.v, self.eos, None)  # the sampler's
        for t in range(t_max):
            tok, _ = draw_step(r, t, self.z, rows, None if u is None else u[t], temperature,
                               None, self.eos)  # fmt: skip
            self.feed(tok[:, None], r.mask[:, t : t + 1])
            if (t % CHECK_EVERY == CHECK_EVERY - 1) and not self.largest(int(r.alive.any())):
                break
        tokens, mask, logps, alive = r.tokens, r.mask, r.logps, r.alive
        steps = self.largest(int(mask.any(0).sum()))
        if rng is not None:  # where one draw a row and step, for the steps taken, leaves it
            rng.bit_generator.state = state
            rng.random(steps * total)
        self.fed = [f + int(k) for f, k in zip(self.fed, mask.sum(1).tolist(), strict=True)]
        empty = torch.zeros((n, 0), dtype=torch.long, device=self.device)
        return Completions(empty, empty, tokens[:, :steps], mask[:, :steps], logps[:, :steps],
                           ended=~alive)  # fmt: skip


__all__ = ["Turns", "keeps_cache"]
